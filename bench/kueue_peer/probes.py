"""Setting up queuemgr's side of the Kueue race, and reading what it cost.

Why it exists: ``run_queuemgr.py`` keeps the run's order and figures; this
holds the pieces it calls: the cluster objects (namespaces, PriorityClasses,
the one quota-sized Node) and the queues in Postgres, the watch that feeds
the runner, stopping ``queuemgr serve`` and reading its rusage, and the
readings before and after the stream (the apiserver's
``apiserver_request_total``, Postgres's CPU, ``/proc/stat``), plus
queuemgr's own ``/metrics`` and rows. ``run_kueue.py`` reads the request
counts of Kueue's apiserver with the same ``api_requests`` and ``by_verb``,
so both sides' counts are split alike.

What must stay true: the queues go through the same strict parser as
``queuemgr apply`` (``parse_scenario``), so the file shape is the one an
operator writes; a reading whose source is absent (a remote Postgres,
queuemgr's ``/metrics`` gone) gives None or nothing, never a guess.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.kueue_peer.runner import Runner
from bench.kueue_peer.stream import Baseline, priority_class
from queuemgr.k8s.jobs import QUEUE_LABEL
from queuemgr.k8s.reflector import Reflector
from queuemgr.spec.scenario import parse_scenario
from queuemgr.store import config_objects as store_config
from queuemgr.store.cohorts import upsert_cohort
from queuemgr.store.database import create_engine
from tests.controlplane.harness import add_gpu_node

ACTOR = "bench:kueue-peer"
NODE = "quota"
ROOT = Path(__file__).resolve().parents[2]
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def revision() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


# -- setup ---------------------------------------------------------------------------------
def setup_cluster(plane: Any, baseline: Baseline) -> None:
    """A namespace per ClusterQueue, a PriorityClass per priority, and one Node holding
    the whole nominal quota (queuemgr places pods; this way nodes never bind)."""
    with plane.api_client() as admin:
        core = client.CoreV1Api(admin)
        for q in baseline.queues:
            core.create_namespace({"metadata": {"name": q.name}})
        scheduling = client.SchedulingV1Api(admin)
        for value in sorted(baseline.priorities()):
            body = {"metadata": {"name": priority_class(value)}, "value": value}
            scheduling.create_priority_class(body)
        add_gpu_node(admin, NODE, gpus=0, cpu=f"{baseline.nominal_cpu():g}", memory="4Ti")


def setup_queues(db_url: str, baseline: Baseline) -> None:
    """The flavor, cohorts, ClusterQueues and LocalQueues, as ``queuemgr apply`` writes them."""
    config = parse_scenario({**baseline.queues_document(), "nodes": []}).config
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            for flavor in config.flavors.values():
                store_config.upsert_flavor(conn, flavor, actor=ACTOR)
            for cohort in config.cohorts.values():
                upsert_cohort(conn, cohort, actor=ACTOR)
            for cq in config.cluster_queues.values():
                store_config.upsert_cluster_queue(conn, cq, actor=ACTOR)
            for lq in config.local_queues.values():
                store_config.upsert_local_queue(conn, lq, actor=ACTOR)
    finally:
        engine.dispose()


def start_runner(plane: Any, expected: int) -> tuple[Reflector, Runner]:
    """The runner, fed by a watch of the labelled Jobs of every namespace."""
    jobs = client.BatchV1Api(plane.api_client(connection_pool_maxsize=4))

    def lister(**kwargs: Any) -> Any:
        return jobs.list_job_for_all_namespaces(label_selector=QUEUE_LABEL, **kwargs)

    writer = client.BatchV1Api(plane.api_client(connection_pool_maxsize=8))
    runner = Runner(writer, lambda key: watch.get(key), expected)
    watch = Reflector("kueue-peer-jobs", lister, runner.on_event)
    watch.start()
    if not watch.wait_synced(60):
        watch.stop()
        runner.stop()
        raise RuntimeError("the Job watch did not list within 60 s")
    return watch, runner


def stop_and_reap(
    proc: subprocess.Popen[bytes], timeout: float = 60
) -> tuple[float | None, float | None]:
    """SIGTERM, reap with wait4; (CPU seconds, peak RSS MiB) of its whole life."""
    if proc.returncode is not None:  # it died and was reaped already: nothing to read
        return None, None
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            return None, None
        if pid:
            proc.returncode = 0  # reaped here: Popen must not wait again
            return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
        if time.monotonic() > deadline:
            proc.kill()
            deadline = float("inf")
        time.sleep(0.1)


# -- readings ------------------------------------------------------------------------------
def _get(
    url: str,
    token: str | None = None,
    ca_file: str | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if context is None and ca_file:
        context = ssl.create_default_context(cafile=ca_file)
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return response.status, response.read().decode()


def _samples(text: str, prefix: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(prefix):
            head, _, value = line.rpartition(" ")
            name = head.split("{", 1)[0]
            out.append((name, dict(_LABEL.findall(head)), float(value)))
    return out


def queuemgr_leads(port: int) -> bool:
    try:
        status, _ = _get(f"http://127.0.0.1:{port}/readyz")
        _, text = _get(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return False
    return status == 200 and any(v == 1 for _, _, v in _samples(text, "queuemgr_leader{"))


def queuemgr_metrics(port: int) -> dict[str, float]:
    """queuemgr's own counts: admissions, evictions (by reason), preemptions, the loop's
    seconds per phase and the admission-to-start latency's sum and count."""
    try:
        _, text = _get(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return {}
    out: dict[str, float] = {}
    for name, labels, value in _samples(text, "queuemgr_"):
        if name in ("queuemgr_admitted_workloads_total", "queuemgr_preempted_workloads_total"):
            out[name] = out.get(name, 0) + value
        elif name in (
            "queuemgr_admission_start_seconds_sum",
            "queuemgr_admission_start_seconds_count",
        ):
            out[name] = value
        elif name == "queuemgr_cycle_phase_seconds_total":
            key = f"{name}{{phase={labels.get('phase', '')}}}"
            out[key] = value
        elif name == "queuemgr_evicted_workloads_total":
            key = f"{name}{{reason={labels.get('reason', '')}}}"
            out[key] = out.get(key, 0) + value
    return out


def _stat(pid: int | str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def postgres_cpu(db_url: str) -> float | None:
    """CPU seconds of a local Postgres server so far: the postmaster with its reaped
    children, plus its live children (backends, walwriter...). None when not local."""
    host = make_url(db_url).query.get("host")
    host = host[0] if isinstance(host, tuple) else host
    if not host:
        return None
    try:
        pid = int((Path(host) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    root = _stat(pid)
    if root is None:
        return None
    ticks = sum(int(root[i]) for i in (11, 12, 13, 14))
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None and fields[1] == str(pid):
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _machine() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from ``/proc/stat``."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def api_requests(
    url: str,
    token: str | None = None,
    ca_file: str | None = None,
    context: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """``apiserver_request_total`` from an apiserver's ``/metrics`` at ``url``: the sum, and
    ``by_verb`` keyed ``VERB resource[/subresource]`` (``-`` for non-resource paths)."""
    _, text = _get(url, token, ca_file, context)
    counts: dict[str, float] = {}
    for _, labels, value in _samples(text, "apiserver_request_total{"):
        sub = labels.get("subresource")
        key = f"{labels.get('verb')} {labels.get('resource') or '-'}{'/' + sub if sub else ''}"
        counts[key] = counts.get(key, 0) + value
    return {"requests": sum(counts.values()), "by_verb": counts}


def snapshot(plane: Any, db_url: str) -> dict[str, Any]:
    requests = api_requests(f"{plane.url}/metrics", plane.admin_token, str(plane.ca_file))
    return {**requests, "postgres_cpu": postgres_cpu(db_url), "machine": _machine()}


def delta(before: dict[str, Any], after: dict[str, Any], key: str) -> float | None:
    if before.get(key) is None or after.get(key) is None:
        return None
    return float(after[key] - before[key])


def by_verb(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    old = before["by_verb"]
    moved = {k: int(v - old.get(k, 0)) for k, v in after["by_verb"].items()}
    return dict(sorted(((k, v) for k, v in moved.items() if v), key=lambda kv: -kv[1]))


def busy_percent(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    (busy0, total0), (busy1, total1) = before["machine"], after["machine"]
    return 100 * (busy1 - busy0) / (total1 - total0) if total1 > total0 else None


def store_figures(db_url: str, runner: Runner, nominal_cpu: float, span: float) -> dict[str, Any]:
    """From queuemgr's rows: quota held (store admission to finish, as Kueue's ClusterQueue
    usage counts it) against nominal quota over ``span``, and the mean lag from a Job's
    last admission in the store to its unsuspension as the watch saw it."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT namespace, name, extract(epoch FROM admitted_at),"
                    " extract(epoch FROM finished_at) FROM workloads"
                    " WHERE admitted_at IS NOT NULL"
                )
            ).all()
    finally:
        engine.dispose()
    held, lags = 0.0, []
    for namespace, name, admitted, finished in rows:
        state = runner.jobs.get(f"{namespace}/{name}")
        if state is None:
            continue
        if finished is not None:
            held += state.cpu * (float(finished) - float(admitted))
        if state.admitted_wall is not None:
            lags.append(state.admitted_wall - float(admitted))
    return {
        "cq usage (% of nominal)": 100 * held / (nominal_cpu * span) if span > 0 else None,
        "store admission to unsuspension (s)": sum(lags) / len(lags) if lags else None,
    }
