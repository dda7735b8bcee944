"""Resource names and Kubernetes quantities, held as exact integers.

Why it exists: quota arithmetic must never drift, so every amount is an
``int`` in the resource's canonical unit:

- ``cpu`` in millicores (``"500m"`` -> 500, ``"1.5"`` -> 1500);
- ``memory`` and ``ephemeral-storage`` in bytes (``"64Gi"`` -> 68719476736);
- anything else (``nvidia.com/gpu``, ``pods``, extended resources) as a count.

What must stay true: parsing is exact (``fractions.Fraction``, never float);
a value finer than the canonical unit is handled as Kubernetes does: ``cpu``
is rounded up to whole millicores (``"0.1m"`` -> 1) and ``memory`` and
``ephemeral-storage`` up to whole bytes (``"29.8018Gi"`` -> 31999439091),
while any other resource (``nvidia.com/gpu``, extended resources) must be a
whole number, as the API server requires; every error names the field and
the value it could not take.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import NewType

from queuemgr.core.values import shown

ResourceName = NewType("ResourceName", str)

GPU = ResourceName("nvidia.com/gpu")
CPU = ResourceName("cpu")
MEMORY = ResourceName("memory")

# A resource vector: resource -> exact amount. Absent means zero. Vectors are
# plain dicts for speed; code that holds one in a value object never mutates it.
Resources = Mapping[ResourceName, int]

_MILLI_RESOURCES = frozenset({"cpu"})
# Counted in bytes. Kubernetes reads these with Quantity.Value(), which rounds a
# fraction of a byte up, so "29.8018Gi" is a valid request of the next whole byte.
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

# Kubernetes keeps a quantity in an int64; nothing larger is a real request.
_MAX_QUANTITY = 2**63 - 1
_MAX_EXPONENT = 40
# Longer digit strings are no int64 at any scale, and past 4,300 digits Python
# refuses to convert them at all.
_MAX_DIGITS = 64
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)

_NAME = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class QuantityError(ValueError):
    """A quantity or resource name that cannot be taken; names field and value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        super().__init__(f"{field}: {why} {shown(value)}")
        self.field = field
        self.value = value


def parse_resource_name(name: object, *, field: str) -> ResourceName:
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 253:
        raise QuantityError(field, name, "bad resource name")
    return ResourceName(name)


def parse_quantity(value: object, *, resource: str, field: str) -> int:
    """Parse a Kubernetes quantity into the canonical integer unit of ``resource``."""
    if isinstance(value, bool):
        raise QuantityError(field, value, "bad quantity")
    if isinstance(value, int):
        exact = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):  # YAML's .inf / .nan
            raise QuantityError(field, value, "bad quantity")
        # YAML turns "1.5" into a float; its decimal text is what the user wrote.
        exact = Fraction(repr(value))
    elif isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if not match:
            raise QuantityError(field, value, "bad quantity")
        if len(match["num"]) > _MAX_DIGITS:
            raise QuantityError(field, value, "quantity out of range")
        exact = Fraction(match["num"])
        if match["exp"]:
            exponent = int(match["exp"][1:])
            if abs(exponent) > _MAX_EXPONENT:  # 10**1e9 would take minutes and gigabytes
                raise QuantityError(field, value, "quantity out of range")
            exact *= Fraction(10) ** exponent
        elif match["suffix"]:
            exact *= _SUFFIX[match["suffix"]]
    else:
        raise QuantityError(field, value, "bad quantity")
    if exact < 0:
        raise QuantityError(field, value, "negative quantity")
    if exact > _MAX_QUANTITY:
        raise QuantityError(field, value, "quantity out of range (Kubernetes allows 2^63-1)")
    if resource in _MILLI_RESOURCES:
        exact *= 1000
    if exact.denominator != 1:
        if resource in _MILLI_RESOURCES or resource in _BYTE_RESOURCES:
            # Kubernetes rounds a quantity finer than the smallest unit up (0.1m -> 1m),
            # so a request it accepts is charged at least what its scheduler counts.
            return math.ceil(exact)
        # The API server rejects fractional extended resources ("must be an integer"):
        # half a GPU is a mistake to report, not an amount to round.
        raise QuantityError(
            field,
            value,
            "quantity is not a whole number (only cpu, memory and ephemeral-storage may be "
            "fractional):",
        )
    return int(exact)


def parse_resources(raw: object, *, field: str) -> dict[ResourceName, int]:
    """Parse a ``{resource: quantity}`` mapping; every error names ``field.resource``."""
    if not isinstance(raw, Mapping):
        raise QuantityError(field, raw, "expected a mapping of resource to quantity, got")
    out: dict[ResourceName, int] = {}
    for key, value in raw.items():
        sub = f"{field}.{key}"
        name = parse_resource_name(key, field=sub)
        out[name] = parse_quantity(value, resource=name, field=sub)
    return out


def format_quantity(resource: str, amount: int) -> str:
    """Render an amount back in a human unit (``1500`` cpu -> ``"1500m"``)."""
    if resource in _MILLI_RESOURCES:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in ("memory", "ephemeral-storage") and amount:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = int(_SUFFIX[suffix])
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def add(a: Resources, b: Resources) -> dict[ResourceName, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return out


def sub(a: Resources, b: Resources) -> dict[ResourceName, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) - v
    return out


def scale(a: Resources, factor: int) -> dict[ResourceName, int]:
    return {r: v * factor for r, v in a.items()}


def total(vectors: Iterable[Resources]) -> dict[ResourceName, int]:
    out: dict[ResourceName, int] = {}
    for vec in vectors:
        for r, v in vec.items():
            out[r] = out.get(r, 0) + v
    return out


def fits(request: Resources, free: Resources) -> bool:
    """True when every requested amount is available in ``free``."""
    return all(v <= 0 or free.get(r, 0) >= v for r, v in request.items())


def how_many(per_item: Resources, free: Resources) -> int:
    """How many items of ``per_item`` fit in ``free``; a zero request fits without bound.

    Never negative: a node whose free capacity is below zero (overcommitted, or in a
    plan that holds a reserved gang) holds no item at all.
    """
    best: int | None = None
    for r, v in per_item.items():
        if v <= 0:
            continue
        n = free.get(r, 0) // v
        if best is None or n < best:
            if n <= 0:
                return 0
            best = n
    return 1 << 30 if best is None else best


# Simulated clocks start near 0, the service's is Unix time: past this, a time reads
# better as a date than as 1.7963e+09 seconds.
_EPOCH_LIKE = 1e8


def format_moment(t: float) -> str:
    """A point in time for a message: ``t=90`` on a simulated clock, else a UTC date."""
    if t < _EPOCH_LIKE:
        return f"t={t:g}"
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
