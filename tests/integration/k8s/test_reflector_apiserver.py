"""The reflector against the real kube-apiserver: resume, 410 Gone, deletes seen by a relist.

ConfigMaps stand in for any kind (the protocol is the same for all); each
test watches only its own namespace.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

from queuemgr.k8s.reflector import Change, Gone, Reflector
from tests.controlplane.harness import ControlPlane, wait_for

pytestmark = pytest.mark.integration
LABEL = "queuemgr.test/reflector"  # not kube-root-ca.crt, which every namespace gets


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []

    def __call__(self, change: Change, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((change.value, obj["metadata"]["name"]))

    def of(self, name: str) -> list[str]:
        with self.lock:
            return [c for c, n in self.events if n == name]


def _reflector(api: client.ApiClient, namespace: str, seen: Seen) -> Reflector:
    core = client.CoreV1Api(api)

    def lister(**kwargs: Any) -> Any:
        return core.list_namespaced_config_map(namespace, label_selector=LABEL, **kwargs)

    return Reflector("configmaps", lister, seen, max_backoff=0.5, page_size=2)


def _make(core: client.CoreV1Api, namespace: str, name: str) -> None:
    meta = {"name": name, "labels": {LABEL: "yes"}}
    core.create_namespaced_config_map(namespace, {"metadata": meta, "data": {"v": "1"}})


def test_a_watch_resumes_across_an_apiserver_restart(
    control_plane: ControlPlane, k8s_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(k8s_client)
    for name in ("a", "b", "c"):
        _make(core, namespace, name)  # three: the first list takes two pages
    seen = Seen()
    r = _reflector(k8s_client, namespace, seen)
    r.start()
    try:
        assert r.wait_synced(30)
        assert sorted(seen.events) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
        core.patch_namespaced_config_map("a", namespace, {"data": {"v": "2"}})
        wait_for(lambda: seen.of("a") == ["ADDED", "MODIFIED"], what="a modified")
        control_plane.restart_apiserver()
        core.patch_namespaced_config_map("b", namespace, {"data": {"v": "2"}})
        core.delete_namespaced_config_map("c", namespace)
        _make(core, namespace, "d")
        wait_for(lambda: seen.of("d") == ["ADDED"], timeout=60, what="d seen after the restart")
        wait_for(lambda: seen.of("c") == ["ADDED", "DELETED"], what="c's delete")
        assert seen.of("b") == ["ADDED", "MODIFIED"]  # exactly once: no replay, no miss
        assert seen.of("a") == ["ADDED", "MODIFIED"]
        assert sorted(o["metadata"]["name"] for o in r.items()) == ["a", "b", "d"]
        assert r.watches >= 2
    finally:
        r.stop()


def test_410_gone_for_an_expired_version_and_a_relist_reports_missed_deletes(
    k8s_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(k8s_client)
    for name in ("a", "b"):
        _make(core, namespace, name)
    seen = Seen()
    r = _reflector(k8s_client, namespace, seen)
    r.relist()
    assert sorted(seen.events) == [("ADDED", "a"), ("ADDED", "b")]
    fresh = r.resource_version
    r.resource_version = "1"  # long compacted out of the watch cache
    with pytest.raises(Gone):
        r.watch_once()
    r.resource_version = fresh
    # While nobody watches: b is deleted, c created, a changed. The relist tells all.
    core.delete_namespaced_config_map("b", namespace)
    _make(core, namespace, "c")
    core.patch_namespaced_config_map("a", namespace, {"data": {"v": "2"}})
    r.relist()
    assert seen.of("b") == ["ADDED", "DELETED"]
    assert seen.of("c") == ["ADDED"]
    assert seen.of("a") == ["ADDED", "MODIFIED"]
    assert r.lists == 2
    assert sorted(o["metadata"]["name"] for o in r.items()) == ["a", "c"]
