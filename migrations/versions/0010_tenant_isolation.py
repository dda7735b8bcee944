"""Tenant isolation inside Postgres: namespace grants, row-level security, narrow writes.

Revision ID: 0010
Revises: 0009

Before this, a member of ``queuemgr_tenant`` could read every namespace and
UPDATE or DELETE any workload or placement row by plain SQL, and so admit
itself. What must stay true after it:

- ``tenant_grants`` (role, namespace) is the only source of a tenant's reach.
  Admins manage it (``queuemgr grant``, audited). A tenant is the Postgres
  login role it connects as (``session_user``) and reaches the namespaces
  granted to any role it is a member of.
- Tenants read only their namespaces' workloads, pod sets, placements, local
  queues and local-queue usage (row-level security). Cluster-scoped objects
  (flavors, nodes, cohorts, ClusterQueues and their quotas, usage samples)
  stay readable, as Kueue's ClusterQueues are.
- Tenants write nothing directly. They submit and cancel through
  ``queuemgr_submit`` and ``queuemgr_cancel``: SECURITY DEFINER functions
  that check the namespace grant, the LocalQueue and the shape of what is
  submitted, and that every submitter (admins and the scheduler too) uses, so
  there is one implementation of a submission.
- Members of ``queuemgr_admin`` and ``queuemgr_scheduler`` (new here: the role
  ``queuemgr serve`` runs as) see every row. A superuser and the tables'
  owner bypass row-level security, as Postgres always lets them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN = "queuemgr_admin"
TENANT = "queuemgr_tenant"
SCHEDULER = "queuemgr_scheduler"
STAFF = f"{ADMIN}, {SCHEDULER}"
TABLES = (
    "flavors",
    "nodes",
    "cohorts",
    "cluster_queues",
    "cluster_queue_quotas",
    "local_queues",
    "workloads",
    "pod_sets",
    "placements",
    "audit_log",
    "usage_samples",
    "local_queue_usage",
    "scheduler_settings",
    "tenant_grants",
)
# What a tenant sees of each namespaced table: rows of a granted namespace.
_MINE = "namespace IN (SELECT public.queuemgr_namespaces())"
_OF_MY_WORKLOAD = "workload_id IN (SELECT id FROM public.workloads)"  # itself filtered
TENANT_ROWS = {
    "workloads": _MINE,
    "local_queues": _MINE,
    "local_queue_usage": _MINE,
    "pod_sets": _OF_MY_WORKLOAD,
    "placements": _OF_MY_WORKLOAD,
    "tenant_grants": "role_name IN (SELECT public.queuemgr_roles())",
}
MAX_POD_SETS = 8  # Kueue's limit on a workload's pod sets
MAX_NAME = 253

_FUNCTIONS = rf"""
CREATE FUNCTION queuemgr_roles() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  -- The roles the login role is a member of (itself included); by oid, so a grant
  -- naming a dropped role matches nothing rather than failing every query.
  SELECT r.rolname::text FROM pg_roles r WHERE pg_has_role(session_user, r.oid, 'MEMBER')
$$;

CREATE FUNCTION queuemgr_namespaces() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT DISTINCT g.namespace FROM public.tenant_grants g
  WHERE g.role_name IN (SELECT public.queuemgr_roles())
$$;

CREATE FUNCTION queuemgr_staff() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT pg_has_role(session_user, '{ADMIN}', 'MEMBER')
      OR pg_has_role(session_user, '{SCHEDULER}', 'MEMBER')
$$;

CREATE FUNCTION queuemgr_submit(
  ns text, wl text, queue text, prio integer, created timestamptz,
  max_runtime double precision, pod_sets jsonb
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  wid bigint;
  bad text;
BEGIN
  IF NOT public.queuemgr_staff() THEN
    IF ns IS NULL OR ns NOT IN (SELECT public.queuemgr_namespaces()) THEN
      RAISE EXCEPTION 'namespace % is not granted to role %', ns, session_user
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM public.local_queues q WHERE q.namespace = ns AND q.name = queue)
    THEN
      RAISE EXCEPTION 'no LocalQueue % in namespace %', queue, ns
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A tenant cannot date its workload back to jump a FIFO queue.
    created := now();
  END IF;
  IF wl IS NULL OR length(wl) > {MAX_NAME}
     OR wl !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' THEN
    RAISE EXCEPTION 'workload name % is not a DNS-1123 subdomain', left(wl, 80)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_runtime IS NOT NULL AND NOT (max_runtime > 0 AND max_runtime < 'infinity') THEN
    RAISE EXCEPTION 'max_runtime % is not a positive number of seconds', max_runtime
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF jsonb_typeof(pod_sets) IS DISTINCT FROM 'array'
     OR jsonb_array_length(pod_sets) NOT BETWEEN 1 AND {MAX_POD_SETS} THEN
    RAISE EXCEPTION 'pod_sets must be an array of 1 to {MAX_POD_SETS} pod sets'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT p->>'name' INTO bad FROM jsonb_array_elements(pod_sets) p
  WHERE jsonb_typeof(p->'count') IS DISTINCT FROM 'number'
     OR (p->>'count')::numeric NOT BETWEEN 1 AND 2147483647
     OR (p->>'count')::numeric <> trunc((p->>'count')::numeric)
     OR (jsonb_typeof(p->'min_count') = 'number'
         AND (p->>'min_count')::numeric NOT BETWEEN 1 AND (p->>'count')::numeric)
     OR jsonb_typeof(p->'requests') IS DISTINCT FROM 'object'
     OR EXISTS (
          SELECT 1 FROM jsonb_each(p->'requests') r
          WHERE jsonb_typeof(r.value) <> 'number'
             OR r.value::text::numeric NOT BETWEEN 0 AND 9223372036854775807
             OR r.value::text::numeric <> trunc(r.value::text::numeric))
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'pod set %: count must be 1 to 2147483647 (min_count at most count) and '
      'requests non-negative int64 integers', left(bad, 80)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO public.workloads (namespace, name, local_queue, priority, created_at, max_runtime)
  VALUES (ns, wl, queue, coalesce(prio, 0), created, max_runtime)
  RETURNING id INTO wid;
  INSERT INTO public.pod_sets (workload_id, position, name, count, requests, node_selector,
                               tolerations, topology_required, topology_preferred, min_count)
  SELECT wid, (t.ord - 1)::integer, t.p->>'name', (t.p->>'count')::integer, t.p->'requests',
         coalesce(t.p->'node_selector', '{{}}'::jsonb), coalesce(t.p->'tolerations', '[]'::jsonb),
         t.p->>'topology_required', t.p->>'topology_preferred', (t.p->>'min_count')::integer
  FROM jsonb_array_elements(pod_sets) WITH ORDINALITY AS t(p, ord);
  PERFORM pg_notify('queuemgr', 'submitted');
  RETURN wid;
END
$$;

CREATE FUNCTION queuemgr_cancel(ns text, wl text, why text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  wid bigint;
BEGIN
  IF NOT public.queuemgr_staff()
     AND (ns IS NULL OR ns NOT IN (SELECT public.queuemgr_namespaces())) THEN
    RAISE EXCEPTION 'namespace % is not granted to role %', ns, session_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  UPDATE public.workloads
  SET state = 'Finished', reason = 'Cancelled', message = left(coalesce(why, ''), 1024),
      state_since = now(), finished_at = now(), claim = NULL, version = version + 1
  WHERE namespace = ns AND name = wl AND state <> 'Finished'
  RETURNING id INTO wid;
  IF wid IS NULL THEN
    RETURN false;
  END IF;
  DELETE FROM public.placements WHERE workload_id = wid;
  PERFORM pg_notify('queuemgr', 'finished');
  RETURN true;
END
$$;
"""
_FUNCTION_NAMES = (
    "queuemgr_submit(text, text, text, integer, timestamptz, double precision, jsonb)",
    "queuemgr_cancel(text, text, text)",
    "queuemgr_staff()",
    "queuemgr_namespaces()",
    "queuemgr_roles()",
)


def _create_role(name: str) -> None:
    op.execute(f"""
        DO $$ BEGIN
          CREATE ROLE {name} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$""")


def upgrade() -> None:
    op.create_table(
        "tenant_grants",
        sa.Column("role_name", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("granted_by", sa.Text(), nullable=False),
        sa.Column(
            "granted_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("role_name", "namespace"),
    )
    _create_role(SCHEDULER)
    op.execute(f"GRANT USAGE ON SCHEMA public TO {SCHEDULER}")
    every = ", ".join(TABLES)
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {every} TO {ADMIN}, {SCHEDULER}")
    op.execute(f"REVOKE INSERT, UPDATE, DELETE ON {every} FROM {TENANT}")
    op.execute(f"GRANT SELECT ON tenant_grants TO {TENANT}")
    op.execute(_FUNCTIONS)
    for fn in _FUNCTION_NAMES:
        op.execute(f"REVOKE ALL ON FUNCTION {fn} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {ADMIN}, {SCHEDULER}, {TENANT}")
    for table, rows in TENANT_ROWS.items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY staff ON {table} TO {STAFF} USING (true) WITH CHECK (true)")
        op.execute(f"CREATE POLICY tenant_reads ON {table} FOR SELECT TO {TENANT} USING ({rows})")


def downgrade() -> None:
    for table in TENANT_ROWS:
        op.execute(f"DROP POLICY IF EXISTS tenant_reads ON {table}")
        op.execute(f"DROP POLICY IF EXISTS staff ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    for fn in _FUNCTION_NAMES:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    every = ", ".join(t for t in TABLES if t != "tenant_grants")
    op.execute(f"REVOKE ALL ON {every} FROM {SCHEDULER}")
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {SCHEDULER}")
    op.execute("GRANT INSERT ON workloads, pod_sets TO queuemgr_tenant")
    op.execute("GRANT UPDATE ON workloads TO queuemgr_tenant")
    op.execute("GRANT DELETE ON placements TO queuemgr_tenant")
    op.drop_table("tenant_grants")
