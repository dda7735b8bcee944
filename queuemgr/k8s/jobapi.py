"""Reading and patching each job kind through the API: typed for Jobs, custom objects for CRDs.

Why it exists: the controller lists, watches and patches ``batch/v1`` Jobs,
JobSets and PyTorchJobs alike; only the client call differs (``BatchV1Api``
for Jobs, ``CustomObjectsApi`` for the kinds a CRD serves). :class:`KindApi`
hides that, and :func:`served_kinds` says which kinds this cluster serves:
Jobs always, the others only when their CRD is installed.

What must stay true: objects go in and come out as plain JSON dicts (never
the generated models, whose keys are snake_case); every patch is a JSON
Patch (RFC 6902), so lists are edited by index and a ``test`` operation can
guard it against a concurrent writer; errors are the client's
``ApiException`` with the server's status code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.jobframework import QUEUE_LABEL, GenericJob
from queuemgr.k8s.jobs import KINDS, BatchJob
from queuemgr.k8s.reflector import Lister, Obj

log = logging.getLogger(__name__)

JSON_PATCH = "application/json-patch+json"


def _decode(response: Any) -> Obj:
    try:
        body = json.loads(response.data)
    finally:
        response.release_conn()
    if not isinstance(body, dict):
        raise ValueError(f"expected an object from the API, got {type(body).__name__}")
    return body


class KindApi:
    """One job kind's list, watch and patch calls."""

    def __init__(self, api_client: client.ApiClient, kind: type[GenericJob]) -> None:
        self.kind = kind
        self._batch = client.BatchV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    @property
    def typed(self) -> bool:
        return self.kind is BatchJob

    @property
    def name(self) -> str:
        return f"{self.kind.PLURAL}.{self.kind.GROUP}"

    def lister(self, label_selector: str = QUEUE_LABEL) -> Lister:
        """Every labelled job of this kind, in all namespaces (for a reflector)."""
        k = self.kind
        if self.typed:

            def typed(**kwargs: Any) -> Any:
                return self._batch.list_job_for_all_namespaces(
                    label_selector=label_selector, **kwargs
                )

            return typed

        def custom(**kwargs: Any) -> Any:
            return self._custom.list_cluster_custom_object(
                k.GROUP, k.VERSION, k.PLURAL, label_selector=label_selector, **kwargs
            )

        return custom

    def patch(self, namespace: str, name: str, ops: Sequence[Obj], *, status: bool = False) -> Obj:
        """Apply a JSON Patch to the job (or its status subresource); the object after it."""
        k = self.kind
        body = list(ops)
        options: dict[str, Any] = {"_content_type": JSON_PATCH, "_preload_content": False}
        if self.typed:
            call = (
                self._batch.patch_namespaced_job_status
                if status
                else self._batch.patch_namespaced_job
            )
            return _decode(call(name, namespace, body, **options))
        if status:
            response = self._custom.patch_namespaced_custom_object_status(
                k.GROUP, k.VERSION, namespace, k.PLURAL, name, body, **options
            )
        else:
            response = self._custom.patch_namespaced_custom_object(
                k.GROUP, k.VERSION, namespace, k.PLURAL, name, body, **options
            )
        return _decode(response)

    def served(self) -> bool:
        """Whether the API server serves this kind (a CRD's may not be installed)."""
        if self.typed:
            return True
        k = self.kind
        try:
            response: Any = self._custom.list_cluster_custom_object(
                k.GROUP, k.VERSION, k.PLURAL, limit=1, _preload_content=False
            )
            response.release_conn()
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True


def served_kinds(api_client: client.ApiClient) -> tuple[list[KindApi], list[KindApi]]:
    """The job kinds this cluster serves now, ``batch/v1`` Job first, and those it does not."""
    served, later = [], []
    for kind in KINDS:
        api = KindApi(api_client, kind)
        if api.served():
            served.append(api)
        else:
            log.info("%s is not served (no CRD); watched once it is", api.name)
            later.append(api)
    return served, later
