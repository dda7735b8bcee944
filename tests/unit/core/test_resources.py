"""Quantity parsing and formatting: exact integers in each resource's canonical unit."""

from __future__ import annotations

import pytest

from queuemgr.core.resources import (
    QuantityError,
    add,
    fits,
    format_quantity,
    how_many,
    parse_quantity,
    parse_resources,
    scale,
    sub,
    total,
)

GiB = 2**30

PARSE = [
    ("cpu", "500m", 500),
    ("cpu", "1.5", 1500),
    ("cpu", "2", 2000),
    ("cpu", 4, 4000),
    ("cpu", 1.5, 1500),  # YAML float
    ("cpu", 0.1, 100),  # YAML float whose binary value is not 1/10
    ("cpu", "1e3", 1_000_000),
    ("cpu", "1k", 1_000_000),
    ("cpu", ".5", 500),
    ("cpu", "0", 0),
    ("memory", "64Gi", 64 * GiB),
    ("memory", "2Ti", 2 * 2**40),
    ("memory", "1.5Gi", 3 * GiB // 2),
    ("memory", "1e3", 1000),
    ("memory", "1k", 1000),
    ("memory", "128M", 128 * 10**6),
    ("memory", 1024, 1024),
    ("nvidia.com/gpu", "8", 8),
    ("nvidia.com/gpu", 8, 8),
    ("nvidia.com/gpu", 8.0, 8),
    ("nvidia.com/gpu", "1e1", 10),
    ("nvidia.com/gpu", " 4 ", 4),
    ("pods", "1k", 1000),
]


@pytest.mark.parametrize(
    ("resource", "value", "expected"), PARSE, ids=[f"{r}={v!r}" for r, v, _ in PARSE]
)
def test_parse_quantity(resource: str, value: object, expected: int) -> None:
    got = parse_quantity(value, resource=resource, field="spec.x")
    assert got == expected
    assert type(got) is int


BAD = [
    ("cpu", "12x", "bad quantity"),
    ("cpu", "", "bad quantity"),
    ("cpu", "1.2.3", "bad quantity"),
    ("cpu", "-1", "negative"),
    ("memory", -5, "negative"),
    ("nvidia.com/gpu", "0.5", "not a whole unit"),
    ("nvidia.com/gpu", 0.5, "not a whole unit"),
    ("cpu", "0.0005", "not a whole millicore"),
    ("cpu", "1n", "not a whole millicore"),
    ("cpu", True, "bad quantity"),
    ("cpu", None, "bad quantity"),
    ("cpu", [1], "bad quantity"),
]


@pytest.mark.parametrize(("resource", "value", "why"), BAD, ids=[f"{r}={v!r}" for r, v, _ in BAD])
def test_parse_quantity_errors_name_field_and_value(resource: str, value: object, why: str) -> None:
    field = "clusterQueues[0].flavors[1].nominal"
    with pytest.raises(QuantityError) as err:
        parse_quantity(value, resource=resource, field=field)
    assert err.value.field == field
    assert err.value.value == value
    text = str(err.value)
    assert field in text
    assert repr(value) in text
    assert why in text


def test_parse_resources_names_the_resource_in_the_field() -> None:
    assert parse_resources({"cpu": "500m", "nvidia.com/gpu": 2}, field="req") == {
        "cpu": 500,
        "nvidia.com/gpu": 2,
    }
    with pytest.raises(QuantityError, match=r"req\.nvidia\.com/gpu.*'0\.5'"):
        parse_resources({"nvidia.com/gpu": "0.5"}, field="req")
    with pytest.raises(QuantityError, match="bad resource name"):
        parse_resources({"Not A Name!": 1}, field="req")
    with pytest.raises(QuantityError, match="expected a mapping"):
        parse_resources(["cpu"], field="req")


FORMAT = [
    ("cpu", 1500, "1500m"),
    ("cpu", 2000, "2"),
    ("cpu", 0, "0"),
    ("memory", 64 * GiB, "64Gi"),
    ("memory", 2 * 2**40, "2Ti"),
    ("memory", 1000, "1000"),
    ("memory", 0, "0"),
    ("nvidia.com/gpu", 8, "8"),
]


@pytest.mark.parametrize(
    ("resource", "amount", "text"), FORMAT, ids=[f"{r}={a}" for r, a, _ in FORMAT]
)
def test_format_quantity_round_trips(resource: str, amount: int, text: str) -> None:
    assert format_quantity(resource, amount) == text
    assert parse_quantity(text, resource=resource, field="f") == amount


@pytest.mark.parametrize("amount", [0, 1, 999, 1000, 1001, 1536 * 2**20, 3 * 2**50, 10**12 + 7])
@pytest.mark.parametrize("resource", ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"])
def test_format_then_parse_is_identity(resource: str, amount: int) -> None:
    assert parse_quantity(format_quantity(resource, amount), resource=resource, field="f") == amount


def test_vector_helpers() -> None:
    a = {"cpu": 1000, "nvidia.com/gpu": 2}
    b = {"nvidia.com/gpu": 1, "memory": 5}
    assert add(a, b) == {"cpu": 1000, "nvidia.com/gpu": 3, "memory": 5}
    assert sub(a, b) == {"cpu": 1000, "nvidia.com/gpu": 1, "memory": -5}
    assert scale(a, 3) == {"cpu": 3000, "nvidia.com/gpu": 6}
    assert total([a, b, a]) == {"cpu": 2000, "nvidia.com/gpu": 5, "memory": 5}
    assert a == {"cpu": 1000, "nvidia.com/gpu": 2}  # inputs untouched


HOW_MANY = [
    ({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 7}, 3),
    ({"nvidia.com/gpu": 2, "cpu": 4000}, {"nvidia.com/gpu": 8, "cpu": 10000}, 2),
    ({"nvidia.com/gpu": 1}, {"cpu": 10000}, 0),
    ({"nvidia.com/gpu": 0}, {}, 1 << 30),
]


@pytest.mark.parametrize(
    ("per", "free", "n"), HOW_MANY, ids=["gpu", "cpu-bound", "missing", "zero-request"]
)
def test_how_many_and_fits(per: dict[str, int], free: dict[str, int], n: int) -> None:
    assert how_many(per, free) == n
    assert fits(per, free) == (n >= 1)
