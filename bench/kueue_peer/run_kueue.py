"""Run Kueue's own scheduler benchmark (``configs/baseline``) on this machine.

    python bench/kueue_peer/run_kueue.py [--runs N] [--out DIR] [--json FILE] [--qps Q --burst B]

Why it exists: ``bench/kueue_baseline.py`` sets queuemgr beside the figures
Kueue publishes, which come from other hardware. This runs Kueue v0.17.0's
``runner`` with its ``minimalkueue`` (built by ``build.py`` beside this file)
against the etcd and kube-apiserver that ``tests/controlplane/build.py``
builds, so both sides can be measured on the same two cores.

The runner starts etcd and kube-apiserver itself (controller-runtime's
envtest, pointed at a temporary ``KUBEBUILDER_ASSETS`` of symlinks), then
minimalkueue, creates 15,000 workloads and records them until all finish (a
run takes about 7 minutes). Its files (``summary.yaml``,
``minimalkueue.stats.yaml`` (named after the binary), ``wlStates.csv``, ``cqStates.csv``,
``runner.log``) go to ``--out DIR/run-<i>``, or to a temporary directory that
is removed afterwards. While it runs, ``/proc`` of the runner's children is
sampled each second for kube-apiserver's and etcd's CPU seconds and peak RSS
(the last second before they exit is not seen).

API requests: the runner hands envtest's credentials (a client certificate
of ``system:masters``) to nobody but minimalkueue, through the ``kubeconfig``
it writes into its output directory once the apiserver is up and before
minimalkueue starts. A thread waits for that file and then reads the
apiserver's own ``/metrics`` every 5 s (``probes.api_requests``, as
``run_queuemgr.py`` reads its apiserver), keeping the first and the last
reading that succeeded; the figures are last minus first, split by verb and
resource as ``run_queuemgr.py`` splits them. It is every client of that one
apiserver: minimalkueue, the runner's own creates (15,000 ``POST
workloads``, its namespaces and queues) and its recorder's watches (they
cannot be told apart in ``apiserver_request_total``), and the apiserver's own
loopback requests; our reads of ``/metrics`` are not in that counter (a run
of 82 readings showed none). Left out: what came before the first reading
(envtest installing Kueue's CRDs, the apiserver's start: the details give
that count; minimalkueue's first requests too if it was quicker than the
first reading, which came before the runner's first namespace) and
everything after the last one, up to 5 s of the run's end and the teardown.
Per workload divides by the workloads the summary recorded (the generator's
count if it recorded none).

Figures: ``minimalkueue wall`` is the one Kueue's rangespec checks
(``cmd.maxWallMs``, published average 351 s); ``cq events span`` is the first
to the last ClusterQueue event the recorder saw; ``cq usage`` is the mean
ClusterQueue usage over that span against nominal quota.

Client budget: minimalkueue sets QPS 50 / burst 100 in its ``main.go``, with no
flag. ``--qps``/``--burst`` other than those build a copy whose only change is
those two numbers (``build.budget_minimalkueue``: the module's file, rewritten,
through ``go build -overlay``), so Kueue can run at the budget queuemgr runs at.

Exit status: 0 when every run finished, 1 when a build or run failed, 2 for a
usage error or when no ``go`` toolchain is on PATH.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.kueue_peer import build as kueue_build  # noqa: E402
from bench.kueue_peer import probes  # noqa: E402
from bench.kueue_peer.stream import load_baseline  # noqa: E402
from tests.controlplane import build as cp_build  # noqa: E402

CLASSES = ("small", "medium", "large")
WATCHED = ("kube-apiserver", "etcd")
TICK = os.sysconf("SC_CLK_TCK")
SCRAPE_INTERVAL = 5.0  # s; each read of /metrics costs the apiserver some CPU too
API_PER_WORKLOAD = "API requests / workload (all clients, last scrape before teardown)"


class RunError(RuntimeError):
    """A benchmark run failed."""


class ProcSampler(threading.Thread):
    """Sample CPU seconds and peak RSS of the named children of one process."""

    def __init__(self, parent: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.parent, self.interval = parent, interval
        self.cpu: dict[str, float] = {}
        self.peak_rss_mib: dict[str, float] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            for pid_dir in Path("/proc").iterdir():
                if pid_dir.name.isdigit():
                    self._sample(pid_dir)

    def _sample(self, pid_dir: Path) -> None:
        try:
            stat = (pid_dir / "stat").read_text()
            name = stat[stat.find("(") + 1 : stat.rfind(")")]
            fields = stat[stat.rfind(")") + 2 :].split()
            if name not in WATCHED or int(fields[1]) != self.parent:
                return
            status = (pid_dir / "status").read_text()
        except OSError:
            return
        key = f"{name}:{pid_dir.name}"  # a name may run twice only on a restart
        self.cpu[key] = (int(fields[11]) + int(fields[12])) / TICK
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                self.peak_rss_mib[key] = int(line.split()[1]) / 1024

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def total(self, name: str, values: dict[str, float]) -> float | None:
        found = [v for k, v in values.items() if k.split(":")[0] == name]
        return sum(found) if found else None


def _kubeconfig_target(path: Path) -> tuple[str, ssl.SSLContext]:
    """The ``/metrics`` URL of the current context of the kubeconfig at ``path``, and a TLS
    context trusting its CA and presenting its client certificate (data embedded, as
    Kueue's ``RestConfigToKubeConfig`` writes them)."""
    config = yaml.safe_load(path.read_text()) or {}
    current = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    tls = ssl.create_default_context(cadata=ca)
    # OpenSSL reads a client key from files only: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="kueue-peer-tls-") as private:
        cert_path, key_path = Path(private, "client.crt"), Path(private, "client.key")
        cert_path.write_bytes(base64.b64decode(user["client-certificate-data"]))
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as sink:
            sink.write(base64.b64decode(user["client-key-data"]))
        tls.load_cert_chain(cert_path, key_path)
    return f"{str(cluster['server']).rstrip('/')}/metrics", tls


class ApiScraper(threading.Thread):
    """Read ``apiserver_request_total`` of the runner's apiserver every ``interval`` seconds
    once the runner has written ``kubeconfig``; keep the first and the last good reading."""

    def __init__(self, kubeconfig: Path, interval: float = SCRAPE_INTERVAL) -> None:
        super().__init__(daemon=True)
        self.kubeconfig, self.interval = kubeconfig, interval
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.first_at = self.last_at = 0.0  # time.monotonic() of those readings
        self.started, self.stopped = time.monotonic(), 0.0  # stopped: when the runner exited
        self.readings = self.failures = 0
        self.error: str | None = None  # the last failure, to say why figures are missing
        self._stop_event = threading.Event()

    def run(self) -> None:
        target: tuple[str, ssl.SSLContext] | None = None
        while not self._stop_event.is_set():
            if target is None:
                try:
                    target = _kubeconfig_target(self.kubeconfig)
                except FileNotFoundError:
                    self._stop_event.wait(0.1)  # soon: minimalkueue starts right after it
                    continue
                except (
                    OSError,
                    yaml.YAMLError,
                    KeyError,
                    TypeError,
                    ValueError,
                    StopIteration,
                ) as error:  # half written, or a shape we do not know: try again
                    self.error = f"kubeconfig: {error!r}"
                    self._stop_event.wait(0.1)
                    continue
            self._scrape(*target)
            self._stop_event.wait(self.interval)

    def _scrape(self, url: str, context: ssl.SSLContext) -> None:
        try:
            reading = probes.api_requests(url, context=context)
        except (OSError, ValueError) as error:  # refused, timed out, a line we cannot read
            self.failures += 1
            self.error = f"{url}: {error!r}"
            return
        now = time.monotonic()
        if self.first is None:
            self.first, self.first_at = reading, now
        self.last, self.last_at = reading, now
        self.readings += 1

    def stop(self) -> None:
        self.stopped = time.monotonic()
        self._stop_event.set()
        self.join()


def _time(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    text = str(value).replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # at most microseconds for fromisoformat
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        text = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    return dt.datetime.fromisoformat(text)


def _figures(
    out: Path, wall: float, sampler: ProcSampler, scraper: ApiScraper, generated: int
) -> tuple[dict[str, float | None], dict[str, Any]]:
    summary = yaml.safe_load((out / "summary.yaml").read_text()) or {}
    # The runner names it after the binary (minimalkueue-qps300-burst500 at another budget).
    found = sorted(out.glob("minimalkueue*.stats.yaml"))
    if len(found) != 1:
        raise ValueError(f"{out}: expected one minimalkueue*.stats.yaml, found {len(found)}")
    stats = yaml.safe_load(found[0].read_text()) or {}
    figures: dict[str, float | None] = {"runner wall (s)": wall}
    figures["minimalkueue wall (s)"] = stats.get("wallMs", 0) / 1000
    cq = (summary.get("clusterQueueClasses") or {}).get("cq") or {}
    span = None
    if cq.get("firstEventTime") and cq.get("lastEventTime"):
        span = (_time(cq["lastEventTime"]) - _time(cq["firstEventTime"])).total_seconds()
    figures["cq events span (s)"] = span
    nominal = cq.get("nominalQuota") or 0
    usage = cq.get("cpuAverageUsage")
    figures["cq usage (% of nominal)"] = 100 * usage / nominal if nominal and usage else None
    classes = summary.get("workloadClasses") or {}
    for name in CLASSES:
        wl = classes.get(name) or {}
        mean = wl.get("averageTimeToAdmissionMs")
        figures[f"mean time to admission, {name} (s)"] = None if mean is None else mean / 1000
    figures["workloads recorded"] = sum((c or {}).get("count", 0) for c in classes.values())
    figures["evictions"] = sum((c or {}).get("totalEvictions", 0) for c in classes.values())
    figures["minimalkueue CPU (s)"] = (stats.get("userMs", 0) + stats.get("sysMs", 0)) / 1000
    maxrss = stats.get("maxrss", -1)
    figures["minimalkueue peak RSS (MiB)"] = maxrss / 1024 if maxrss > 0 else None
    for name in WATCHED:
        figures[f"{name} CPU (s)"] = sampler.total(name, sampler.cpu)
        figures[f"{name} peak RSS (MiB)"] = sampler.total(name, sampler.peak_rss_mib)
    first, last = scraper.first, scraper.last
    workloads = figures["workloads recorded"] or generated
    details: dict[str, Any] = {"metrics readings": scraper.readings}
    if first is None or last is None or scraper.readings < 2:
        figures["API requests (all clients)"] = None
        figures[API_PER_WORKLOAD] = None
        details["metrics error"] = scraper.error
        return figures, details
    requests = last["requests"] - first["requests"]
    figures["API requests (all clients)"] = int(requests)
    figures[API_PER_WORKLOAD] = requests / workloads if workloads else None
    details.update(
        {
            "workloads (divisor)": workloads,
            "requests before the first reading": int(first["requests"]),
            "first reading (s after start)": scraper.first_at - scraper.started,
            "last reading (s before the runner exited)": scraper.stopped - scraper.last_at,
            "failed reads": scraper.failures,
            "requests by verb": probes.by_verb(first, last),
        }
    )
    return figures, details


def run_once(
    runner: list[str], out: Path, env: dict[str, str], timeout: float, generated: int
) -> tuple[dict[str, float | None], dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runner.log"
    kubeconfig = out / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)  # an earlier run's would point at a dead apiserver
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen([*runner, f"-o={out}"], stdout=sink, stderr=sink, env=env)
        sampler = ProcSampler(proc.pid)
        sampler.start()
        scraper = ApiScraper(kubeconfig)
        scraper.start()
        try:
            code = proc.wait(timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.send_signal(signal.SIGINT)  # the runner stops envtest on SIGINT
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        finally:
            scraper.stop()
            sampler.stop()
    wall = time.monotonic() - started
    if code != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RunError(f"runner exited {code}; last lines of its log:\n" + "\n".join(tail))
    if not (out / "summary.yaml").exists():
        raise RunError(f"runner wrote no summary.yaml in {out}")
    return _figures(out, wall, sampler, scraper, generated)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value}" if isinstance(value, int) else f"{value:.1f}"


def _table(runs: list[dict[str, float | None]], title: str = "figure") -> str:
    names = list(runs[0])
    width = max(38, len(title) + 2, *(len(n) + 2 for n in names))  # columns stay aligned
    head = [f"run {i + 1}" for i in range(len(runs))] + (["mean"] if len(runs) > 1 else [])
    lines = [f"{title:<{width}}" + "".join(f"{h:>10}" for h in head)]
    for name in names:
        values = [run[name] for run in runs]
        known = [v for v in values if v is not None]
        if len(runs) > 1:
            values.append(sum(known) / len(known) if len(known) == len(values) else None)
        cells = "".join(f"{_cell(v):>10}" for v in values)
        lines.append(f"{name:<{width}}{cells}")
    return "\n".join(lines)


def _verb_table(details: list[dict[str, Any]], top: int = 15) -> str | None:
    """Requests by verb and resource, the ``top`` most over all runs, the rest summed."""
    splits = [d.get("requests by verb") or {} for d in details]
    if not any(splits):
        return None
    totals: dict[str, int] = {}
    for split in splits:
        for key, count in split.items():
            totals[key] = totals.get(key, 0) + count
    keys = sorted(totals, key=lambda k: -totals[k])
    rows: list[dict[str, float | None]] = []
    for split in splits:
        row: dict[str, float | None] = {k: split.get(k, 0) for k in keys[:top]}
        if len(keys) > top:
            row["(the rest)"] = sum(split.get(k, 0) for k in keys[top:])
        rows.append(row)
    return _table(rows, "API requests by verb (all clients, last scrape before teardown)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="how many runs (default 1)")
    parser.add_argument("--out", type=Path, help="keep each run's files in OUT/run-<i>")
    parser.add_argument("--json", type=Path, help="write the figures of every run to FILE")
    parser.add_argument(
        "--timeout", type=int, default=15, help="minutes a run may take (default 15)"
    )
    parser.add_argument(
        "--qps",
        type=int,
        default=kueue_build.DEFAULT_BUDGET[0],
        help="minimalkueue's client QPS (50, set in its code; another value builds a copy)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=kueue_build.DEFAULT_BUDGET[1],
        help="minimalkueue's client burst (100)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.timeout < 1:
        parser.error("--runs and --timeout must be at least 1")
    if args.qps < 1 or args.burst < 1:
        parser.error(f"--qps and --burst must be at least 1 (got {args.qps}, {args.burst})")
    try:
        plane = cp_build.ensure_built()
        kueue = kueue_build.ensure_built()
        minimalkueue = kueue_build.budget_minimalkueue(args.qps, args.burst)
    except cp_build.GoMissing as error:
        print(f"kueue-peer: {error}", file=sys.stderr)
        return 2
    except (cp_build.BuildError, OSError) as error:
        print(f"kueue-peer: build failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kueue-peer: interrupted", file=sys.stderr)
        return 1
    generator = kueue.source / "test/performance/scheduler/configs/baseline"
    try:  # the divisor when a summary records no workload
        generated = load_baseline(generator / "generator.yaml").total
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as error:
        print(f"kueue-peer: cannot read {generator / 'generator.yaml'}: {error}", file=sys.stderr)
        return 1
    runner = [
        str(kueue.runner),
        f"--crds={kueue.source / 'config/components/crd/bases'}",
        f"--generatorConfig={generator / 'generator.yaml'}",
        f"--minimalKueue={minimalkueue}",
        f"--timeout={args.timeout}m",  # the recorder's bound; ours is a minute more
    ]
    print(
        f"kueue {kueue.version}, kubernetes {plane.kubernetes_version}, etcd {plane.etcd_version}; "
        f"minimalkueue's client: qps {args.qps}, burst {args.burst}"
    )
    results: list[dict[str, float | None]] = []
    details: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kueue-peer-") as tmp:
        assets = Path(tmp) / "assets"
        assets.mkdir()
        for name, path in (
            ("etcd", plane.etcd),
            ("kube-apiserver", plane.kube_apiserver),
            ("kubectl", plane.kubectl),
        ):
            (assets / name).symlink_to(path)
        # Kueue's test/util finds its project at init from PROJECT_DIR (which it
        # takes the dirname of) or a Makefile above the cwd, and panics otherwise.
        env = dict(os.environ, KUBEBUILDER_ASSETS=str(assets), PROJECT_DIR=f"{kueue.source}/")
        for i in range(args.runs):
            out = (args.out or Path(tmp)) / f"run-{i + 1}"
            print(f"run {i + 1}/{args.runs}: {out}", file=sys.stderr, flush=True)
            try:
                figures, extra = run_once(runner, out, env, args.timeout * 60 + 60, generated)
            except RunError as error:
                print(f"kueue-peer: run {i + 1} failed: {error}", file=sys.stderr)
                return 1
            except subprocess.TimeoutExpired:
                print(f"kueue-peer: run {i + 1} took over {args.timeout} min", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                print("kueue-peer: interrupted", file=sys.stderr)
                return 1
            except (OSError, yaml.YAMLError, ValueError) as error:
                print(f"kueue-peer: run {i + 1}: cannot read results: {error}", file=sys.stderr)
                return 1
            results.append(figures)
            details.append(extra)
            if args.out:
                (out / "details.json").write_text(json.dumps(extra, indent=2))
            if figures[API_PER_WORKLOAD] is None:
                print(
                    f"kueue-peer: run {i + 1}: no API request count"
                    f" ({extra['metrics readings']} readings): {extra.get('metrics error')}",
                    file=sys.stderr,
                )
            print(f"run {i + 1}: {figures['runner wall (s)']:.0f} s", file=sys.stderr)
    print(_table(results))
    verbs = _verb_table(details)
    if verbs is not None:
        print()
        print(verbs)
    if args.json:
        document = {"kueue": kueue.version, "runs": results, "details": details}
        args.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
