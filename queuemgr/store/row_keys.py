"""How a statement over many workload rows names them: by row id, or by namespace and name.

Why it exists: the loop's writes (admissions, finishes) name thousands of rows
a cycle through an ``unnest`` of arrays. By row id each is a primary-key lookup;
by name the planner may hash every queued or admitted row instead, a cost that
grows with the backlog. The leader's mirror knows the row ids; other callers
know only names. Each statement is written once, as a template, and made in
both forms here.

What must stay true: both forms of a statement match the same rows (the ids are
those of the named rows, as the caller read them), and the ids are used only
when every row's is known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import TextClause, text

from queuemgr.core.model import WorkloadId
from queuemgr.store.arrays import literal

# A template's {key} goes into an unnest, {key_names} names its columns in the
# alias ``d``, and {match} joins ``d`` to ``workloads AS w``.
_BY_NAME = {
    "key": "CAST(:ns AS text[]), CAST(:names AS text[])",
    "key_names": "ns, name",
    "match": "w.namespace = d.ns AND w.name = d.name",
}
_BY_ID = {"key": "CAST(:ids AS bigint[])", "key_names": "id", "match": "w.id = d.id"}


def both_forms(template: str) -> tuple[TextClause, TextClause]:
    """The statement naming its rows by name, and by row id."""
    return text(template.format(**_BY_NAME)), text(template.format(**_BY_ID))


def row_keys(
    wids: Sequence[WorkloadId], ids: Mapping[WorkloadId, int] | None
) -> tuple[bool, dict[str, object]]:
    """Whether to use the row-id form, and the parameters that name ``wids`` in it."""
    if ids is not None and all(w in ids for w in wids):
        return True, {"ids": literal([ids[w] for w in wids])}
    names = [w.partition("/") for w in wids]
    return False, {
        "ns": literal([ns for ns, _, _ in names]),
        "names": literal([name for _, _, name in names]),
    }
