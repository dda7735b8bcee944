"""Minimal CustomResourceDefinitions for JobSet and Kubeflow PyTorchJob, for the test apiserver.

The upstream CRDs carry full OpenAPI schemas of the pod templates; queuemgr
only needs the objects to exist, be served under their real group, version
and plural, have a status subresource and keep every field it writes, so the
schemas here preserve unknown fields. No controller runs for them: a test
plays the JobSet or training operator's part when it needs a status.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.kinds import JobSet, PyTorchJob
from tests.controlplane.harness import wait_for


def _crd(kind: type[JobSet] | type[PyTorchJob]) -> dict[str, Any]:
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.PLURAL}.{kind.GROUP}"},
        "spec": {
            "group": kind.GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": kind.PLURAL,
                "singular": kind.KIND.lower(),
                "kind": kind.KIND,
                "listKind": f"{kind.KIND}List",
            },
            "versions": [
                {
                    "name": kind.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                }
            ],
        },
    }


def install_job_crds(api_client: client.ApiClient) -> None:
    """Create the JobSet and PyTorchJob CRDs (if missing) and wait until they are served."""
    extensions = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    for kind in (JobSet, PyTorchJob):
        try:
            extensions.create_custom_resource_definition(_crd(kind))
        except ApiException as error:
            if error.status != 409:
                raise

    wait_for(
        lambda: all(_served(custom, kind) for kind in (JobSet, PyTorchJob)),
        timeout=60,
        interval=0.5,
        what="the JobSet and PyTorchJob CRDs to be served",
    )


def remove_job_crds(api_client: client.ApiClient) -> None:
    """Delete the JobSet and PyTorchJob CRDs (if there) and wait until they are not served."""
    extensions = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    for kind in (JobSet, PyTorchJob):
        try:
            extensions.delete_custom_resource_definition(f"{kind.PLURAL}.{kind.GROUP}")
        except ApiException as error:
            if error.status != 404:
                raise

    wait_for(
        lambda: not any(_served(custom, kind) for kind in (JobSet, PyTorchJob)),
        timeout=60,
        interval=0.5,
        what="the JobSet and PyTorchJob CRDs to go",
    )


def _served(custom: client.CustomObjectsApi, kind: type[JobSet] | type[PyTorchJob]) -> bool:
    try:
        custom.list_namespaced_custom_object(kind.GROUP, kind.VERSION, "default", kind.PLURAL)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
