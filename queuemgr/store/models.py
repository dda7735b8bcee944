"""The Postgres schema as SQLAlchemy 2 typed models: the system of record.

Why it exists: every queue, quota, workload, decision and quota change lives in
these tables; Alembic's migrations (``migrations/``) create them, and a test
checks that ``upgrade head`` yields exactly this metadata.

What must stay true:

- resource vectors are JSONB objects of JSON *integers* in the core's canonical
  units (millicores, bytes, counts). JSONB numbers are arbitrary-precision
  numerics, so 2 TiB of memory survives exactly; floats are never written;
- a ClusterQueue's ``weight`` is an exact fraction kept as text (``"1/3"``);
- ``workloads.version`` grows by one on every change of a workload row, and
  every state change is a conditional UPDATE on the expected state, so two
  writers can never both admit (or finish, or evict) one workload;
- ``audit_log`` is append-only (a trigger created by the migration refuses
  UPDATE, DELETE and TRUNCATE);
- any change here comes with a new migration; see docs/architecture.md
  ("Store") for why each index exists.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from queuemgr.core.lifecycle import WorkloadState

# Stable constraint names, so that migrations can name what they drop.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Json = dict[str, Any]
Vector = dict[str, int]

# Queued means "waiting for admission": the core re-judges Inadmissible
# workloads every cycle, since a config change can make them fit.
_QUEUED_SQL = "state IN ('Pending', 'Inadmissible')"

workload_state = Enum(
    WorkloadState,
    name="workload_state",
    values_callable=lambda states: [s.value for s in states],
)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        Json: JSONB,
        Vector: JSONB,
        datetime: DateTime(timezone=True),
    }


class Flavor(Base):
    __tablename__ = "flavors"
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    node_labels: Mapped[Json] = mapped_column(server_default=text("'{}'::jsonb"))
    taints: Mapped[list[Json]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # Added to the pods admitted on the flavor (migration 0019); [] tolerates nothing.
    tolerations: Mapped[list[Json]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # The nodes an autoscaler may add (migration 0022): {max_nodes, node: {allocatable,
    # labels}}; NULL: none.
    autoscale: Mapped[Json | None] = mapped_column(JSONB(none_as_null=True), nullable=True)


class Node(Base):
    """A capacity snapshot of one node; its flavor follows from its labels (the core's rule)."""

    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    labels: Mapped[Json] = mapped_column(server_default=text("'{}'::jsonb"))
    allocatable: Mapped[Vector]
    taints: Mapped[list[Json]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    schedulable: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    observed_at: Mapped[datetime] = mapped_column(server_default=func.now())


class CohortRow(Base):
    __tablename__ = "cohorts"
    __table_args__ = (CheckConstraint("parent <> name", name="ck_cohorts_not_own_parent"),)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    fair_sharing: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    ordering: Mapped[str | None] = mapped_column(Text)  # NULL: the scheduler's ordering
    # NULL: a root. Longer cycles are refused by store.config_objects before a write.
    parent: Mapped[str | None] = mapped_column(
        Text, ForeignKey("cohorts.name", ondelete="RESTRICT"), index=True
    )
    weight: Mapped[str] = mapped_column(Text, server_default=text("'1'"))


class FlavorQuotaColumns:
    """One flavor's quota of a ClusterQueue or a cohort: the same columns in both tables.
    ``position`` is the flavor preference order."""

    flavor: Mapped[str] = mapped_column(
        Text, ForeignKey("flavors.name", ondelete="RESTRICT"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer)
    nominal: Mapped[Vector]
    borrowing_limit: Mapped[Vector] = mapped_column(server_default=text("'{}'::jsonb"))
    lending_limit: Mapped[Vector] = mapped_column(server_default=text("'{}'::jsonb"))


class CohortQuota(FlavorQuotaColumns, Base):
    """One flavor's quota a cohort holds itself, with its limits toward its parent."""

    __tablename__ = "cohort_quotas"
    __table_args__ = (UniqueConstraint("cohort", "position"),)
    cohort: Mapped[str] = mapped_column(
        Text, ForeignKey("cohorts.name", ondelete="CASCADE"), primary_key=True
    )


class ClusterQueueRow(Base):
    __tablename__ = "cluster_queues"
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    cohort: Mapped[str | None] = mapped_column(
        Text, ForeignKey("cohorts.name", ondelete="RESTRICT"), index=True
    )
    weight: Mapped[str] = mapped_column(Text, server_default=text("'1'"))
    queueing_strategy: Mapped[str] = mapped_column(Text, server_default=text("'BestEffortFIFO'"))
    namespaces: Mapped[list[str] | None] = mapped_column(JSONB)  # NULL: any namespace
    within_cluster_queue: Mapped[str] = mapped_column(Text, server_default=text("'Never'"))
    reclaim_within_cohort: Mapped[str] = mapped_column(Text, server_default=text("'Never'"))
    # Seconds a run of this queue is safe from reclaim and fair-sharing preemption.
    preemption_min_runtime: Mapped[float] = mapped_column(Double, server_default=text("0"))
    # Seconds: only workloads declaring a max_runtime of at most this borrow; NULL: any.
    borrowing_max_runtime: Mapped[float | None] = mapped_column(Double)
    # In its dominant share, a resource counted in another's units (core.weights):
    # [{"resource", "numerator", "denominator", "counts_as"}], integers exact; []: none.
    resource_weights: Mapped[list[Json]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # The admission checks its workloads wait for before their jobs start (names of
    # the controller's checks, in order); []: none, started at admission.
    admission_checks: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    stopped: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    ordering: Mapped[str | None] = mapped_column(Text)  # NULL: the cohort's, else global


class ClusterQueueQuota(FlavorQuotaColumns, Base):
    """One flavor's budget in a ClusterQueue; ``position`` is the flavor preference order."""

    __tablename__ = "cluster_queue_quotas"
    __table_args__ = (UniqueConstraint("cluster_queue", "position"),)
    cluster_queue: Mapped[str] = mapped_column(
        Text, ForeignKey("cluster_queues.name", ondelete="CASCADE"), primary_key=True
    )


class LocalQueueRow(Base):
    # No foreign key to cluster_queues: a LocalQueue pointing nowhere is a state
    # the core reports (its workloads are unroutable), not a corrupt row.
    __tablename__ = "local_queues"
    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    cluster_queue: Mapped[str] = mapped_column(Text, index=True)


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (
        UniqueConstraint("namespace", "name"),
        Index(
            "ix_workloads_queued",
            "namespace",
            "local_queue",
            text("priority DESC"),
            "created_at",
            postgresql_where=text(_QUEUED_SQL),
        ),
        Index(
            "ix_workloads_admitted",
            "cluster_queue",
            postgresql_where=text("state = 'Admitted'"),
        ),
        # Victims evicted but not yet requeued: every cycle reads them (Snapshot.stopping).
        Index("ix_workloads_evicted", "id", postgresql_where=text("state = 'Evicted'")),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    namespace: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    # No foreign key: a workload may name a LocalQueue that does not exist (yet).
    local_queue: Mapped[str] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_at: Mapped[datetime]
    max_runtime: Mapped[float | None] = mapped_column(Double)  # seconds
    state: Mapped[WorkloadState] = mapped_column(workload_state, server_default=text("'Pending'"))
    reason: Mapped[str] = mapped_column(Text, server_default=text("'Created'"))
    message: Mapped[str] = mapped_column(Text, server_default=text("''"))
    state_since: Mapped[datetime] = mapped_column(server_default=func.now())
    # The admission, set while Admitted (kept after Finished as history).
    admitted_at: Mapped[datetime | None]
    cluster_queue: Mapped[str | None] = mapped_column(Text)
    flavor: Mapped[str | None] = mapped_column(Text)
    borrowing: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    finished_at: Mapped[datetime | None]
    # When the current admission's gang first had every pod ready (readiness
    # check); older than admitted_at means it was an earlier admission's.
    pods_ready_at: Mapped[datetime | None]
    # Stable preemption (core.claims): the room this pending preemptor was promised,
    # set with its victims' eviction and cleared when it is admitted or the claim ends.
    claim: Mapped[Json | None]
    # Times it was preempted, and (while queued again) when its requeue backoff ends:
    # it is no cycle's pending workload before then.
    evictions: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    requeue_at: Mapped[datetime | None]
    # Its last eviction, NULL if none: it waits since then (core Workload.queued_at).
    queued_at: Mapped[datetime | None]
    version: Mapped[int] = mapped_column(Integer, server_default=text("1"))


class PodSetRow(Base):
    __tablename__ = "pod_sets"
    __table_args__ = (UniqueConstraint("workload_id", "name"),)
    workload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    count: Mapped[int] = mapped_column(Integer)
    requests: Mapped[Vector]
    node_selector: Mapped[Json] = mapped_column(server_default=text("'{}'::jsonb"))
    tolerations: Mapped[list[Json]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # Topology-aware placement and partial admission (docs/scheduling.md).
    topology_required: Mapped[str | None] = mapped_column(Text)
    topology_preferred: Mapped[str | None] = mapped_column(Text)
    min_count: Mapped[int | None] = mapped_column(Integer)
    # Resources charged against quota but not placed on nodes (core PodSet.quota_only).
    quota_only: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))


class PlacementRow(Base):
    __tablename__ = "placements"
    workload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    pod_set: Mapped[str] = mapped_column(Text, primary_key=True)
    # No foreign key to nodes: a node may vanish while its pods are accounted.
    node: Mapped[str] = mapped_column(Text, primary_key=True, index=True)
    count: Mapped[int] = mapped_column(Integer)


class PendingStatusRow(Base):
    """Where a pending workload stands, as the leader's last cycle saw it (``why``, lists).

    It lives beside the workload row, not in it: writing it leaves
    ``workloads.version`` alone, and the leader writes only the rows that changed
    (store/status_board.py). It holds a rank, not positions, as positions move for
    everyone behind an admission: readers count them, by the two indexes.
    """

    __tablename__ = "pending_statuses"
    __table_args__ = (
        Index("ix_pending_statuses_rank", "cluster_queue", "rank"),
        Index("ix_pending_statuses_local_rank", "namespace", "local_queue", "rank"),
        # A tenant reads a class's message only where a workload of its own waits in it.
        Index(
            "ix_pending_statuses_class",
            "cluster_queue",
            "eta_class",
            "namespace",
            postgresql_where=text("eta_class IS NOT NULL"),
        ),
    )
    workload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    cluster_queue: Mapped[str | None] = mapped_column(Text)  # NULL: its LocalQueue routes nowhere
    namespace: Mapped[str] = mapped_column(Text)
    local_queue: Mapped[str] = mapped_column(Text)
    rank: Mapped[bytes] = mapped_column(LargeBinary)  # status_board.rank_key: sorts its queue
    # Seconds since the epoch; 0 stands for "now" (it may start as soon as those
    # ahead of it allow), NULL for unknown or never. Ignored when ``eta_class`` is
    # set: the row has its class's ETA, reason and message (``pending_classes``).
    eta: Mapped[float | None] = mapped_column(Double)
    eta_class: Mapped[str | None] = mapped_column(Text)


class PendingClassRow(Base):
    """The ETA, reason and message of one class (shape, may borrow) of a ClusterQueue's
    pending workloads.

    The rows of a class share them (``pending_statuses.eta_class``), so when runs end
    and the ETA moves, or the room free changes the message or the reason, the leader
    writes them here once (store/status_board.py), not in every workload of the class.
    """

    __tablename__ = "pending_classes"
    cluster_queue: Mapped[str] = mapped_column(Text, primary_key=True)
    klass: Mapped[str] = mapped_column("class", Text, primary_key=True)
    # Seconds since the epoch; 0 stands for "now" (it may start as soon as those
    # ahead of it allow), NULL for unknown or never.
    eta: Mapped[float | None] = mapped_column(Double)
    # The class's verdict in words; its workloads' own rows hold an empty message.
    message: Mapped[str] = mapped_column(Text, server_default=text("''"))
    # The class's reason code; its workloads' own rows keep whatever reason they last
    # had. NULL in a row written before migration 0025: readers take the workload's own.
    reason: Mapped[str | None] = mapped_column(Text)


class StatusBoardRow(Base):
    """When the leader last brought ``pending_statuses`` up to date: one row."""

    __tablename__ = "status_board"
    name: Mapped[str] = mapped_column(Text, primary_key=True)  # "leader"
    at: Mapped[datetime]


class AdmissionCheckStateRow(Base):
    """One admission check's verdict on one workload's reservation (store/admission_checks.py).

    ``admitted_at`` names the admission the state belongs to: a state of an
    earlier admission is no verdict on the current one. ``attempt`` counts the
    requests the check made for the workload (a ProvisioningRequest re-made after
    its booking expired is the next attempt), ``failures`` how often the check
    failed it (its requeue backoff grows with them).
    """

    __tablename__ = "admission_check_states"
    __table_args__ = (
        CheckConstraint(
            "state IN ('Pending', 'Ready', 'Retry', 'Rejected')",
            name="ck_admission_check_states_state",
        ),
    )
    workload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    check_name: Mapped[str] = mapped_column(Text, primary_key=True)
    admitted_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(Text, server_default=text("'Pending'"))
    message: Mapped[str] = mapped_column(Text, server_default=text("''"))
    attempt: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    failures: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())


class AuditLogRow(Base):
    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_object", "object_kind", "object_name", "at"),)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    at: Mapped[datetime] = mapped_column(server_default=func.now())
    db_role: Mapped[str] = mapped_column(Text, server_default=text("CURRENT_USER"))
    actor: Mapped[str] = mapped_column(Text)  # OS or Kubernetes user
    action: Mapped[str] = mapped_column(Text)  # create, update, delete
    object_kind: Mapped[str] = mapped_column(Text)
    object_name: Mapped[str] = mapped_column(Text)
    before: Mapped[Json | None]
    after: Mapped[Json | None]


class UsageSample(Base):
    __tablename__ = "usage_samples"
    __table_args__ = (Index("ix_usage_samples_cq_at", "cluster_queue", "at"),)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    at: Mapped[datetime]
    cluster_queue: Mapped[str] = mapped_column(Text)
    local_queue: Mapped[str | None] = mapped_column(Text)  # "namespace/name"
    resource: Mapped[str] = mapped_column(Text)
    value: Mapped[Decimal] = mapped_column(Numeric)
    # Beyond the ClusterQueue's nominal quota, summed over flavors; NULL on LocalQueue rows.
    borrowed: Mapped[Decimal | None] = mapped_column(Numeric)
    # Seconds this sample stands for (since the leader's previous one): value x period
    # integrates to GPU-seconds without guessing the sampling interval.
    period: Mapped[float] = mapped_column(Double, server_default=text("0"))


class LocalQueueUsage(Base):
    """A LocalQueue's decayed usage, as the leader's tracker last saw it.

    Kept beside the raw samples because rebuilding a seven-day half-life from
    five-second samples would read millions of rows at every failover; this
    is one row per LocalQueue, like Kueue's consumed resources in its status.
    """

    __tablename__ = "local_queue_usage"
    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    usage: Mapped[float] = mapped_column(Double)  # weighted by usage_resource_weights
    at: Mapped[datetime]


class SchedulerSettings(Base):
    """What the current leader runs with, for readers that must decide like it (``why``)."""

    __tablename__ = "scheduler_settings"
    name: Mapped[str] = mapped_column(Text, primary_key=True)  # "leader": one row
    replica: Mapped[str] = mapped_column(Text)
    policy: Mapped[Json]  # the scheduler: knobs (docs/operations.md)
    elected_at: Mapped[datetime]


class TenantGrantRow(Base):
    """A namespace a tenant role may read and submit to (migration 0010's row security).

    The only source of a tenant's reach: row-level security and the submit and
    cancel functions read it. Admins change it through ``queuemgr grant``.
    """

    __tablename__ = "tenant_grants"
    role_name: Mapped[str] = mapped_column(Text, primary_key=True)
    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    granted_by: Mapped[str] = mapped_column(Text)
    granted_at: Mapped[datetime] = mapped_column(server_default=func.now())


class SchedulerLeaseRow(Base):
    """The leader's lease (migration 0011): one row, writable by the scheduler role only.

    ``epoch`` is the fencing token: it grows by one at every change of holder, and
    it is a key column (unique) on purpose, so that a takeover's UPDATE waits for
    every in-flight decision transaction holding the row ``FOR KEY SHARE``, while
    the holder's heartbeat, which leaves the key alone, waits for none of them
    (store/leadership.py).
    """

    __tablename__ = "scheduler_lease"
    name: Mapped[str] = mapped_column(Text, primary_key=True)  # "leader": one row
    epoch: Mapped[int] = mapped_column(BigInteger, unique=True)
    holder_pid: Mapped[int | None] = mapped_column(Integer)
    holder_started: Mapped[datetime | None]
    replica: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime]
