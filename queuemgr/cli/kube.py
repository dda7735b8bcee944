"""Tenant commands in Kubernetes mode: through the tenant's kubeconfig, never the database.

Why it exists: on a real cluster tenants hold a kubeconfig, not a database
URL. With ``QUEUEMGR_KUBECONFIG`` (or ``QUEUEMGR_MODE=kubernetes``, which uses
``$KUBECONFIG`` or the in-cluster service account) ``submit``, ``list``,
``status``, ``why`` and ``cancel`` create, read and delete labelled jobs
with the tenant's own credentials, so Kubernetes RBAC decides what each
tenant may see and touch. The controller writes each job's queue status onto
the job; ``why`` reads it back.

What must stay true: the documents have the same keys as in database mode
where the meaning is the same (docs/cli.md lists the Kubernetes ones); an API
refusal exits 1 with the server's reason (``forbidden: ...``), a manifest the
CLI cannot use exits 2 naming the file; never a traceback. The Kubernetes
client is imported only when Kubernetes mode is used: importing it costs about
half a second, which every ``why`` and ``list`` in database mode would pay.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from queuemgr.cli.common import quantities
from queuemgr.cli.errors import BadInput, CliError, not_found
from queuemgr.cli.flags import SUBDOMAIN, check_name
from queuemgr.core.resources import CPU, GPU, MEMORY
from queuemgr.spec.knobs import parse_duration

if TYPE_CHECKING:
    from queuemgr.k8s.apiclient import ApiException
    from queuemgr.k8s.tenant import TenantJobs

KUBECONFIG_ENV = "QUEUEMGR_KUBECONFIG"
MODE_ENV = "QUEUEMGR_MODE"


def enabled() -> bool:
    return bool(os.environ.get(KUBECONFIG_ENV)) or os.environ.get(MODE_ENV) == "kubernetes"


@contextmanager
def jobs() -> Iterator[TenantJobs]:
    from queuemgr.k8s.apiclient import ApiException, KubernetesUnavailable, kubeconfig_client
    from queuemgr.k8s.tenant import TenantJobs

    path = os.environ.get(KUBECONFIG_ENV) or None
    try:
        api = kubeconfig_client(path)
    except KubernetesUnavailable as exc:
        raise CliError(str(exc)) from None
    try:
        yield TenantJobs(api)
    except ApiException as exc:
        raise CliError(_refusal(exc)) from None
    except OSError as exc:  # urllib3's connection errors are OSErrors
        raise CliError(f"cannot reach the Kubernetes API server: {exc}") from None
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _refusal(exc: ApiException) -> str:
    reason = str(exc.reason or "").lower() or "error"
    try:
        message = yaml.safe_load(exc.body or "{}").get("message") or ""
    except (yaml.YAMLError, AttributeError):
        message = ""
    return f"{reason}: {message}" if message else f"{reason} (HTTP {exc.status})"


def read_manifest(path: Path, namespace: str, queue: str | None) -> dict[str, Any]:
    from queuemgr.k8s.jobs import UnknownKind
    from queuemgr.k8s.manifest import ManifestError
    from queuemgr.k8s.tenant import labelled

    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(f"-f {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise BadInput(f"-f {path}: expected one job object")
    raw.setdefault("metadata", {}).setdefault("namespace", namespace)
    try:
        return labelled(raw, queue)
    except (UnknownKind, ManifestError, ValueError) as exc:
        raise BadInput(f"-f {path}: {exc}") from None


def submit(obj: dict[str, Any]) -> None:
    with jobs() as api:
        created = api.create(obj)
    meta = created["metadata"]
    queue = meta["labels"]["queuemgr.io/queue-name"]
    click.echo(f"{created['kind'].lower()} {meta['namespace']}/{meta['name']} submitted to {queue}")


def list_docs(namespace: str | None) -> dict[str, Any]:
    from queuemgr.k8s.tenant import status

    with jobs() as api:
        return {"workloads": [status(o) for o in api.list(namespace)]}


def one(namespace: str, name: str) -> dict[str, Any]:
    from queuemgr.k8s.tenant import status

    with jobs() as api:
        obj = api.get(namespace, name)
        names = [] if obj is not None else [o["metadata"]["name"] for o in api.list(namespace)]
    if obj is None:
        raise not_found(f"queued job in namespace {namespace!r}:", name, names)
    return status(obj)


def cancel(namespace: str, name: str) -> None:
    with jobs() as api:
        obj = api.get(namespace, name)
        if obj is None:
            raise CliError(f"queued job {namespace}/{name} not found")
        api.delete(obj)
    click.echo(f"job {namespace}/{name} cancelled (deleted)")


def submit_job(
    ns: str,
    queue: str | None,
    filename: Path | None,
    image: str | None,
    name: str,
    pods: int,
    gpus: str,
    cpu: str | None,
    memory: str | None,
    max_runtime: str | None,
    command: tuple[str, ...],
) -> None:
    if filename is not None:
        submit(read_manifest(filename, ns, queue))
        return
    if queue is None or image is None:
        raise BadInput("-q/--queue and --image: required to build a Job (or give -f FILE)")
    items = (
        [f"{GPU}={gpus}"]
        + ([f"{CPU}={cpu}"] if cpu else [])
        + ([f"{MEMORY}={memory}"] if memory else [])
    )
    quantities(tuple(items), "--gpus/--cpu/--memory")  # validated before anything is sent
    requests = {r: q for r, q in (i.split("=", 1) for i in items) if q not in ("0", "")}
    limit = None if max_runtime is None else parse_duration(max_runtime, "--max-runtime")
    from queuemgr.k8s.tenant import build_job

    job = build_job(
        name=check_name(name, "--name", SUBDOMAIN),
        namespace=ns,
        queue=check_name(queue, "--queue"),
        image=image,
        command=command,
        pods=pods,
        requests=requests,
        max_runtime=None if limit is None else int(limit),
    )
    submit(job)
