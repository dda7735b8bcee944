"""The store's errors: which driver failure becomes which, and what callers read off them."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from queuemgr.store.errors import (
    InvalidValue,
    PermissionDenied,
    SchemaMissing,
    StoreError,
    translate,
    translated,
)


def _wrapped(driver: psycopg.Error) -> sa.exc.DBAPIError:
    return sa.exc.ProgrammingError("SELECT 1", {}, driver)


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        (psycopg.errors.InsufficientPrivilege("permission denied for table x"), PermissionDenied),
        (psycopg.errors.InvalidParameterValue("gpus must be positive"), InvalidValue),
        (psycopg.errors.UndefinedTable('relation "workloads" does not exist'), SchemaMissing),
        (psycopg.errors.SerializationFailure("could not serialize access"), StoreError),
    ],
)
def test_each_failure_callers_tell_apart_has_its_class(
    driver: psycopg.Error, expected: type[StoreError]
) -> None:
    for original in (_wrapped(driver), driver):  # through SQLAlchemy, or psycopg's own
        error = translate(original)
        assert type(error) is expected
        assert error.reason == str(driver)  # the server's words, as the CLI prints them
        assert str(error) == str(original)  # the logs' words, as before
        assert error.kind == type(original).__name__


def test_the_reason_is_the_first_line_and_never_empty() -> None:
    error = translate(_wrapped(psycopg.errors.UndefinedTable("first\nDETAIL: second")))
    assert error.reason == "first"
    assert translate(sa.exc.ResourceClosedError("")).reason == "ResourceClosedError"
    assert StoreError("").reason == "StoreError"


def test_translated_keeps_the_original_as_cause_and_lets_other_errors_pass() -> None:
    original = _wrapped(psycopg.errors.InsufficientPrivilege("no"))
    with pytest.raises(PermissionDenied) as caught, translated():
        raise original
    assert caught.value.__cause__ is original
    with pytest.raises(KeyError), translated():
        raise KeyError("not the database's")
