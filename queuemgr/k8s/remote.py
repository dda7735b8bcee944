"""A worker cluster of multi-cluster dispatch, as the manager reaches it.

Why it exists: with ``kubernetes.worker_clusters`` the manager runs no job
itself; an admitted Job is copied to one worker cluster and runs there.
:class:`WorkerApi` is the few calls that needs against one worker's API
server (its Nodes, the copies, create and delete; the listing is the health probe), each
bounded by a request timeout so that a worker that stops answering makes the
call fail fast instead of hanging the manager. :func:`copy_of` builds the
copy of a manager's Job: the user's spec, unsuspended with the admission's
placement, labelled as a copy.

What must stay true: only ``batch/v1`` Jobs are copied (other kinds raise
:class:`RemoteError`); a copy carries :data:`COPY_LABEL` so the manager lists
(and deletes) exactly its own copies; the copy's name and namespace are the
manager Job's, so a worker holds at most one copy of a workload; errors are
:class:`RemoteError` with the worker's name, never the client's exception.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from queuemgr.k8s.apiclient import RateLimitedApiClient, api_client
from queuemgr.k8s.patch import Patch
from queuemgr.k8s.reflector import Obj

log = logging.getLogger(__name__)

# Every node the manager takes from a worker is labelled with the worker's name.
CLUSTER_LABEL = "queuemgr.io/cluster"
# Every copy the manager creates on a worker carries this label (value: "true").
COPY_LABEL = "queuemgr.io/copy"
# On the manager's Job: where its copy runs and the copy's pod counts, mirrored back.
WORKER_STATUS_ANNOTATION = "queuemgr.io/worker-status"
# Labels and the selector the job controller adds to a Job: not part of a copy.
_CONTROLLER_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)


class RemoteError(Exception):
    """A worker cluster's API failed or did not answer."""


def node_name(cluster: str, node: str) -> str:
    """The manager's name of a worker's node: ``<cluster>.<node>``."""
    return f"{cluster}.{node}"


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(obj: Obj, ops: Sequence[Mapping[str, Any]]) -> None:
    """Apply a JSON Patch built by :mod:`queuemgr.k8s.patch` to ``obj`` in place
    (``add``, ``replace``, ``remove``; ``test`` is skipped: nothing else holds ``obj``)."""
    for op in ops:
        kind = op["op"]
        if kind == "test":
            continue
        tokens = [_unescape(t) for t in str(op["path"]).split("/")[1:]]
        parent: Any = obj
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "remove":
                del parent[index]
            elif kind == "add":
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                parent[index] = copy.deepcopy(op["value"])
        elif kind == "remove":
            parent.pop(last, None)
        else:
            parent[last] = copy.deepcopy(op["value"])


def copy_of(job: Obj, run: Patch) -> Obj:
    """The copy of manager Job ``job`` for a worker: its spec with ``run`` (the job's
    ``run_with`` patch) applied, labelled :data:`COPY_LABEL`, without the fields the
    manager's API server and job controller wrote."""
    if job.get("apiVersion", "batch/v1") != "batch/v1" or job.get("kind", "Job") != "Job":
        raise RemoteError(
            f"multi-cluster dispatch copies batch/v1 Jobs only, not"
            f" {job.get('apiVersion')} {job.get('kind')}"
        )
    meta = job["metadata"]
    body: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k != "kubectl.kubernetes.io/last-applied-configuration"
            },
        },
        "spec": copy.deepcopy(job.get("spec") or {}),
    }
    apply_patch(body, run.as_json())
    body["metadata"]["labels"][COPY_LABEL] = "true"
    spec = body["spec"]
    spec.pop("selector", None)
    spec.pop("manualSelector", None)
    template_labels = (spec.get("template") or {}).get("metadata", {}).get("labels")
    if isinstance(template_labels, dict):
        for key in _CONTROLLER_LABELS:
            template_labels.pop(key, None)
    spec["suspend"] = False
    return body


def worker_status(cluster: str, copy: Mapping[str, Any]) -> str:
    """What the manager's Job shows of its copy: the worker, and the copy's Job status
    counts and start (JSON, keys sorted, so an unchanged status reads the same)."""
    status = copy.get("status") or {}
    shown: dict[str, Any] = {"cluster": cluster}
    for key in ("active", "ready", "succeeded", "failed", "startTime", "completionTime"):
        if status.get(key) is not None:
            shown[key] = status[key]
    return json.dumps(shown, sort_keys=True, separators=(",", ":"))


def _decode(response: Any) -> Any:
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


class WorkerApi:
    """The calls the manager makes to one worker cluster."""

    def __init__(
        self,
        name: str,
        kubeconfig: Path,
        *,
        context: str | None = None,
        qps: float = 20.0,
        burst: int = 40,
        timeout: float = 5.0,
        api: client.ApiClient | None = None,
    ) -> None:
        self.name = name
        self.timeout = timeout
        self._client: client.ApiClient | RateLimitedApiClient = api or api_client(
            kubeconfig, qps=qps, burst=burst, context=context
        )
        self._core = client.CoreV1Api(self._client)
        self._batch = client.BatchV1Api(self._client)

    def _fail(self, action: str, error: Exception) -> RemoteError:
        if isinstance(error, ApiException):
            return RemoteError(f"{self.name}: {action}: {error.status} {error.reason}")
        return RemoteError(f"{self.name}: {action}: {type(error).__name__}: {error}")

    def nodes(self) -> list[Obj]:
        try:
            body = _decode(
                self._core.list_node(_preload_content=False, _request_timeout=self.timeout)
            )
        except (ApiException, HTTPError, OSError) as error:
            raise self._fail("list nodes", error) from error
        return list(body.get("items") or [])

    def copies(self) -> list[Obj]:
        """Every copy of a manager's Job on this worker."""
        try:
            body = _decode(
                self._batch.list_job_for_all_namespaces(
                    label_selector=COPY_LABEL,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
            )
        except (ApiException, HTTPError, OSError) as error:
            raise self._fail("list copies", error) from error
        return list(body.get("items") or [])

    def create(self, body: Obj) -> Obj | None:
        """Create the copy (and its namespace if missing); None if it exists already."""
        meta = body["metadata"]
        for attempt in (0, 1):
            try:
                return dict(
                    _decode(
                        self._batch.create_namespaced_job(
                            meta["namespace"],
                            body,  # type: ignore[arg-type]
                            _preload_content=False,
                            _request_timeout=self.timeout,
                        )
                    )
                )
            except ApiException as error:
                if error.status == 409:
                    return None
                if error.status == 404 and attempt == 0:
                    self._namespace(meta["namespace"])
                    continue
                raise self._fail(f"create {meta['namespace']}/{meta['name']}", error) from error
            except (HTTPError, OSError) as error:
                raise self._fail(f"create {meta['namespace']}/{meta['name']}", error) from error
        return None  # pragma: no cover (the loop returns or raises)

    def _namespace(self, name: str) -> None:
        try:
            body: Any = {"metadata": {"name": name}}
            self._core.create_namespace(body, _request_timeout=self.timeout)
        except ApiException as error:
            if error.status != 409:
                raise self._fail(f"create namespace {name}", error) from error
        except (HTTPError, OSError) as error:
            raise self._fail(f"create namespace {name}", error) from error

    def delete(self, namespace: str, name: str) -> None:
        """Delete a copy and its pods (background propagation); a missing one is fine."""
        try:
            self._batch.delete_namespaced_job(
                name,
                namespace,
                propagation_policy="Background",
                grace_period_seconds=0,
                _request_timeout=self.timeout,
            )
        except ApiException as error:
            if error.status != 404:
                raise self._fail(f"delete {namespace}/{name}", error) from error
        except (HTTPError, OSError) as error:
            raise self._fail(f"delete {namespace}/{name}", error) from error

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]
