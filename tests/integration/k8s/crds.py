"""The upstream CustomResourceDefinitions of the job kinds, served by the test apiserver.

The CRDs are the projects' own, full OpenAPI schemas included, so the
apiserver validates (and prunes) every object and patch a test or queuemgr
sends, as it would in a cluster running the operator:

* JobSet: ``sigs.k8s.io/jobset`` v0.11.1,
  ``config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml``;
* PyTorchJob: ``github.com/kubeflow/training-operator`` v1.8.1,
  ``manifests/base/crds/kubeflow.org_pytorchjobs.yaml``;
* RayCluster and RayJob: ``github.com/ray-project/kuberay/ray-operator`` v1.5.0,
  ``config/crd/bases/ray.io_rayclusters.yaml`` and ``ray.io_rayjobs.yaml``;
* ProvisioningRequest: ``k8s.io/autoscaler/cluster-autoscaler/apis``
  v0.0.0-20240627115740-d52e4b9665d7,
  ``config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml``. The module
  proxy refuses every newer version of that module, and this one's CRD serves
  ``v1beta1`` only; ``v1`` (which queuemgr speaks) is the same schema under a
  new name upstream, so :func:`install_provisioning_crd` serves the upstream
  schema as ``v1`` (the storage version) beside ``v1beta1``.

They come from the Go modules ``tests/controlplane/crds/go.mod`` pins (its
``go.sum`` holds their hashes): ``go mod download -json <module>@<version>``,
run in that directory, fetches a module into the Go module cache through the
module proxy (a no-op when the cache has it) and names its directory, whence
the YAML is read. Nothing is copied into the repository. The module proxy
refuses to list JobSet's versions (so ``sigs.k8s.io/jobset@latest`` is a 403)
but serves a pinned version. Like the control plane, this needs ``go`` on PATH.

No controller runs for these kinds: a test plays the JobSet, training or Ray
operator's part when it needs a status.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.jobframework import GenericJob
from queuemgr.k8s.kinds import JobSet, PyTorchJob, RayCluster, RayJob
from tests.controlplane import build
from tests.controlplane.harness import wait_for

GO_MODULE = Path(build.__file__).resolve().parent / "crds"
JOBSET_MODULE = "sigs.k8s.io/jobset"
TRAINING_MODULE = "github.com/kubeflow/training-operator"
RAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
AUTOSCALER_MODULE = "k8s.io/autoscaler/cluster-autoscaler/apis"


class UpstreamCrdError(RuntimeError):
    """An upstream CRD could not be fetched or is not what the tests expect."""


@dataclass(frozen=True)
class UpstreamCrd:
    """One CRD: where it is in which Go module, and the resource it serves."""

    module: str
    path: str
    group: str
    version: str
    plural: str
    kind: str

    @classmethod
    def of(cls, kind: type[GenericJob], module: str, path: str) -> UpstreamCrd:
        return cls(module, path, kind.GROUP, kind.VERSION, kind.PLURAL, kind.KIND)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


CRDS = (
    UpstreamCrd.of(
        JobSet, JOBSET_MODULE, "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
    ),
    UpstreamCrd.of(
        PyTorchJob, TRAINING_MODULE, "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
    ),
    UpstreamCrd.of(RayCluster, RAY_MODULE, "config/crd/bases/ray.io_rayclusters.yaml"),
    UpstreamCrd.of(RayJob, RAY_MODULE, "config/crd/bases/ray.io_rayjobs.yaml"),
)


# Not a job kind: installed on its own (install_provisioning_crd), by the tests of the
# provisioning-request admission check.
PROVISIONING_CRD = UpstreamCrd(
    AUTOSCALER_MODULE,
    "config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml",
    "autoscaling.x-k8s.io",
    "v1beta1",
    "provisioningrequests",
    "ProvisioningRequest",
)
ALL_CRDS = (*CRDS, PROVISIONING_CRD)


def module_version(module: str) -> str:
    """The version of ``module`` that ``tests/controlplane/crds/go.mod`` requires."""
    return build.required_version(GO_MODULE / "go.mod", module)


@functools.cache
def module_dir(module: str) -> Path:
    """The module's directory in the Go module cache, downloading it first if need be."""
    go = build.go_command()
    if go is None:
        raise build.GoMissing(
            "the `go` command is not on PATH: install Go 1.26+ to fetch the upstream CRDs"
            " (JobSet, PyTorchJob, RayCluster, RayJob) the integration tests install"
        )
    target = f"{module}@{module_version(module)}"
    env = dict(os.environ, GOWORK="off")
    env["GOFLAGS"] = " ".join(
        [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")] + ["-mod=mod"]
    )
    result = subprocess.run(
        [go, "mod", "download", "-json", target],
        cwd=GO_MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError:
        info = {}
    if result.returncode != 0 or info.get("Error") or not info.get("Dir"):
        detail = info.get("Error") or result.stderr.strip() or f"exit status {result.returncode}"
        raise UpstreamCrdError(f"`go mod download {target}` failed: {detail}")
    return Path(info["Dir"])


@functools.cache
def crd_manifest(crd: UpstreamCrd) -> dict[str, Any]:
    """The upstream CRD, parsed (shared: do not modify it), checked against ``crd``."""
    path = module_dir(crd.module) / crd.path
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open() as handle:
        loaded = yaml.load(handle, Loader=loader)
    if not isinstance(loaded, dict):
        raise UpstreamCrdError(f"{crd.module} {crd.path} is not one YAML mapping")
    spec = loaded.get("spec") or {}
    names = spec.get("names") or {}
    served = [v.get("name") for v in spec.get("versions") or () if v.get("served")]
    found = (loaded.get("kind"), (loaded.get("metadata") or {}).get("name"), spec.get("group"))
    if (
        found != ("CustomResourceDefinition", crd.name, crd.group)
        or (names.get("plural"), names.get("kind")) != (crd.plural, crd.kind)
        or crd.version not in served
    ):
        raise UpstreamCrdError(
            f"{crd.module} {crd.path} is not the CRD of {crd.name} serving {crd.kind}"
            f" {crd.version} (found {found}, names {names}, served versions {served})"
        )
    return loaded


def install_job_crds(api_client: client.ApiClient) -> None:
    """Create the upstream CRDs (if missing) and wait until they are served."""
    manifests = [crd_manifest(crd) for crd in CRDS]  # fetch everything before creating anything
    extensions = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    for body in manifests:
        try:
            # The response is the whole CRD again: not worth the typed model.
            response = extensions.create_custom_resource_definition(body, _preload_content=False)
            response.read()
            response.release_conn()
        except ApiException as error:
            if error.status != 409:
                raise

    wait_for(
        lambda: all(_served(custom, crd) for crd in CRDS),
        timeout=60,
        interval=0.5,
        what=f"the {_kinds()} CRDs to be served",
    )


def remove_job_crds(api_client: client.ApiClient) -> None:
    """Delete the CRDs (if there) and wait until they are not served."""
    extensions = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    for crd in CRDS:
        try:
            extensions.delete_custom_resource_definition(crd.name)
        except ApiException as error:
            if error.status != 404:
                raise

    wait_for(
        lambda: not any(_served(custom, crd) for crd in CRDS),
        timeout=60,
        interval=0.5,
        what=f"the {_kinds()} CRDs to go",
    )


def _kinds() -> str:
    return ", ".join(crd.kind for crd in CRDS)


def _served(custom: client.CustomObjectsApi, crd: UpstreamCrd) -> bool:
    try:
        custom.list_namespaced_custom_object(crd.group, crd.version, "default", crd.plural)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def install_provisioning_crd(api_client: client.ApiClient) -> None:
    """The upstream ProvisioningRequest CRD, its schema served as ``v1`` too (the storage
    version; no conversion: the two are the same schema), created if missing."""
    upstream = crd_manifest(PROVISIONING_CRD)
    body = copy.deepcopy(upstream)
    (beta,) = [v for v in body["spec"]["versions"] if v["name"] == "v1beta1"]
    v1 = {**copy.deepcopy(beta), "name": "v1", "storage": True, "served": True}
    beta["storage"] = False
    body["spec"]["versions"] = [v1, beta]
    extensions = client.ApiextensionsV1Api(api_client)
    try:
        response = extensions.create_custom_resource_definition(body, _preload_content=False)
        response.read()
        response.release_conn()
    except ApiException as error:
        if error.status != 409:
            raise
    custom = client.CustomObjectsApi(api_client)
    served = UpstreamCrd(
        PROVISIONING_CRD.module,
        PROVISIONING_CRD.path,
        PROVISIONING_CRD.group,
        "v1",
        PROVISIONING_CRD.plural,
        PROVISIONING_CRD.kind,
    )
    wait_for(
        lambda: _served(custom, served),
        timeout=60,
        interval=0.5,
        what="the ProvisioningRequest CRD to be served",
    )
