"""The Mutating- and ValidatingWebhookConfiguration objects that point the API server at us.

Why it exists: the failure policy is the webhook's most consequential
setting, so it is written once, here, and the manifests and tests use these
objects. The policy:

- ``failurePolicy: Fail``: when queuemgr's webhook cannot answer, a labelled
  job is refused rather than created unsuspended behind queuemgr's back
  (which would run it outside any quota);
- ``objectSelector`` matches only objects carrying the label
  ``queuemgr.io/queue-name``, and ``namespaceSelector`` only managed
  namespaces, so an outage of queuemgr never blocks anything else: unlabelled
  Jobs, JobSets and PyTorchJobs, and every other kind, never reach the
  webhook;
- ``sideEffects: None`` (the webhook only reads), ``timeoutSeconds: 10``;
  the mutating webhook runs on CREATE with ``reinvocationPolicy: IfNeeded``
  (if a later mutating webhook unsuspends the job, ours runs again); the
  validating webhook on CREATE and UPDATE (an UPDATE that removes the label
  still reaches it: the object selector is matched against the old object
  too).

What must stay true: the rules list every kind of
:data:`queuemgr.k8s.jobs.KINDS` (main resource only, no subresources); the
``caBundle`` is base64 of the PEM, as Kubernetes' ``[]byte`` fields are.
"""

from __future__ import annotations

import base64
from typing import Any

from queuemgr.k8s.jobs import KINDS, QUEUE_LABEL
from queuemgr.k8s.selectors import LabelSelector

MUTATING_NAME = "queuemgr-mutating"
VALIDATING_NAME = "queuemgr-validating"
MUTATE_WEBHOOK = "mutate-jobs.queuemgr.io"
VALIDATE_WEBHOOK = "validate-jobs.queuemgr.io"
TIMEOUT_SECONDS = 10


def service_client_config(name: str, namespace: str, path: str, port: int = 443) -> dict[str, Any]:
    """How the API server reaches an in-cluster Service."""
    return {"service": {"name": name, "namespace": namespace, "path": path, "port": port}}


def url_client_config(base_url: str, path: str) -> dict[str, Any]:
    """How the API server reaches a URL (tests on 127.0.0.1, out-of-cluster runs)."""
    return {"url": base_url.rstrip("/") + path}


def _rules(operations: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [k.GROUP],
            "apiVersions": [k.VERSION],
            "resources": [k.PLURAL],
            "operations": operations,
            "scope": "Namespaced",
        }
        for k in KINDS
    ]


def _webhook(
    name: str,
    client_config: dict[str, Any],
    operations: list[str],
    ca_bundle: bytes | None,
    namespace_selector: LabelSelector,
) -> dict[str, Any]:
    config = dict(client_config)
    if ca_bundle:
        config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return {
        "name": name,
        "clientConfig": config,
        "rules": _rules(operations),
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "admissionReviewVersions": ["v1"],
        "objectSelector": {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]},
        "namespaceSelector": namespace_selector.as_json(),
    }


def webhook_configurations(
    *,
    mutate_client: dict[str, Any],
    validate_client: dict[str, Any],
    ca_bundle: bytes | None = None,
    namespace_selector: LabelSelector | None = None,
    mutating_name: str = MUTATING_NAME,
    validating_name: str = VALIDATING_NAME,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration, as dicts."""
    selector = namespace_selector or LabelSelector()
    mutating = _webhook(MUTATE_WEBHOOK, mutate_client, ["CREATE"], ca_bundle, selector)
    mutating["reinvocationPolicy"] = "IfNeeded"
    validating = _webhook(
        VALIDATE_WEBHOOK, validate_client, ["CREATE", "UPDATE"], ca_bundle, selector
    )
    group = "admissionregistration.k8s.io/v1"
    return (
        {
            "apiVersion": group,
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": mutating_name, "labels": {"app.kubernetes.io/name": "queuemgr"}},
            "webhooks": [mutating],
        },
        {
            "apiVersion": group,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": validating_name, "labels": {"app.kubernetes.io/name": "queuemgr"}},
            "webhooks": [validating],
        },
    )
