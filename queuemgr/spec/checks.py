"""Strict readers for hand-written input: every error names the exact YAML path.

Why it exists: a scenario is typed by people, and a typo that is silently
ignored (``borowing_limit``) produces a simulation of something else. Each
reader here checks one value and, on failure, raises an :class:`InputError`
whose message starts with the path to the value, e.g.
``cluster_queues[2].resources[0].nominal.cpu: bad quantity '12x'``.

What must stay true: no reader accepts a field it was not told about, no
reader coerces a wrong type (``True`` is not a number, ``"3"`` is not a
count), and every message starts with ``path: ``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from fractions import Fraction
from pathlib import Path
from typing import TypeVar

import yaml

from queuemgr.core.names import NameRule, name_problem
from queuemgr.core.values import shown

E = TypeVar("E", bound=Enum)


class InputError(ValueError):
    """Bad user input (scenario, trace or options): the CLI exits 2 with the message."""


class ScenarioError(InputError):
    """A scenario that cannot be simulated; the message starts with the YAML path."""


# What a hand-written file may be: far above any real cluster's queues, far below
# what could exhaust memory. Aliases are counted as what they expand to, so a
# 1 kB "billion laughs" file is as large as the data it stands for.
MAX_FILE_BYTES = 16 << 20
MAX_NODES = 1_000_000


def read_yaml(path: Path, what: str, error: type[InputError] = InputError) -> object:
    """The parsed YAML of ``path``; an unreadable, oversized or malformed file raises ``error``.

    ``what`` names the file's role in the message ("scenario", "cluster file"...).
    """
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # /dev/zero or a huge file: never all of it
        if len(data) > MAX_FILE_BYTES:
            raise error(f"{what} is larger than {MAX_FILE_BYTES} bytes: {path}")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what}: {exc}") from None
    try:
        return load_bounded(text)
    except _TooLarge as exc:
        raise error(f"{what}: {exc}") from None
    except yaml.YAMLError as exc:
        raise error(f"{what} is not valid YAML: {exc}") from None


class _TooLarge(Exception):
    pass


# libyaml's parser when PyYAML has it: the pure-Python one spends over a second of
# CPU on a 5 MB scalar, and a file may be 16 MB. Both build the same safe types.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# No field takes an integer this long (an int64 has 19 digits); Python refuses to
# convert one of over 4,300 digits with a ValueError that names nothing.
MAX_INT_CHARS = 100


class _Loader(_Base):  # type: ignore[valid-type,misc]
    pass


def _int_or_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> object:
    """A YAML integer; one too long to be any field's stays text, for that field to refuse."""
    if len(node.value) > MAX_INT_CHARS:
        return node.value
    return loader.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _int_or_text)


def load_bounded(text: str) -> object:
    """``yaml.safe_load``, refusing documents that expand beyond ``MAX_NODES`` nodes."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_expansion(root)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes ``root`` stands for, each alias as its whole target, without
    expanding anything: every distinct node is sized once, from its children's sizes."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk: the nesting of a hostile file must not hit the
    # recursion limit here.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and sizes[key] >= 0:
            continue
        children = _children(node)
        if not children_done:
            if sizes.get(key) == -1:
                raise _TooLarge("an alias refers to a node that contains it (a recursive alias)")
            sizes[key] = -1  # in progress
            stack.append((node, True))
            stack.extend((c, False) for c in children if sizes.get(id(c), -2) < 0)
            continue
        total = 1
        for c in children:
            size = sizes.get(id(c), -1)
            if size < 0:
                raise _TooLarge("an alias refers to a node that contains it (a recursive alias)")
            total += size
            if total > MAX_NODES:
                raise _TooLarge(
                    f"the document expands to more than {MAX_NODES} values (through aliases)"
                )
        sizes[key] = total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def at(path: str, key: str | int) -> str:
    """The path of a child value: ``at("nodes", 0)`` -> ``nodes[0]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def mapping(
    raw: object, path: str, *, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()
) -> dict[str, object]:
    """A mapping with exactly the allowed keys (all of ``required``, some of ``optional``)."""
    where = path or "scenario"
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {_kind(raw)}")
    allowed = set(required) | set(optional)
    for key in raw:
        if not isinstance(key, str):
            raise ScenarioError(f"{where}: field names must be strings, got {shown(key)}")
        if key not in allowed:
            expected = ", ".join(sorted(allowed))
            raise ScenarioError(f"{at(path, key)}: unknown field (expected one of: {expected})")
    for key in required:
        if key not in raw:
            raise ScenarioError(f"{at(path, key)}: required field is missing")
    return dict(raw)


def sequence(raw: object, path: str) -> list[object]:
    if not isinstance(raw, list):
        raise ScenarioError(f"{path}: expected a list, got {_kind(raw)}")
    return raw


def string(raw: object, path: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise ScenarioError(f"{path}: expected a non-empty string, got {_kind(raw)}")
    return raw


def name(raw: object, path: str, rule: NameRule = NameRule.LABEL) -> str:
    """An object name by the Kubernetes ``rule`` (see :mod:`queuemgr.core.names`)."""
    text = string(raw, path)
    why = name_problem(text, rule)
    if why is not None:
        raise ScenarioError(f"{path}: bad name {shown(text)}: {why}")
    return text


def number(raw: object, path: str, *, positive: bool = False) -> float:
    """A finite, non-negative number (strictly positive with ``positive``)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ScenarioError(f"{path}: expected a number, got {_kind(raw)}")
    value = float(raw)
    if not math.isfinite(value):
        raise ScenarioError(f"{path}: expected a finite number, got {shown(raw)}")
    if value < 0 or (positive and value == 0):
        sign = "positive" if positive else "non-negative"
        raise ScenarioError(f"{path}: expected a {sign} number, got {shown(raw)}")
    return value


# Beyond int64 no column or Kubernetes field holds it.
INT64 = (-(2**63), 2**63 - 1)


def integer(
    raw: object, path: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ScenarioError(f"{path}: expected an integer, got {_kind(raw)}")
    if minimum is not None and raw < minimum:
        raise ScenarioError(f"{path}: expected an integer >= {minimum}, got {shown(raw)}")
    top = INT64[1] if maximum is None else maximum
    if raw > top or raw < INT64[0]:
        raise ScenarioError(f"{path}: expected an integer <= {top}, got {shown(raw)}")
    return raw


def fraction(raw: object, path: str) -> Fraction:
    """A non-negative exact number: ``0.5`` (as written), ``1``, or ``"1/3"``."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ScenarioError(f"{path}: expected a number, got {_kind(raw)}")
    try:
        value = Fraction(str(raw))
    except (ValueError, ZeroDivisionError):
        raise ScenarioError(f"{path}: expected a number, got {shown(raw)}") from None
    if value < 0:
        raise ScenarioError(f"{path}: expected a non-negative number, got {shown(raw)}")
    return value


def boolean(raw: object, path: str) -> bool:
    if not isinstance(raw, bool):
        raise ScenarioError(f"{path}: expected true or false, got {_kind(raw)}")
    return raw


def string_map(raw: object, path: str) -> dict[str, str]:
    """Labels or a node selector: string keys to string values (YAML scalars as written)."""
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{path}: expected a mapping, got {_kind(raw)}")
    out: dict[str, str] = {}
    for key, value in raw.items():
        sub = at(path, str(key))
        if not isinstance(key, str) or not key:
            raise ScenarioError(f"{sub}: label keys must be non-empty strings")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ScenarioError(f"{sub}: expected a string, got {_kind(value)}")
        out[key] = str(value)
    return out


def choice(enum: type[E], raw: object, path: str) -> E:
    """An enum member by its value, e.g. ``"BestEffortFIFO"``."""
    for member in enum:
        if member.value == raw:
            return member
    options = ", ".join(str(m.value) for m in enum)
    raise ScenarioError(f"{path}: expected one of {options}, got {shown(raw)}")


def unique(seen: dict[str, str], key: str, path: str, what: str) -> None:
    """Record ``key`` as defined at ``path``; a second definition is an error."""
    first = seen.get(key)
    if first is not None:
        raise ScenarioError(f"{path}: duplicate {what} {shown(key)} (first defined at {first})")
    seen[key] = path


def _kind(raw: object) -> str:
    if raw is None:
        return "nothing (null)"
    if isinstance(raw, bool):
        return f"a boolean ({shown(raw)})"
    if isinstance(raw, str):
        return f"a string ({shown(raw)})"
    if isinstance(raw, int | float):
        return f"a number ({shown(raw)})"
    if isinstance(raw, list):
        return "a list"
    if isinstance(raw, Mapping):
        return "a mapping"
    return type(raw).__name__
