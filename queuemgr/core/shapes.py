"""Gang shapes: what quota and placement see of a workload, named by an id.

Why it exists: equal gangs fit or fail together, so the cycle keeps its verdicts
per shape (``Workload.shape``, built from each pod set's ``PodSet.shape_part``), in
memos keyed by the shape's id. The table of ids is process-wide state with rules of
its own, beneath the model's frozen values, so it is kept apart from them.

What must stay true: equal shapes get one id and different shapes different ids;
an id depends on the shape's content alone, never on the order shapes were met, so
it means the same shape in every process (a simulator checkpoint holds ids); ids are
only ever dictionary keys, never an order, so they cannot sway a decision.
"""

from __future__ import annotations

import hashlib
from typing import NewType

ShapeId = NewType("ShapeId", int)

# Distinct gang shapes seen by this process, and the id of each. Shapes are few
# (a job template yields one), so the table stays small; the ids are only ever
# used as dictionary keys, never for ordering, so they cannot sway a decision.
# An id comes from the shape's content, not from the order shapes were met: state
# saved by one process (a simulator checkpoint) holds ids, in workloads and in
# per-shape memos, that must mean the same shapes in the process that loads it.
_SHAPE_IDS: dict[tuple[object, ...], ShapeId] = {}
_SHAPES: dict[ShapeId, tuple[object, ...]] = {}


def shape_id(shape: tuple[object, ...]) -> ShapeId:
    found = _SHAPE_IDS.get(shape)
    if found is None:
        # The shape's parts are ints, strings, None and tuples and frozen dataclasses of
        # them: their repr is the same in every process. A 64-bit clash between two
        # shapes is all but impossible, and would only be resolved in meeting order.
        text, salt = repr(shape), 0
        while True:
            digest = hashlib.blake2b(f"{salt}:{text}".encode(), digest_size=8).digest()
            found = ShapeId(int.from_bytes(digest, "big"))
            if _SHAPES.setdefault(found, shape) == shape:
                break
            salt += 1
        _SHAPE_IDS[shape] = found
    return found
