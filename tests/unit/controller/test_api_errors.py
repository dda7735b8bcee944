"""The backend's reading of an API error: a lost race is retried quietly, the rest warned."""

from __future__ import annotations

import json

import pytest

from queuemgr.controller.kube_backend import api_error
from queuemgr.controller.ports import BackendError, StaleObject
from queuemgr.k8s.apiclient import ApiException

BARE = "the server rejected our request due to an error in our request"


def _error(status: int, body: dict[str, object] | None) -> ApiException:
    error = ApiException(status=status, reason="Reason")
    error.body = None if body is None else json.dumps(body)
    return error


@pytest.mark.parametrize(
    ("status", "body", "stale", "says"),
    [
        pytest.param(409, {"message": "the object has been modified"}, True, "changed", id="409"),
        pytest.param(422, {"message": BARE, "details": {}}, True, "changed", id="guard-failed"),
        pytest.param(
            422,
            {"message": 'Job.batch "j" is invalid: spec.parallelism', "details": {"causes": []}},
            False,
            "spec.parallelism",
            id="invalid",
        ),
        pytest.param(
            422, {"message": BARE, "details": {"causes": [{"field": "x"}]}}, False, BARE, id="named"
        ),
        pytest.param(500, {"message": "etcdserver: timeout"}, False, "500", id="server"),
        pytest.param(503, None, False, "Reason", id="no-body"),
    ],
)
def test_an_api_error_is_stale_only_when_another_writer_won(
    status: int, body: dict[str, object] | None, stale: bool, says: str
) -> None:
    error = api_error("start", "ns/j", _error(status, body))
    assert isinstance(error, BackendError)
    assert isinstance(error, StaleObject) is stale
    assert says in str(error) and "start ns/j" in str(error)
