"""The admission webhook: labelled jobs are created suspended, and hopeless ones refused.

Why it exists: Kubernetes users expect Kueue's way of working: a job labelled
``queuemgr.io/queue-name`` is created suspended, and queuemgr unsuspends it
when the scheduler admits it. The mutating half makes sure no labelled job
starts before admission, even when the user forgot ``suspend: true``; the
validating half (:mod:`queuemgr.k8s.rules`) refuses, with a clear message,
jobs that could never be admitted and edits that would escape the quota.

What must stay true:

- an unlabelled job, a job in an unmanaged namespace, a subresource, a kind
  queuemgr does not manage and a child of a managed job (a RayJob's cluster)
  are allowed untouched (no patch, no store read);
- mutation needs no store: while Postgres is down, labelled jobs are still
  created suspended. It acts on CREATE only: the controller's own
  unsuspending UPDATE must not be undone;
- an UPDATE is judged only on what it changes: the queue label and the gang
  (rule 5 while running, rules 1-4 again while queued); annotations,
  conditions and node selectors written by the controller pass unread;
- when the store cannot be read, a new job is allowed with a warning (it is
  suspended, and the controller judges it later) unless the settings say to
  refuse it; a running job's edit is still judged against its old object.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from queuemgr.core.directory import AdmittedView
from queuemgr.k8s.jobs import QUEUE_LABEL, GenericJob, UnknownKind, job_for, owned_by_managed_kind
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.queue_directory import DirectoryUnavailable, QueueDirectory
from queuemgr.k8s.review import (
    AdmissionRequest,
    BadReview,
    Verdict,
    allow,
    deny,
    parse_review,
    review_response,
)
from queuemgr.k8s.rules import WebhookSettings, gang, queue_problems, running_edit_problems

log = logging.getLogger(__name__)

__all__ = ["AdmissionHandler", "BadReview", "NamespaceLabels", "WebhookSettings"]


class NamespaceLabels(Protocol):
    def labels(self, namespace: str) -> Mapping[str, str] | None:
        """A namespace's labels; None when it cannot be told (it counts as managed)."""
        ...


def _queue(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and value else None


class AdmissionHandler:
    """Judges AdmissionReviews; safe to call from many threads (it holds no state)."""

    def __init__(
        self,
        directory: QueueDirectory,
        settings: WebhookSettings | None = None,
        namespaces: NamespaceLabels | None = None,
    ) -> None:
        self.directory = directory
        self.settings = settings or WebhookSettings()
        self.namespaces = namespaces

    # -- AdmissionReview in, AdmissionReview out --------------------------------

    def mutate(self, review: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
        request = parse_review(review)
        return review_response(request.uid, self.mutation(request))

    def validate(self, review: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
        request = parse_review(review)
        return review_response(request.uid, self.validation(request))

    # -- decisions ----------------------------------------------------------------

    def _managed(self, namespace: str) -> bool:
        selector = self.settings.namespace_selector
        if selector.empty or self.namespaces is None:
            return True
        labels = self.namespaces.labels(namespace)
        return labels is None or selector.matches(labels)

    def _job(self, request: AdmissionRequest, obj: Mapping[str, Any] | None) -> GenericJob | None:
        """The job to judge, or None when the request is none of queuemgr's business."""
        if request.sub_resource or obj is None:
            return None
        if _queue(obj) is None and _queue(request.old_object) is None:
            return None
        if owned_by_managed_kind(obj):
            return None  # its parent (a RayJob's, a JobSet's) is the gang
        try:
            job = job_for(obj)
        except UnknownKind as error:
            log.warning("webhook called for an unmanaged kind: %s", error)
            return None
        return job if self._managed(request.namespace) else None

    def mutation(self, request: AdmissionRequest) -> Verdict:
        if request.operation != "CREATE":
            return allow()
        job = self._job(request, request.object)
        if job is None or _queue(request.object) is None:
            return allow()
        try:
            patch = job.suspend()
        except ManifestError as error:
            return deny(str(error), code=422, reason="Invalid")
        if patch:
            log.info("suspending %s/%s at creation", request.namespace, job.name or request.name)
        return allow(patch)

    def validation(self, request: AdmissionRequest) -> Verdict:
        if request.operation not in ("CREATE", "UPDATE"):
            return allow()
        job = self._job(request, request.object)
        if job is None:
            return allow()
        try:
            if request.operation == "UPDATE" and request.old_object is not None:
                return self._update(request, job)
            return self._queued(request, job)
        except ManifestError as error:
            return deny(str(error), code=422, reason="Invalid")

    def _queued(self, request: AdmissionRequest, job: GenericJob) -> Verdict:
        queue = job.queue_name()
        if queue is None:
            return allow()
        pod_sets = job.pod_sets()
        try:
            problems = queue_problems(
                namespace=request.namespace,
                queue=queue,
                pod_sets=pod_sets,
                directory=self.directory,
                settings=self.settings,
            )
        except DirectoryUnavailable as error:
            return self._outage(queue, error)
        if problems:
            return deny("; ".join(problems))
        return allow()

    def _outage(self, queue: str, error: DirectoryUnavailable) -> Verdict:
        log.warning("webhook: the store cannot be read: %s", error)
        if self.settings.allow_on_store_outage:
            return allow(
                warnings=(
                    f'queuemgr could not check LocalQueue "{queue}" now; the job waits suspended'
                    " and is checked when queuemgr is back",
                )
            )
        return deny(
            f'queuemgr cannot check LocalQueue "{queue}" now ({error}); try again shortly',
            code=503,
            reason="ServiceUnavailable",
        )

    def _update(self, request: AdmissionRequest, job: GenericJob) -> Verdict:
        assert request.old_object is not None
        old_queue, new_queue = _queue(request.old_object), job.queue_name()
        old_pod_sets = None
        old_running = False
        try:
            old = job_for(request.old_object)
            if old.finished() is not None:
                return allow()  # a finished job is never queued again
            old_running = not old.is_suspended()
            old_pod_sets = old.pod_sets()
        except (UnknownKind, ManifestError):
            pass  # judged against the store's record alone
        admitted: AdmittedView | None = None
        outage: DirectoryUnavailable | None = None
        try:
            admitted = self.directory.admitted(request.namespace, job.name or request.name)
        except DirectoryUnavailable as error:
            outage = error
        new_pod_sets = job.pod_sets() if new_queue is not None or old_pod_sets is not None else ()
        if old_running or admitted is not None:
            problems = running_edit_problems(
                old_queue=old_queue,
                new_queue=new_queue,
                old_pod_sets=old_pod_sets,
                new_pod_sets=new_pod_sets,
                admitted=admitted,
            )
            return deny("; ".join(problems)) if problems else allow()
        changed = old_queue != new_queue or (
            old_pod_sets is not None and gang(old_pod_sets) != gang(new_pod_sets)
        )
        if not changed:
            return allow()
        if outage is not None and new_queue is not None:
            return self._outage(new_queue, outage)
        return self._queued(request, job)
