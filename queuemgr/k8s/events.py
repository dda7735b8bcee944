"""Kubernetes Events on jobs: the lines ``kubectl describe`` prints under ``Events:``.

Why it exists: annotations and conditions say where a job stands now; events
say what happened to it and when (queued, why it waits, admitted, preempted,
evicted for its pods), in the place every Kubernetes user looks first.

What must stay true: an event is written only when the caller's verdict
changed (never once per cycle); it names the job by uid, so it is shown with
that job and garbage-collected with the namespace's events; failing to write
one is logged and forgotten, never retried and never an error for the caller.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

COMPONENT = "queuemgr"
MAX_MESSAGE = 1000


class EventRecorder:
    def __init__(self, api_client: client.ApiClient, *, instance: str = "") -> None:
        self._core = client.CoreV1Api(api_client)
        self._instance = instance or COMPONENT
        self.recorded = 0

    def record(self, obj: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {  # validated into the client's CoreV1Event
            "metadata": {
                "name": f"{name}.{time.time_ns():x}{uuid.uuid4().hex[:4]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            response: Any = self._core.create_namespaced_event(
                str(namespace), body, _preload_content=False
            )
            response.release_conn()
            self.recorded += 1
        except (ApiException, ValueError) as error:
            log.info("event %s on %s/%s not recorded: %s", reason, namespace, name, error)
