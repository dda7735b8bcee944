"""The scheduler knobs survive a round trip through the mapping the leader records."""

from __future__ import annotations

import pytest

from queuemgr.core.policy import Ordering, OverrunPolicy, PreemptorAdmission, SchedulerPolicy
from queuemgr.core.resources import ResourceName
from queuemgr.spec.knobs import parse_policy, policy_knobs


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(SchedulerPolicy(), id="defaults"),
        pytest.param(
            SchedulerPolicy(
                preemptor_admission=PreemptorAdmission.AFTER_VICTIMS_STOP,
                reservation_depth=2,
                largest_reservations=1,
                largest_min_gpus=9,
                overrun_policy=OverrunPolicy.EVICT,
                ordering=Ordering.USAGE,
                usage_half_life=3600.0,
                usage_resource_weights={
                    ResourceName("nvidia.com/gpu"): 1.0,
                    ResourceName("cpu"): 0.001,
                },
            ),
            id="every-knob-changed",
        ),
    ],
)
def test_policy_knobs_parse_back_to_the_same_policy(policy: SchedulerPolicy) -> None:
    assert parse_policy(policy_knobs(policy), "scheduler") == policy
