"""Quantity parsing and formatting: exact integers in each resource's canonical unit."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    # Finer than the canonical unit: cpu and byte resources round up, as Kubernetes does.
    ("memory", "29.8018Gi", -(-298018 * GiB // 10**4)),  # 31999439090.4832 bytes
    ("memory", 29.8018, 30),  # a YAML float of bytes
    ("memory", "0.5", 1),
    ("memory", "1m", 1),
    ("memory", "1n", 1),
    ("memory", "1.5e-3", 1),
    ("memory", "0.0", 0),
    ("memory", "1.0000000001Gi", GiB + 1),  # 1073741824.1073741824 bytes
    ("ephemeral-storage", "2.5Ki", 2560),
    ("ephemeral-storage", "0.3Ki", 308),  # 307.2 bytes
    ("cpu", "0.1m", 1),
    ("cpu", "0.0005", 1),
    ("cpu", "1n", 1),
    ("cpu", "1.0005", 1001),
    ("cpu", "1000001u", 1001),
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
    ("cpu", "-0.1m", "negative"),
    ("memory", -5, "negative"),
    ("memory", "-29.8018Gi", "negative"),
    ("nvidia.com/gpu", "-1", "negative"),
    # Extended resources take whole numbers only: never rounded.
    ("nvidia.com/gpu", "0.5", "not a whole number"),
    ("nvidia.com/gpu", 0.5, "not a whole number"),
    ("nvidia.com/gpu", "1500m", "not a whole number"),
    ("nvidia.com/gpu", "1.0000001", "not a whole number"),
    ("example.com/fpga", "0.1", "not a whole number"),
    ("pods", "2.5", "not a whole number"),
    ("memory", "29.8018GiB", "bad quantity"),
    ("memory", "29,8018Gi", "bad quantity"),
    ("memory", "Gi", "bad quantity"),
    ("memory", "1Gi1", "bad quantity"),
    ("memory", float("inf"), "bad quantity"),
    ("memory", float("nan"), "bad quantity"),
    ("cpu", True, "bad quantity"),
    ("cpu", None, "bad quantity"),
    ("cpu", [1], "bad quantity"),
    # Bounded whatever the input: a huge exponent is refused before it is computed.
    ("memory", "1e999999999", "out of range"),
    ("memory", "1e19", "out of range"),
    ("memory", "9Ei", "out of range"),
    ("cpu", 10**30, "out of range"),
]


@pytest.mark.parametrize(("resource", "value", "why"), BAD, ids=[f"{r}={v!r}" for r, v, _ in BAD])
def test_parse_quantity_errors_name_field_and_value(resource: str, value: object, why: str) -> None:
    field = "clusterQueues[0].flavors[1].nominal"
    with pytest.raises(QuantityError) as err:
        parse_quantity(value, resource=resource, field=field)
    assert err.value.field == field
    assert err.value.value is value  # `is`: nan is not equal to itself
    text = str(err.value)
    assert field in text
    assert repr(value) in text
    assert why in text


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("9" * 5000, id="5000-digits"),
        pytest.param("0." + "0" * 5000 + "1", id="5000-decimals"),
        pytest.param("1" * 65 + "m", id="65-digits-milli"),
    ],
)
def test_a_quantity_of_too_many_digits_is_out_of_range_not_a_crash(value: str) -> None:
    # Past 4,300 digits Python's int() raised a ValueError that named nothing.
    with pytest.raises(QuantityError, match=r"^f: quantity out of range '"):
        parse_quantity(value, resource="nvidia.com/gpu", field="f")


def test_parse_resources_names_the_resource_in_the_field() -> None:
    assert parse_resources({"cpu": "500m", "nvidia.com/gpu": 2}, field="req") == {
        "cpu": 500,
        "nvidia.com/gpu": 2,
    }
    assert parse_resources({"memory": "29.8018Gi"}, field="req") == {"memory": 31999439091}
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


@given(st.integers(min_value=0, max_value=2**63 - 1), st.sampled_from(["n", "u", "m", ""]))
def test_byte_resources_round_up_to_the_next_whole_byte(n: int, suffix: str) -> None:
    exact = n * {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000)}.get(
        suffix, Fraction(1)
    )
    got = parse_quantity(f"{n}{suffix}", resource="memory", field="f")
    assert exact <= got < exact + 1  # the smallest whole byte not below the request


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
