"""Priority from Kubernetes PriorityClasses, through the real control plane.

A job's queue priority is the value of the PriorityClass it names (the
``queuemgr.io/priority-class`` label, else its pods' ``priorityClassName``):
a later, higher-priority job runs before an earlier one of its queue. A job
naming a class that does not exist is refused a place in the queue, with the
field and the name on the Job, and is queued once the class is created.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import Engine, text

from queuemgr.k8s.jobframework import PRIORITY_LABEL
from queuemgr.k8s.jobstatus import REASON_ANNOTATION
from tests.controlplane.harness import wait_for
from tests.integration.k8s.kube_env import FakeKubelet, KubeEnv, job_manifest

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def priority_class(env: KubeEnv, name: str, value: int) -> Iterator[None]:
    api = client.SchedulingV1Api(env.api)
    api.create_priority_class({"metadata": {"name": name}, "value": value})
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            api.delete_priority_class(name)


def with_class(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    manifest["spec"]["template"]["spec"]["priorityClassName"] = name
    return manifest


def priorities(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT name, priority FROM workloads"))
        return {r.name: r.priority for r in rows}


def test_a_later_higher_priority_job_runs_first(env: KubeEnv) -> None:
    a, _ = env.namespaces
    high = f"qm-high-{env.suffix}"
    with priority_class(env, high, 1000), FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start()
        env.batch.create_namespaced_job(a, job_manifest("fill", pods=2))  # the whole cluster
        env.wait_running(a, "fill", 2)
        env.batch.create_namespaced_job(a, job_manifest("early", pods=2))
        env.wait_state("early", "Pending")
        env.batch.create_namespaced_job(a, with_class(job_manifest("urgent", pods=2), high))
        env.wait_state("urgent", "Pending")
        assert priorities(env.engine) == {"fill": 0, "early": 0, "urgent": 1000}
        kubelet.finish(a, "fill", 2)
        env.wait_running(a, "urgent", 2)
        assert env.suspended(a, "early")
        assert env.states()["early"][0] == "Pending"


def test_an_unknown_class_waits_on_the_job_until_the_class_exists(env: KubeEnv) -> None:
    a, _ = env.namespaces
    name = f"qm-later-{env.suffix}"
    job = job_manifest("labelled")
    job["metadata"]["labels"][PRIORITY_LABEL] = name
    with FakeKubelet(env.plane, list(env.namespaces)):
        env.start()
        env.batch.create_namespaced_job(a, job)

        def reason() -> str:
            notes = env.job(a, "labelled").metadata.annotations or {}
            return str(notes.get(REASON_ANNOTATION, ""))

        wait_for(lambda: "no PriorityClass" in reason(), what="the Invalid reason on the Job")
        assert PRIORITY_LABEL in reason() and name in reason()
        assert "labelled" not in env.states()
        assert env.suspended(a, "labelled")
        with priority_class(env, name, 7):
            env.wait_running(a, "labelled", 1)
            assert priorities(env.engine)["labelled"] == 7
