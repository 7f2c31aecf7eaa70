"""What a cluster wrote, checked without I/O: one run's event history, and every event row
against the lease its writer held when the row was written.

The three-node tests (tests/e2e/test_cluster.py) collect the inputs: events through the API,
and, through audit triggers installed on the throwaway database (`AUDIT_SQL`), every inserted
`events` row with the writing connection's `application_name` (one per node) and every change
of a `cluster_leases` row, each stamped with the database's `clock_timestamp()`.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

TERMINAL_EVENTS = ("run_completed", "run_failed", "run_cancelled", "run_timed_out")
TASK_OUTCOMES = ("task_completed", "task_failed", "task_timed_out")

# Test-only instruments for a throwaway database (never part of the schema): the trigger
# functions run inside the writer's transaction, so a rolled-back write leaves no audit row,
# and the lease row a fenced write holds FOR SHARE cannot change between the audit and commit.
AUDIT_SQL = """
CREATE TABLE audit_events (
    run_id TEXT NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL,
    writer TEXT NOT NULL, at_us BIGINT NOT NULL
);
CREATE TABLE audit_leases (
    partition INTEGER NOT NULL, node_id TEXT, epoch BIGINT NOT NULL,
    expires_at BIGINT NOT NULL, at_us BIGINT NOT NULL
);
CREATE FUNCTION audit_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_events VALUES (NEW.run_id, NEW.seq, NEW.type,
        current_setting('application_name'),
        (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    RETURN NULL;
END $$;
CREATE FUNCTION audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_leases VALUES (NEW.partition, NEW.node_id, NEW.epoch, NEW.expires_at,
        (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    RETURN NULL;
END $$;
CREATE TRIGGER audit_events AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION audit_event();
CREATE TRIGGER audit_leases AFTER INSERT OR UPDATE ON cluster_leases
    FOR EACH ROW EXECUTE FUNCTION audit_lease();
INSERT INTO audit_leases
    SELECT partition, node_id, epoch, expires_at, 0 FROM cluster_leases;
"""


def history_problems(run_id: str, events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why `events` (oldest first, as `GET …/events` lists them) is not one run's single,
    linear history in which every timer fired once and every attempt ended once; [] if it is.

    - seq runs 1, 2, 3 … without a gap or a repeat (no write lost, none applied twice);
    - one `run_started`, first; at most one terminal event, last;
    - a sleep ends (`sleep_finished`) once per `sleep_started`; a wait times out at most once
      per entry into it; a retry timer (`retry_scheduled`) dispatches its attempt once;
    - each attempt is dispatched once and has at most one outcome;
    - each `signalId` is received once.
    """
    out: list[str] = []

    def bad(text: str) -> None:
        out.append(f"{run_id}: {text}")

    def fired(armed: set[tuple[int, str]], e: Mapping[str, Any], step: tuple[int, str], timer: str) -> None:
        """A timer of `step` fired: it must have been armed, and fires once."""
        if step not in armed:
            bad(f"seq {e['seq']}: {timer} of {step} fired twice (or was never armed)")
        armed.discard(step)

    seqs = [int(e["seq"]) for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        bad(f"seq is not 1..{len(seqs)} in order: {seqs}")
    types = [e["type"] for e in events]
    if not types or types[0] != "run_started" or types.count("run_started") != 1:
        bad(f"not one run_started, first: {types[:3]}")
    terminal = [i for i, t in enumerate(types) if t in TERMINAL_EVENTS]
    if len(terminal) > 1 or (terminal and terminal[0] != len(types) - 1):
        bad(f"terminal events at {terminal} of {len(types)}")
    sleeping: set[tuple[int, str]] = set()
    waiting: set[tuple[int, str]] = set()
    retries: set[tuple[int, str, int]] = set()
    dispatched: set[tuple[int, str, int]] = set()
    ended: set[tuple[int, str, int]] = set()
    signal_ids: Counter[str] = Counter()
    for e in events:
        kind, data = e["type"], e.get("data") or {}
        step = (int(e["generation"]), str(e["step"]))
        attempt = (*step, int(e["attempt"] or 0))

        if kind == "sleep_started":
            if step in sleeping:
                bad(f"seq {e['seq']}: {step} slept again before waking")
            sleeping.add(step)
        elif kind == "sleep_finished":
            fired(sleeping, e, step, "the sleep's timer")
        elif kind == "step_started":
            if data.get("kind") == "wait":
                waiting.add(step)
        elif kind == "wait_timed_out":
            fired(waiting, e, step, "the wait's timeout")
        elif kind == "signal_consumed":
            waiting.discard(step)
        elif kind == "retry_scheduled":
            retries.add((*step, int(data["nextAttempt"])))
        elif kind == "task_dispatched":
            if attempt in dispatched:
                bad(f"seq {e['seq']}: attempt {attempt} dispatched twice (a retry timer fired twice?)")
            if attempt[2] > 1:
                if attempt not in retries:
                    bad(f"seq {e['seq']}: attempt {attempt} dispatched without its retry timer")
                retries.discard(attempt)
            dispatched.add(attempt)
        elif kind in TASK_OUTCOMES:
            if attempt not in dispatched:
                bad(f"seq {e['seq']}: {kind} for attempt {attempt} never dispatched")
            if attempt in ended:
                bad(f"seq {e['seq']}: attempt {attempt} ended twice ({kind})")
            ended.add(attempt)
        elif kind == "signal_received" and data.get("signalId") is not None:
            signal_ids[str(data["signalId"])] += 1
    for signal_id, count in signal_ids.items():
        if count > 1:
            bad(f"signal {signal_id!r} received {count} times")
    return out


@attrs.frozen
class Write:
    """One `events` row as the audit trigger saw it inserted."""

    run_id: str
    seq: int
    writer: str  # the connection's application_name: which node
    at_us: int  # the database's clock


@attrs.frozen
class LeaseChange:
    """One `cluster_leases` row as it was after an insert or update (at_us 0: as found)."""

    partition: int
    node_id: str | None
    epoch: int
    expires_at: int  # ms, the database's clock
    at_us: int


class LeaseHistory:
    """Every state a `cluster_leases` row went through, by partition, in the database's order."""

    def __init__(self, changes: Iterable[LeaseChange]) -> None:
        self.changes: dict[int, list[LeaseChange]] = {}
        for change in sorted(changes, key=lambda c: c.at_us):
            self.changes.setdefault(change.partition, []).append(change)
        self.times = {p: [c.at_us for c in changes] for p, changes in self.changes.items()}

    def at(self, partition: int, at_us: int) -> LeaseChange | None:
        """The partition's lease as it stood at `at_us` (None: before any record of it)."""
        index = bisect.bisect_right(self.times.get(partition, []), at_us)
        return self.changes[partition][index - 1] if index else None


def fencing_problems(
    writes: Iterable[Write],
    leases: LeaseHistory,
    partition_of: Callable[[str], int],
    node_of: Mapping[str, str],
) -> list[str]:
    """Every event row must have been written by the node holding its run's partition, under an
    unexpired lease, at the moment of the write (`node_of` maps a writer's application_name to
    its node id). A row written by anyone else is a write the database should have fenced off.
    Returns what broke that; [] when nothing did."""
    out: list[str] = []
    for w in writes:
        partition = partition_of(w.run_id)
        node = node_of.get(w.writer)
        lease = leases.at(partition, w.at_us)
        where = f"{w.run_id} seq {w.seq} by {w.writer!r} (partition {partition})"
        if node is None:
            out.append(f"{where}: not written by a known node")
        elif lease is None or lease.node_id != node:
            holder = None if lease is None else (lease.node_id, lease.epoch)
            out.append(f"{where}: the lease was held by {holder}, not {node}")
        elif lease.expires_at * 1000 <= w.at_us:
            late = w.at_us - lease.expires_at * 1000
            out.append(f"{where}: its lease (epoch {lease.epoch}) had expired {late} us before")
    return out
