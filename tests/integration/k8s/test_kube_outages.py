"""The controller through outages: the service down, the API server restarted, pods never ready.

Acceptance points 6 and 7 of the Kubernetes issue, and all-or-nothing
readiness: while queuemgr is stopped, the webhook (served apart here, part
of the service in production) keeps labelled Jobs suspended, or, itself
down, refuses them; nothing that happened meanwhile is lost once the
service is back. A restarted kube-apiserver breaks every watch: they resume
(or relist), nothing is missed and nothing is admitted twice. A gang whose
pods never get ready is evicted, requeued after a backoff, and finished
once it has used up its requeues.
"""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes.client.exceptions import ApiException
from sqlalchemy import text

from queuemgr.controller.kube_readiness import REQUEUE_COUNT
from queuemgr.controller.kube_section import PodsReadySettings
from queuemgr.k8s.jobstatus import REASON_ANNOTATION
from tests.controlplane.harness import wait_for
from tests.integration.k8s.kube_env import (
    FakeKubelet,
    KubeEnv,
    job_manifest,
    store_webhook,
    webhook_unreachable,
)

pytestmark = pytest.mark.integration
ADMITTED_AT = text("SELECT name, admitted_at FROM workloads")


def test_with_the_service_down_jobs_stay_suspended_and_nothing_is_lost(env: KubeEnv) -> None:
    a, b = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet, store_webhook(env):
        env.start()
        env.batch.create_namespaced_job(a, job_manifest("whole", pods=2, suspend=None))
        env.wait_running(a, "whole", 2)
        env.batch.create_namespaced_job(b, job_manifest("doomed", suspend=None))
        env.wait_state("doomed", "Pending")
        env.stop()
        # Meanwhile: the running gang completes, a queued job is deleted, new ones come.
        kubelet.finish(a, "whole", 2)
        env.batch.delete_namespaced_job("doomed", b, propagation_policy="Background")
        env.batch.create_namespaced_job(a, job_manifest("late-a", suspend=None))
        env.batch.create_namespaced_job(b, job_manifest("late-b", suspend=None))
        assert env.suspended(a, "late-a") and env.suspended(b, "late-b")  # by the webhook
        wait_for(lambda: env.job(a, "whole").status.succeeded == 2, what="whole completes")
        assert env.states()["whole"][0] == "Admitted"  # nobody told the store yet
        assert not env.bound_pods(a, "late-a") and not env.bound_pods(b, "late-b")
        env.start()
        env.wait_state("whole", "Finished")
        env.wait_state("doomed", "Finished")
        env.wait_running(a, "late-a", 1)
        env.wait_running(b, "late-b", 1)
        states = env.states()
        assert states["whole"] == ("Finished", "Succeeded")
        assert states["doomed"] == ("Finished", "Deleted")
        assert states["late-a"][0] == states["late-b"][0] == "Admitted"
        # With the webhook down too, failurePolicy Fail refuses labelled jobs outright.
        env.stop()
        webhook_unreachable(env)

        def refused() -> bool:
            try:
                env.batch.create_namespaced_job(a, job_manifest("refused", suspend=None))
            except ApiException as error:
                return "failed calling webhook" in str(error.body)
            env.batch.delete_namespaced_job("refused", a)
            return False

        wait_for(refused, timeout=30, what="labelled jobs refused while the webhook is down")
        unlabelled = job_manifest("plain", suspend=True)
        del unlabelled["metadata"]["labels"]
        env.batch.create_namespaced_job(a, unlabelled)  # not ours: never blocked


def test_an_apiserver_restart_loses_nothing_and_admits_nothing_twice(env: KubeEnv) -> None:
    a, b = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start()
        for ns, name in ((a, "a1"), (b, "b1")):
            env.batch.create_namespaced_job(ns, job_manifest(name))
        env.wait_running(a, "a1", 1)
        env.wait_running(b, "b1", 1)
        for ns, name in ((a, "a2"), (b, "b2")):
            env.batch.create_namespaced_job(ns, job_manifest(name))
        env.wait_state("a2", "Pending")
        env.wait_state("b2", "Pending")
        with env.engine.connect() as conn:
            admitted_at = {r.name: r.admitted_at for r in conn.execute(ADMITTED_AT)}
        peak = [0]
        watching = threading.Event()

        def sample() -> None:
            while not watching.wait(0.2):
                peak[0] = max(peak[0], env.admitted_gpus())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            away = env.plane.restart_apiserver()
            assert away > 0
            # Changes right after the restart: a new job, and a1 completes.
            env.batch.create_namespaced_job(b, job_manifest("b3"))
            kubelet.finish(a, "a1", 1)
            env.wait_state("a1", "Finished")
            env.wait_running(a, "a2", 1)
            kubelet.finish(b, "b1", 1)
            env.wait_running(b, "b2", 1)
            for ns, name in ((a, "a2"), (b, "b2")):
                kubelet.finish(ns, name, 1)
            env.wait_running(b, "b3", 1)
            kubelet.finish(b, "b3", 1)
            for name in ("a2", "b2", "b3"):
                env.wait_state(name, "Finished")
        finally:
            watching.set()
            sampler.join(5)
        assert peak[0] <= 16
        states = env.states()
        assert set(states) == {"a1", "a2", "b1", "b2", "b3"}
        assert all(s == ("Finished", "Succeeded") for s in states.values()), states
        with env.engine.connect() as conn:
            after = {r.name: r.admitted_at for r in conn.execute(ADMITTED_AT)}
        assert after["a1"] == admitted_at["a1"] and after["b1"] == admitted_at["b1"]
        for ns, name in ((a, "a1"), (a, "a2"), (b, "b1"), (b, "b2"), (b, "b3")):
            assert env.job(ns, name).status.succeeded == 1  # each ran exactly once


def test_a_gang_whose_pods_never_get_ready_is_evicted_requeued_then_failed(
    env: KubeEnv,
) -> None:
    a, b = env.namespaces
    settings = PodsReadySettings(timeout=3.0, backoff=3.0, backoff_max=6.0, requeue_limit=1)
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        kubelet.held.add("stuck")
        env.start(pods_ready=settings)
        env.batch.create_namespaced_job(b, job_manifest("fine"))
        env.batch.create_namespaced_job(a, job_manifest("stuck"))
        env.wait_running(a, "stuck", 1)

        def evicted() -> bool:
            job = env.job(a, "stuck")
            notes = job.metadata.annotations or {}
            return (
                env.states()["stuck"] == ("Evicted", "PodsReadyTimeout")
                and bool(job.spec.suspend)
                and notes.get(REQUEUE_COUNT) == "1"
                and notes.get(REASON_ANNOTATION, "").startswith("PodsReadyTimeout")
            )

        wait_for(evicted, timeout=30, what="stuck evicted, suspended, its count on the Job")
        env.wait_state("stuck", "Admitted", timeout=30)  # requeued after 3 s, admitted again
        wait_for(
            lambda: env.states()["stuck"] == ("Finished", "RequeueLimitExceeded"),
            timeout=30,
            what="stuck finished after its one requeue",
        )
        wait_for(lambda: env.suspended(a, "stuck"), what="stuck suspended for good")
        assert env.states()["fine"][0] == "Admitted"  # ready in time: never touched
        assert not env.suspended(b, "fine")
        assert env.admitted_gpus() == 8


def test_after_a_restart_readiness_is_timed_from_admission_and_a_ready_gang_stays_ready(
    env: KubeEnv,
) -> None:
    a, b = env.namespaces
    # Long enough that a clock restarted by the new leader would show: 5 s down + 20 s.
    settings = PodsReadySettings(timeout=20.0, backoff=60.0, backoff_max=60.0, requeue_limit=3)
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        kubelet.held.add("stuck")
        env.start(pods_ready=settings)
        env.batch.create_namespaced_job(b, job_manifest("fine"))
        env.batch.create_namespaced_job(a, job_manifest("stuck"))
        env.wait_running(b, "fine", 1)
        wait_for(lambda: _pods_ready_at(env)["fine"] is not None, what="fine recorded as ready")
        assert _pods_ready_at(env)["stuck"] is None
        env.stop()
        time.sleep(5.0)
        # Unready now: a gang that was ready is not evicted for it, by this or any leader.
        kubelet.held.add("fine")
        _unready_pods(env, b, "fine")
        env.start(pods_ready=settings)
        wait_for(
            lambda: env.states()["stuck"] == ("Evicted", "PodsReadyTimeout"),
            timeout=30,
            what="stuck evicted",
        )
        with env.engine.connect() as conn:
            waited = conn.execute(
                text(
                    "SELECT extract(epoch FROM state_since - admitted_at) FROM workloads"
                    " WHERE name = 'stuck'"
                )
            ).scalar_one()
        # From its admission (20 s, plus a check's interval), not from the new leader's
        # election (at least 5 s down, then 20 s).
        assert 20.0 <= float(waited) < 25.0
        assert env.states()["fine"] == ("Admitted", "Admitted")


def _pods_ready_at(env: KubeEnv) -> dict[str, object]:
    with env.engine.connect() as conn:
        rows = conn.execute(text("SELECT name, pods_ready_at FROM workloads"))
        return {r.name: r.pods_ready_at for r in rows}


def _unready_pods(env: KubeEnv, ns: str, job: str) -> None:
    for pod in env.bound_pods(ns, job):
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        env.core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": status})
