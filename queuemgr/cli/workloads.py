"""Tenant commands: ``submit``, ``list``, ``status``, ``why``, ``cancel``.

Why it exists: "why is my job pending?" is the question people ask most.
``why`` answers it by running the pure core ``schedule()`` on a snapshot of
the store, exactly as the service's next cycle would, and printing the
reason, positions, ETA and who is ahead; it writes nothing.

What must stay true: ``submit`` records a Pending workload directly in the
store (the simulated backend; with Kubernetes it will create a Job instead)
and wakes the scheduler in the same transaction; reads never write; a
workload is named ``NAME`` in ``-n NAMESPACE``; an unknown workload or queue
exits 1 and suggests the nearest names.
"""

from __future__ import annotations

import getpass
import re
import secrets
import time
from pathlib import Path
from typing import Any

import click

from queuemgr.cli import kube
from queuemgr.cli.common import database, namespace_option, quantities
from queuemgr.cli.completion import complete_local_queue, complete_workload
from queuemgr.cli.errors import BadInput, CliError, handled, not_found
from queuemgr.cli.explain import explain
from queuemgr.cli.flags import SUBDOMAIN, check_name, namespace
from queuemgr.cli.output import age, emit, iso, output_option, print_fields, print_table, vec
from queuemgr.cli.watch import watch as watch_doc
from queuemgr.cli.watch import watch_options
from queuemgr.cli.why_view import print_why
from queuemgr.core.model import PRIORITY_RANGE, PodSet, Workload, WorkloadId
from queuemgr.core.resources import CPU, GPU, MEMORY
from queuemgr.spec.knobs import parse_duration
from queuemgr.store import admin
from queuemgr.store.admin import WorkloadInfo
from queuemgr.store.audit import os_actor
from queuemgr.store.config_objects import load_config
from queuemgr.store.transitions import cancel_workload, submit_workload


@click.command("submit", context_settings={"ignore_unknown_options": True})
@click.option(
    "-q",
    "--queue",
    default=None,
    help="LocalQueue to submit to (with -f: default the manifest's queue label).",
    shell_complete=complete_local_queue,
)
@click.option(
    "-f",
    "--filename",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Kubernetes mode: a Job, JobSet, PyTorchJob, RayJob or RayCluster manifest to submit.",
)
@click.option("--image", default=None, help="Kubernetes mode: the container image to run.")
@namespace_option
@click.option("--name", default=None, help="Workload name (default: USER-<random>).")
@click.option("--gpus", default="0", help="GPUs per pod.")
@click.option("--pods", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cpu", default=None, help="CPU per pod (quantity: 8, 500m).")
@click.option("--memory", default=None, help="Memory per pod (quantity: 64Gi).")
@click.option("--max-runtime", default=None, help="Stop after this long: 90m, 2h, 1d.")
@click.option(
    "--priority",
    type=click.IntRange(*PRIORITY_RANGE),
    default=0,
    show_default=True,
    help="As a PriorityClass value: a 32-bit integer.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@handled
def submit(
    queue: str | None,
    filename: Path | None,
    image: str | None,
    namespace: str | None,
    name: str | None,
    gpus: str,
    pods: int,
    cpu: str | None,
    memory: str | None,
    max_runtime: str | None,
    priority: int,
    command: tuple[str, ...],
) -> None:
    """Submit a gang of --pods pods to a LocalQueue: queuemgr submit -q default -- CMD...

    With the simulated backend the workload is recorded in the store and CMD is
    not run. In Kubernetes mode (QUEUEMGR_KUBECONFIG) it creates a suspended
    batch/v1 Job running CMD in --image, or the job of `-f job.yaml` (any
    supported kind), with your own credentials.
    """
    ns = namespace_of(namespace)
    if kube.enabled():
        kube.submit_job(
            ns, queue, filename, image, name or f"{_user()}-{secrets.token_hex(3)}",
            pods, gpus, cpu, memory, max_runtime, command,
        )  # fmt: skip
        return
    if filename is not None or image is not None:
        raise BadInput("-f/--image: only in Kubernetes mode (set QUEUEMGR_KUBECONFIG)")
    if queue is None:
        raise BadInput("-q/--queue: required")
    wname = check_name(name or f"{_user()}-{secrets.token_hex(3)}", "--name", SUBDOMAIN)
    items = [f"{GPU}={gpus}"]
    items += [f"{CPU}={cpu}"] if cpu is not None else []
    items += [f"{MEMORY}={memory}"] if memory is not None else []
    requests = {r: v for r, v in quantities(tuple(items), "--gpus/--cpu/--memory").items() if v}
    limit = None if max_runtime is None else parse_duration(max_runtime, "--max-runtime")
    w = Workload(
        namespace=ns,
        name=wname,
        queue=check_name(queue, "--queue"),
        pod_sets=(PodSet(name="main", count=pods, requests=requests),),
        priority=priority,
        created_at=time.time(),
        max_runtime=limit,
    )
    with database() as db, db.write() as conn:
        config, _ = load_config(conn)
        if (ns, queue) not in config.local_queues:
            names = [n for (s, n) in config.local_queues if s == ns]
            raise not_found(f"local queue in namespace {ns!r}:", queue, names)
        submit_workload(conn, w)
    click.echo(f"workload {w.id} submitted to {ns}/{queue}")


def namespace_of(ns: str | None) -> str:
    return namespace(ns)


def _user() -> str:
    """The login name as the start of a valid workload name (``John_Doe`` -> ``john-doe``)."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = ""
    cleaned = re.sub(r"[^a-z0-9]+", "-", login.lower())[:40].strip("-")
    return cleaned or "job"


def workload_doc(info: WorkloadInfo) -> dict[str, Any]:
    r = info.row
    gpus = sum(ps["requests"].get(GPU, 0) * ps["count"] for ps in info.pod_sets)
    return {
        "namespace": r["namespace"],
        "name": r["name"],
        "local_queue": r["local_queue"],
        "cluster_queue": r["cluster_queue"],
        "state": r["state"].value,
        "reason": r["reason"],
        "message": r["message"],
        "priority": r["priority"],
        "gpus": gpus,
        "created_at": iso(r["created_at"]),
        "state_since": iso(r["state_since"]),
        "admitted_at": iso(r["admitted_at"]),
        "finished_at": iso(r["finished_at"]),
        "max_runtime_s": r["max_runtime"],
        "flavor": r["flavor"],
        "borrowing": r["borrowing"],
        "evictions": r["evictions"],
        "requeue_at": iso(r["requeue_at"]),
        "pod_sets": [
            {"name": p["name"], "count": p["count"], "requests": p["requests"]}
            for p in info.pod_sets
        ],
        "placements": [
            {"pod_set": p["pod_set"], "node": p["node"], "count": p["count"]}
            for p in info.placements
        ],
    }


@click.command("list")
@namespace_option
@click.option(
    "-q", "--queue", default=None, help="Only this LocalQueue.", shell_complete=complete_local_queue
)
@click.option("-A", "--all-namespaces", is_flag=True, help="Workloads of every namespace.")
@click.option("--all", "include_finished", is_flag=True, help="Include finished workloads.")
@output_option
@watch_options
@handled
def list_(
    namespace: str | None,
    queue: str | None,
    all_namespaces: bool,
    include_finished: bool,
    output: str,
    watch: bool,
    interval: float,
    watch_timeout: str | None,
) -> None:
    """Workloads with their state and reason, oldest first."""
    ns = None if all_namespaces else namespace_of(namespace)
    if kube.enabled():
        docs = kube.list_docs(ns)
        docs["workloads"] = [d for d in docs["workloads"] if queue in (None, d["local_queue"])]
        emit(docs, output, _list_table)
        return
    with database() as db:

        def fetch() -> dict[str, Any]:
            with db.read() as conn:
                infos = admin.workload_infos(
                    conn, namespace=ns, queue=queue, include_finished=include_finished
                )
            return {"workloads": [workload_doc(i) for i in infos]}

        if watch:
            watch_doc(fetch, output, _list_table, interval=interval, timeout=watch_timeout)
        else:
            emit(fetch(), output, _list_table)


def _list_table(doc: dict[str, Any]) -> None:
    from datetime import datetime

    rows = [
        (
            d["namespace"],
            d["name"],
            d["local_queue"],
            d["state"],
            d["reason"],
            d["priority"],
            d["gpus"],
            age(datetime.fromisoformat(d["created_at"])),
        )
        for d in doc["workloads"]
    ]
    cols = ("NAMESPACE", "NAME", "QUEUE", "STATE", "REASON", "PRIORITY", "GPUS", "AGE")
    print_table(None, cols, rows)


def _one(conn: Any, ns: str, name: str) -> WorkloadInfo:
    found = admin.workload_infos(conn, namespace=ns, name=name, include_finished=True)
    if not found:
        names = [i.row["name"] for i in admin.workload_infos(conn, namespace=ns)]
        raise not_found(f"workload in namespace {ns!r}:", name, names)
    return found[0]


@click.command("status")
@click.argument("name", shell_complete=complete_workload)
@namespace_option
@output_option
@watch_options
@handled
def status(
    name: str,
    namespace: str | None,
    output: str,
    watch: bool,
    interval: float,
    watch_timeout: str | None,
) -> None:
    """The stored state of workload NAME (as the service last wrote it)."""
    ns = namespace_of(namespace)
    if kube.enabled():
        emit(kube.one(ns, name), output, _kube_fields)
        return
    with database() as db:

        def fetch() -> dict[str, Any]:
            with db.read() as conn:
                return workload_doc(_one(conn, ns, name))

        if not watch:
            emit(fetch(), output, _status_fields)
            return
        watch_doc(
            fetch,
            output,
            _status_fields,
            interval=interval,
            timeout=watch_timeout,
            done=lambda d: d["state"] == "Finished",
        )


def _kube_fields(d: dict[str, Any]) -> None:
    print_fields(
        [
            ("Job", f"{d['kind']} {d['namespace']}/{d['name']}"),
            ("Queue", d["local_queue"]),
            ("State", d["state"]),
            ("Reason", d["reason"]),
            ("Message", d["message"] or "-"),
            ("Position", d["position"] if d["position"] is not None else "-"),
            ("ETA", d["eta"] or "-"),
            ("GPUs", d["gpus"]),
        ]
    )


def _status_fields(d: dict[str, Any]) -> None:
    print_fields(
        [
            ("Workload", f"{d['namespace']}/{d['name']}"),
            ("Queue", d["local_queue"]),
            ("State", d["state"]),
            ("Reason", d["reason"]),
            ("Message", d["message"] or "-"),
            ("Priority", d["priority"]),
            ("Created", d["created_at"]),
            ("Cluster queue", d["cluster_queue"] or "-"),
            ("Flavor", d["flavor"] or "-"),
            ("Admitted at", d["admitted_at"] or "-"),
            ("Finished at", d["finished_at"] or "-"),
        ]
    )
    for p in d["pod_sets"]:
        click.echo(f"Pod set {p['name']}: {p['count']} x {{{vec(p['requests'])}}}")


@click.command("why")
@click.argument("name", shell_complete=complete_workload)
@namespace_option
@click.option(
    "--evaluate",
    is_flag=True,
    help="Run a scheduling cycle here instead of reading the leader's last one.",
)
@output_option
@handled
def why(name: str, namespace: str | None, evaluate: bool, output: str) -> None:
    """Why workload NAME is pending: reason, positions, ETA, who is ahead (writes nothing)."""
    ns = namespace_of(namespace)
    if kube.enabled():  # the controller's answer, as written on the job
        emit(kube.one(ns, name), output, _kube_fields)
        return
    with database() as db:
        with db.read() as conn:
            info = _one(conn, ns, name)
        doc = explain(
            db, WorkloadId(f"{ns}/{name}"), workload_doc(info), now=time.time(), evaluate=evaluate
        )
    emit(doc, output, print_why)


@click.command("cancel")
@click.argument("name", shell_complete=complete_workload)
@namespace_option
@handled
def cancel(name: str, namespace: str | None) -> None:
    """Cancel workload NAME: it finishes with reason Cancelled and frees its quota."""
    ns = namespace_of(namespace)
    if kube.enabled():
        kube.cancel(ns, name)
        return
    with database() as db, db.write() as conn:
        info = _one(conn, ns, name)
        if info.row["state"].value == "Finished":
            raise CliError(f"workload {ns}/{name} has already finished ({info.row['reason']})")
        if not cancel_workload(
            conn, WorkloadId(f"{ns}/{name}"), message=f"cancelled by {os_actor()}"
        ):
            raise CliError(f"workload {ns}/{name} has already finished")
    click.echo(f"workload {ns}/{name} cancelled")
