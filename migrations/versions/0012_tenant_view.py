"""What a tenant's ``why`` reads: every live workload, other namespaces' as opaque tokens.

Revision ID: 0012
Revises: 0011

Before this, a tenant's ``queuemgr why`` ran the scheduling cycle on the rows
row-level security let it see (migration 0010): its own namespaces only. The
position, ETA and "fits now" it printed left out every other tenant's
workload, so they were wrong whenever the cluster was shared. What must stay
true after it:

- Schema ``queuemgr_tenant_view`` holds views named like the tables they
  stand for (``workloads``, ``pod_sets``, ``placements``, ``local_queues``,
  ``local_queue_usage``), with the same columns. The views are the owner's,
  so they read past row-level security; a tenant may SELECT them and nothing
  else of the schema. ``store.tenant_view`` puts the schema first on the
  search path of a tenant's read, so the very queries the scheduler runs read
  the views.
- Rows of the namespaces granted to the login role come as they are. Of
  every other namespace a tenant sees only the live rows (queued, admitted,
  stopping) and, of them, what the cycle needs to decide: sizes, priority,
  submission time, state, placements, claims. The namespace, the workload's
  and its LocalQueue's names and the victims a claim names become tokens
  (``hidden-…``, ``w-…``, ``q-…``): a keyed MD5 of the real name, so the
  same name is the same token in every view and every read, and no one
  without the key (a table of this schema nobody is granted) can tell which
  name it is. Messages and reasons of other namespaces are blanked.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "queuemgr_tenant_view"
TENANT = "queuemgr_tenant"
VIEWS = ("workloads", "pod_sets", "placements", "local_queues", "local_queue_usage")
LIVE = "('Pending', 'Inadmissible', 'Admitted', 'Evicted')"

# The granted namespaces and the key, joined into every view.
_MINE = "(SELECT public.queuemgr_namespaces() AS ns)"
_KEY = f"(SELECT key FROM {SCHEMA}.secret LIMIT 1)"


def _hide(kind: str, ns: str, name: str) -> str:
    return f"{SCHEMA}.hide(k.key, '{kind}', {ns}, {name})"


def _ns(col: str) -> str:
    return f"CASE WHEN m.ns IS NOT NULL THEN {col} ELSE {_hide('hidden', col, chr(39) * 2)} END"


def _named(kind: str, ns: str, col: str) -> str:
    return f"CASE WHEN m.ns IS NOT NULL THEN {col} ELSE {_hide(kind, ns, col)} END"


# A claim's victims are "namespace/name" ids, each of its own namespace.
_VICTIM_NS = "split_part(v, '/', 1)"
_VICTIM_NAME = "substr(v, strpos(v, '/') + 1)"
_CLAIM = f"""
CASE WHEN w.claim IS NULL THEN NULL ELSE jsonb_set(w.claim, '{{victims}}', COALESCE((
  SELECT jsonb_agg(to_jsonb(
           CASE WHEN {_VICTIM_NS} IN (SELECT ns FROM {_MINE} g) THEN v
                ELSE {_hide("hidden", _VICTIM_NS, "''")} || '/' || {_hide("w", _VICTIM_NS, _VICTIM_NAME)}
           END) ORDER BY o)
  FROM jsonb_array_elements_text(w.claim -> 'victims') WITH ORDINALITY AS e(v, o)
), '[]'::jsonb)) END"""

_VIEW_SQL = {
    "workloads": f"""
SELECT w.id, {_ns("w.namespace")} AS namespace, {_named("w", "w.namespace", "w.name")} AS name,
       {_named("q", "w.namespace", "w.local_queue")} AS local_queue,
       w.priority, w.created_at, w.max_runtime, w.state,
       CASE WHEN m.ns IS NOT NULL THEN w.reason ELSE '' END AS reason,
       CASE WHEN m.ns IS NOT NULL THEN w.message ELSE '' END AS message,
       w.state_since, w.admitted_at, w.cluster_queue, w.flavor, w.borrowing, w.finished_at,
       w.pods_ready_at, {_CLAIM} AS claim, w.evictions, w.requeue_at, w.version
FROM public.workloads w CROSS JOIN {_KEY} k LEFT JOIN {_MINE} m ON m.ns = w.namespace
WHERE m.ns IS NOT NULL OR w.state IN {LIVE}""",
    "pod_sets": f"""
SELECT p.* FROM public.pod_sets p WHERE p.workload_id IN (SELECT id FROM {SCHEMA}.workloads)""",
    "placements": f"""
SELECT p.* FROM public.placements p
WHERE p.workload_id IN (SELECT id FROM {SCHEMA}.workloads)""",
    "local_queues": f"""
SELECT {_ns("l.namespace")} AS namespace, {_named("q", "l.namespace", "l.name")} AS name,
       l.cluster_queue
FROM public.local_queues l CROSS JOIN {_KEY} k LEFT JOIN {_MINE} m ON m.ns = l.namespace""",
    "local_queue_usage": f"""
SELECT {_ns("u.namespace")} AS namespace, {_named("q", "u.namespace", "u.name")} AS name,
       u.usage, u.at
FROM public.local_queue_usage u CROSS JOIN {_KEY} k LEFT JOIN {_MINE} m ON m.ns = u.namespace""",
}


def upgrade() -> None:
    op.execute(f"CREATE SCHEMA {SCHEMA}")
    op.execute(f"CREATE TABLE {SCHEMA}.secret (key text NOT NULL)")
    op.execute(f"INSERT INTO {SCHEMA}.secret VALUES (md5(gen_random_uuid()::text || random()))")
    op.execute(f"REVOKE ALL ON {SCHEMA}.secret FROM PUBLIC")
    op.execute(f"""
        CREATE FUNCTION {SCHEMA}.hide(key text, kind text, ns text, name text) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
          SELECT kind || '-' || left(md5(key || '/' || kind || '/' || ns || '/' || name), 12)
        $$""")
    # Defined in dependency order: pod_sets and placements read the workloads view.
    for view in VIEWS:
        op.execute(f"CREATE VIEW {SCHEMA}.{view} WITH (security_barrier) AS {_VIEW_SQL[view]}")
    op.execute(f"REVOKE ALL ON FUNCTION {SCHEMA}.hide(text, text, text, text) FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SCHEMA}.hide(text, text, text, text) TO {TENANT}")
    op.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {TENANT}")
    op.execute(f"GRANT SELECT ON {', '.join(f'{SCHEMA}.{v}' for v in VIEWS)} TO {TENANT}")


def downgrade() -> None:
    op.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
