"""A real Kubernetes control plane per test session (per pytest-xdist worker).

The ``control_plane`` fixture starts etcd, kube-apiserver, kube-controller-manager
and kube-scheduler on free ports of 127.0.0.1 (see ``tests/controlplane/harness.py``),
building the binaries first if the cache lacks them
(``python -m tests.controlplane.build``). Without Go and without built binaries,
the tests that use it are skipped, saying so.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from sqlalchemy import Engine

from tests.controlplane import build
from tests.controlplane.harness import ControlPlane, start_control_plane
from tests.integration.k8s.kube_env import KubeEnv, kube_env


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if not build.is_built() and build.go_command() is None:
        pytest.skip(
            "Kubernetes integration tests need Go to build kube-apiserver and etcd"
            " (`python -m tests.controlplane.build`); no `go` on PATH"
        )
    try:
        binaries = build.ensure_built()
    except build.BuildError as error:
        pytest.fail(f"could not build the Kubernetes control plane: {error}", pytrace=False)
    with start_control_plane(binaries, tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane


@pytest.fixture
def k8s_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """An admin ``kubernetes.client.ApiClient``, closed after the test."""
    with control_plane.api_client() as api_client:
        yield api_client


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    with control_plane.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespace({"metadata": {"name": name}})
        yield name
        core.delete_namespace(name)


@pytest.fixture
def env(control_plane: ControlPlane, engine: Engine, database_url: str) -> Iterator[KubeEnv]:
    """Two managed namespaces, GPU nodes and their queues (KubeEnv.setup); torn down after."""
    with kube_env(control_plane, engine, database_url) as e:
        e.setup()
        yield e
