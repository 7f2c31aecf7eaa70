"""The checker: the store's final durable state and the logs of a world, against what Foliot
promises.

- **starts**: every acknowledged start exists; one Idempotency-Key never made two runs, and
  every answer to it named the same run; no two runs of a workflow held one business key open
  at once;
- **signals**: every acknowledged signal (delivered, buffered or a duplicate of one taken) was
  received exactly once and consumed at most once; one received and not consumed is still in
  the run's buffer;
- **attempts**: every task attempt has one idempotency key (its run, generation, step and
  attempt) and one token, every delivery of it (push or claim) carries that key, and none was
  delivered before the store held it open;
- **timers**: an arming fired (was applied) at most once, never before it was due, and none
  of an open run is overdue once the world has been calm for a while;
- **concurrency keys**: never more runs holding a key's slots than its limit (the documents of
  every commit replayed), and no run left queued while its key has a free slot;
- **histories**: events numbered 1..seq without gaps, `run_started` first, a closed run's last
  event its closing one, an open run's task the last one dispatched and not answered, one
  outcome per attempt, the generation one more than the redrives and rewinds;
- **acknowledged interventions**: a cancelled run stays cancelled, a redrive, pause, unpause,
  rewind or skip answered is in the run's history, an answer accepted through `complete` is the attempt's
  outcome;
- **liveness** (after the calm period): no open run is left running an attempt nobody answers,
  sleeping past its wake-up, waiting for children that closed, a child its parent no longer
  waits for, or stuck for an internal error.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import attrs
import trio

from foliot.core.workflow.model import Event, Run

from .store import T0
from .workload import LIMITS
from .world import World

TERMINAL = {
    "completed": "run_completed",
    "failed": "run_failed",
    "cancelled": "run_cancelled",
    "timed_out": "run_timed_out",
}
OUTCOMES = ("task_completed", "task_failed", "task_timed_out")
# The first event of a unit that a due timer of this kind made (`machine._on_timer`).
FIRED_BY = {
    "sleep_finished": ("sleep",),
    "wait_timed_out": ("wait_timeout",),
    "task_timed_out": ("task_deadline", "queue_timeout"),
    "child_timed_out": ("child_timeout",),
}
OVERDUE_MS = 300_000  # a timer this late once the world is calm was lost
# The event an answered intervention leaves in the run's history.
HISTORY_OF = {
    "redrive": "run_redriven",
    "pause": "run_paused",
    "unpause": "run_unpaused",
    "rewind": "run_rewound",
    "skip": "step_skipped",
}
REOPEN = ("run_redriven", "run_rewound", "step_skipped")  # what may reopen a closed run


@attrs.frozen
class Violation:
    check: str
    message: str
    runs: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"


def _holders(runs: dict[str, Run]) -> Counter[str]:
    """Slots held per concurrency key, as the runs' documents say."""
    return Counter(run.concurrency_key for run in runs.values() if run.holds_slot and run.concurrency_key)


_LIMITS: dict[str, int] = dict(LIMITS)  # with the combined workload's, set by `use_limits`


def use_limits(limits: dict[str, int]) -> None:
    """The concurrency limits of this world's definitions (the combined workload draws them)."""
    _LIMITS.clear()
    _LIMITS.update(LIMITS)
    _LIMITS.update(limits)


def _limit(key: str) -> int:
    return _LIMITS[key.partition("/")[0]]


def quiet(world: World) -> bool:
    """Every open run waits on a caller (a signal, an unpause) or on a run that does (a slot
    held): nothing more happens on its own."""
    runs = world.store.runs
    held = _holders(runs)
    return all(
        not run.is_open
        or run.status == "paused"
        or (run.status == "waiting" and not run.timers() and run.fan is None)
        or (
            run.status == "queued"
            and run.concurrency_key
            and held[run.concurrency_key] >= _limit(run.concurrency_key)
        )
        for run in runs.values()
    )


def check(world: World, *, calm_since: int | None) -> list[Violation]:
    out: list[Violation] = []
    store = world.store
    for run_id, run in store.runs.items():
        out += _history(run, store.events.get(run_id, []), store)
    out += _starts(world)
    out += _signals(world)
    out += _attempts(world)
    out += _timers(world)
    out += _slots(world)
    out += _interventions(world)
    out += combined_checks(world)
    if calm_since is not None:
        out += _liveness(world, calm_since)
    out += [Violation("engine", failure) for failure in world.failures]
    return out


# ---------------------------------------------------------------------- histories


def _history(run: Run, events: list[Event], store: Any) -> list[Violation]:
    rid = run.run_id
    out = []

    def bad(message: str) -> None:
        out.append(Violation("history", f"run {rid}: {message}", (rid,)))

    seqs = [e.seq for e in events]
    if seqs != list(range(1, run.seq + 1)):
        bad(f"events numbered {seqs[:3]}..{seqs[-3:]} for seq {run.seq} (gaps or repeats)")
        return out
    if events[0].type != "run_started":
        bad(f"first event is {events[0].type}")
    restarts = sum(
        1
        for e in events
        if e.type in ("run_redriven", "run_rewound")
        or (e.type == "run_migrated" and not e.data.get("inPlace"))
    )
    if run.generation != 1 + restarts:
        bad(
            f"generation {run.generation} after {restarts} redrives, rewinds and migrations"
            " re-entering a step"
        )
    terminal = [i for i, e in enumerate(events) if e.type in TERMINAL.values()]
    reopened = [i for i, e in enumerate(events) if e.type in REOPEN]
    if not run.is_open:
        # A closed run's state may be edited (`state_edited` after its closing event).
        last = next((e for e in reversed(events) if e.type != "state_edited"), events[-1])
        if last.type != TERMINAL[run.status]:
            bad(f"{run.status} but its last event is {last.type}")
    elif terminal and (not reopened or reopened[-1] < terminal[-1]):
        bad(f"open ({run.status}) after {events[terminal[-1]].type}, not reopened since")
    dispatched: dict[tuple[int, str, int], Event] = {}
    answered: Counter[tuple[int, str, int]] = Counter()
    for e in events:
        if e.step is None or e.attempt is None:
            continue
        attempt = (e.generation, e.step, e.attempt)
        if e.type == "task_dispatched":
            if attempt in dispatched:
                bad(f"attempt {attempt} dispatched twice")
            dispatched[attempt] = e
            key = f"{rid}:{e.generation}:{e.step}:{e.attempt}"
            if e.data.get("idempotencyKey") != key:
                bad(f"attempt {attempt} dispatched with key {e.data.get('idempotencyKey')}")
        elif e.type in OUTCOMES:
            if attempt not in dispatched:
                bad(f"{e.type} for attempt {attempt} never dispatched")
            answered[attempt] += 1
    for attempt, n in answered.items():
        if n > 1:
            bad(f"attempt {attempt} has {n} outcomes")
    open_rows = {t.token for t in store.tasks.values() if t.run_id == rid and t.status == "open"}
    task = run.task if run.is_open else None
    if open_rows != ({task.token} if task is not None else set()):
        bad(f"open task rows {sorted(open_rows)} but the run holds {task.token if task else None}")
    if task is not None:
        attempt = (task.generation, task.step, task.attempt)
        if attempt not in dispatched or answered[attempt]:
            bad(f"holds attempt {attempt}, which its history does not show open")
    return out


# ---------------------------------------------------------------------- starts


def _starts(world: World) -> list[Violation]:
    out = []
    runs = world.store.runs
    by_key: dict[str, set[str]] = defaultdict(set)  # idempotency key -> runs answered
    for call in world.calls:
        if call.kind not in ("start", "signal_start") or call.outcome != "ok":
            continue
        run_id = call.value["runId"]
        if run_id not in runs:
            out.append(
                Violation("starts", f"start {call.args} answered {run_id}, which is not stored", (run_id,))
            )
        if call.args.get("key") is not None:
            by_key[call.args["key"]].add(run_id)
    made: dict[str, list[str]] = defaultdict(list)  # idempotency key -> runs stored for it
    keys = {call.args.get("key") for call in world.calls if call.kind in ("start", "signal_start")}
    for run in runs.values():
        if run.parent is None and isinstance(run.input, dict) and "op" in run.input:
            key = f"idem-{run.input['op']}"
            if key in keys:
                made[key].append(run.run_id)
    for key, answered in by_key.items():
        if len(answered) > 1:
            out.append(
                Violation(
                    "starts", f"Idempotency-Key {key} answered runs {sorted(answered)}", tuple(answered)
                )
            )
    for key, stored in made.items():
        if len(stored) > 1:
            out.append(
                Violation("starts", f"Idempotency-Key {key} made {len(stored)} runs: {stored}", tuple(stored))
            )
    # One open run per (workflow, business key) at any moment: replayed from the commits.
    open_by_key: dict[tuple[str, str], str] = {}
    for _, unit in world.units:
        for one in (unit, *unit.children):
            run = one.run
            if run.business_key is None:
                continue
            slot = (run.workflow, run.business_key)
            holder = open_by_key.get(slot)
            if run.is_open:
                if holder is not None and holder != run.run_id:
                    out.append(
                        Violation(
                            "starts",
                            f"runs {holder} and {run.run_id} both open on {slot}",
                            (holder, run.run_id),
                        )
                    )
                open_by_key[slot] = run.run_id
            elif holder == run.run_id:
                del open_by_key[slot]
    return out


# ---------------------------------------------------------------------- signals


def _signals(world: World) -> list[Violation]:
    out = []
    store = world.store
    for run_id, run in store.runs.items():
        received: Counter[str] = Counter()
        consumed: Counter[str] = Counter()
        for e in store.events.get(run_id, []):
            sid = e.data.get("signalId")
            if sid is None:
                continue
            if e.type == "signal_received":
                received[sid] += 1
            elif e.type == "signal_consumed":
                consumed[sid] += 1
        buffered = {b.signal_id for b in run.buffer if b.signal_id is not None}
        for sid, n in received.items():
            if n > 1:
                out.append(Violation("signals", f"run {run_id} received signalId {sid} {n} times", (run_id,)))
            if consumed[sid] > 1:
                out.append(
                    Violation(
                        "signals", f"run {run_id} consumed signalId {sid} {consumed[sid]} times", (run_id,)
                    )
                )
            if not consumed[sid] and sid not in buffered:
                out.append(
                    Violation(
                        "signals",
                        f"run {run_id}: signalId {sid} received, neither consumed nor buffered",
                        (run_id,),
                    )
                )
        for sid in consumed:
            if not received[sid]:
                out.append(
                    Violation("signals", f"run {run_id} consumed signalId {sid} it never received", (run_id,))
                )
    for call in world.calls:
        if call.kind not in ("signal", "signal_start") or call.outcome != "ok":
            continue
        run_id, sid = call.value["runId"], call.args.get("id")
        if sid is None:
            continue
        events = store.events.get(run_id, [])
        got = [e for e in events if e.type == "signal_received" and e.data.get("signalId") == sid]
        if len(got) != 1:
            out.append(
                Violation(
                    "signals",
                    f"signal {sid} to {run_id} answered {call.value['status']} but received {len(got)} times",
                    (run_id,),
                )
            )
    return out


# ---------------------------------------------------------------------- attempts and deliveries


def _attempts(world: World) -> list[Violation]:
    out = []
    tasks = world.store.tasks
    key_of: dict[str, str] = {}
    token_of: dict[str, str] = {}
    for d in world.deliveries:
        row = tasks.get(d.token)
        if row is None:
            out.append(
                Violation(
                    "attempts", f"{d.via} of token {d.token} ({d.key}) the store never held", (d.run_id,)
                )
            )
            continue
        expected = f"{row.run_id}:{row.generation}:{row.step}:{row.attempt}"
        if d.key != expected or d.run_id != row.run_id:
            out.append(
                Violation(
                    "attempts",
                    f"{d.via} of {d.token} carried key {d.key}, its attempt is {expected}",
                    (d.run_id,),
                )
            )
        if not d.stored_first:
            out.append(
                Violation("attempts", f"{d.via} of {d.key} before the store held it open", (d.run_id,))
            )
        if key_of.setdefault(d.token, d.key) != d.key:
            out.append(
                Violation(
                    "attempts",
                    f"token {d.token} delivered with keys {key_of[d.token]} and {d.key}",
                    (d.run_id,),
                )
            )
        if token_of.setdefault(d.key, d.token) != d.token:
            out.append(
                Violation(
                    "attempts",
                    f"key {d.key} delivered with tokens {token_of[d.key]} and {d.token}",
                    (d.run_id,),
                )
            )
    seen: dict[str, str] = {}
    for row in tasks.values():
        key = f"{row.run_id}:{row.generation}:{row.step}:{row.attempt}"
        if seen.setdefault(key, row.token) != row.token:
            out.append(
                Violation("attempts", f"attempt {key} has tokens {seen[key]} and {row.token}", (row.run_id,))
            )
    return out


# ---------------------------------------------------------------------- timers


def _timers(world: World) -> list[Violation]:
    out = []
    before: dict[str, Run] = {}
    applied: set[tuple[str, str]] = set()
    for _, unit in world.units:
        for one in (unit, *unit.children):
            run = one.run
            prior = before.get(run.run_id)
            before[run.run_id] = run
            if prior is None or not one.events:
                continue
            first = one.events[0]
            fired = None
            if first.type == "run_timed_out" and prior.deadline is not None:
                fired = (f"run:{prior.generation}", prior.deadline)
            elif prior.timer is not None:
                kinds = FIRED_BY.get(first.type, ())
                retried = (
                    first.type == "task_dispatched" and prior.timer.kind == "retry" and prior.task is None
                )
                if prior.timer.kind in kinds or retried:
                    fired = (prior.timer.key, prior.timer.due)
            if fired is None:
                continue
            key, due = fired
            rid = run.run_id
            if (rid, key) in applied:
                out.append(Violation("timers", f"run {rid}: arming {key} fired twice", (rid,)))
            applied.add((rid, key))
            if first.at < due:
                out.append(
                    Violation(
                        "timers", f"run {rid}: arming {key} fired at {first.at - T0}, due {due - T0}", (rid,)
                    )
                )
    return out


# ---------------------------------------------------------------------- concurrency keys


def _slots(world: World) -> list[Violation]:
    """Never more runs holding a key's slots than its limit, at any commit."""
    out = []
    docs: dict[str, Run] = {}
    over: set[str] = set()
    for _, unit in world.units:
        for one in (unit, *unit.children):
            docs[one.run.run_id] = one.run
        for key, n in _holders(docs).items():
            if n > _limit(key) and key not in over:
                over.add(key)
                holding = tuple(r.run_id for r in docs.values() if r.holds_slot and r.concurrency_key == key)
                out.append(
                    Violation("slots", f"{n} runs hold a slot of {key} (limit {_limit(key)})", holding)
                )
    return out


# ---------------------------------------------------------------------- interventions


def _interventions(world: World) -> list[Violation]:
    out = []
    store = world.store
    acked: Counter[tuple[str, str]] = Counter()
    for call in world.calls:
        if call.outcome != "ok":
            continue
        if call.kind == "cancel":
            run_id = call.args["run"]
            run = store.runs.get(run_id)
            if run is None or run.status != "cancelled":
                status = run.status if run else None
                out.append(
                    Violation("acknowledged", f"cancel of {run_id} answered, the run is {status}", (run_id,))
                )
        elif call.kind in HISTORY_OF:
            acked[(call.args["run"], call.kind)] += 1
        elif call.kind in ("complete", "fail"):
            row = store.tasks.get(call.args["token"])
            if row is None:
                out.append(
                    Violation("acknowledged", f"{call.kind} of {call.args['token']} answered, no such task")
                )
                continue
            wanted = "task_completed" if call.kind == "complete" else "task_failed"
            events = store.events.get(row.run_id, [])
            hit = [
                e
                for e in events
                if e.type == wanted
                and (e.generation, e.step, e.attempt) == (row.generation, row.step, row.attempt)
            ]
            if len(hit) != 1 or row.close_reason != "answered":
                out.append(
                    Violation(
                        "acknowledged",
                        f"{call.kind} of {row.token} ({row.step} #{row.attempt}) answered, history shows"
                        f" {len(hit)} {wanted}, task {row.status}/{row.close_reason}",
                        (row.run_id,),
                    )
                )
    for (run_id, kind), n in acked.items():
        shown = sum(1 for e in store.events.get(run_id, []) if e.type == HISTORY_OF[kind])
        if shown < n:
            message = f"{n} {kind} of {run_id} answered, {shown} in its history"
            out.append(Violation("acknowledged", message, (run_id,)))
    return out


# ---------------------------------------------------------------------- liveness


def behind_a_clock_ahead(world: World, token: str) -> bool:
    """The attempt's push waits for a rate-limit bucket whose TAT (epoch µs, written by a node
    whose wall clock was ahead of this one's) is still ahead of this node's clock: a known
    limitation, not a lost push (see README: the buckets trust the nodes' clocks, as timers do;
    `test_simulation.test_a_bucket_written_by_a_clock_ahead_holds_sends_back`)."""
    row = world.store.tasks.get(token)
    return row is not None and any(world.store.tat.get(b.name, 0) // 1000 > world.ended for b in row.buckets)


def _liveness(world: World, calm_since: int) -> list[Violation]:
    out = []
    runs = world.store.runs
    end = world.ended

    def bad(run: Run, message: str) -> None:
        out.append(
            Violation(
                "liveness",
                f"run {run.run_id} ({run.workflow}, {run.status} at {run.current_step}): {message}",
                (run.run_id,),
            )
        )

    held = _holders(runs)
    for run in runs.values():
        if not run.is_open:
            continue
        key = run.concurrency_key
        if run.status == "queued" and key is not None and held[key] < _limit(key):
            bad(run, f"queued for {key}, which has {held[key]} of {_limit(key)} slots held")
        for slot, timer in run.timers():
            if timer.due < end - OVERDUE_MS:
                bad(run, f"{slot} timer {timer.kind} {timer.key} due {timer.due - T0} never fired")
        task = run.task if run.status == "running" and run.timer is None else None
        if task is not None and not behind_a_clock_ahead(world, task.token):
            bad(run, f"attempt {task.attempt} ({task.token}) never answered nor timed out")
        if run.status == "stuck":
            bad(run, f"stuck: {run.error}")
        parent = runs.get(run.parent.run_id) if run.parent is not None else None
        if parent is not None and run.parent is not None and run.parent.on_close == "cancel":
            fan = parent.fan
            if not (parent.is_open and fan is not None and fan.slot(run.run_id) is not None):
                bad(run, f"its parent {parent.run_id} ({parent.status}) no longer waits for it")
        if run.fan is not None and run.fan.open:
            closed = [s.run_id for s in run.fan.open if s.run_id in runs and not runs[s.run_id].is_open]
            if closed:
                bad(run, f"waits for children {closed}, which closed")
    return out


# ---------------------------------------------------------------------- combined (issue 38)

SWEEP_S = 30.0  # the pump's sweep period (foliot/kinds/run/service.py `_SWEEP_S`)
# How long a condition may last before it is a violation: calm (no faults: a wake-up on change
# is immediate, a lost one is found by the next sweep), and while faults are injected (a sweep,
# a storage outage of up to 30 s, a restart of up to 20 s and its pump's first sweep).
QUEUED_CALM_S = SWEEP_S + 5.0
QUEUED_FAULTY_S = SWEEP_S + 30.0 + 20.0 + SWEEP_S + 10.0
ORPHAN_CALM_S = 10.0  # a cancel needs this long to land once nothing fails
ORPHAN_FAULTY_S = 120.0
# A child an operator redrove, rewound or skipped after its parent closed (or stopped waiting
# for it) runs on without a parent: the API accepts it (known, not fixed: seed 104,
# `test_simulation.test_a_child_whose_parent_closed_is_not_reopened`), so it is not counted
# as an orphan unless this is False.
REOPENED_ORPHANS_ALLOWED = True
TAKE_TO_SEND_S = 1.0  # a token is taken as its push goes: the push follows within this


class Monitor:
    """The invariants checked after every commit while the world runs (what they look at changes
    only by a commit, so each condition is seen from the commit that begins it to the one that
    ends it), every 30 s of the calm period and at the end; those that need time (a condition
    may hold for a moment, not for longer than the engine allows):
    no run queued with a slot of its key free for longer than the pump's sweep period, and no
    open child without a live parent waiting for it (unless `onParentClose: abandon`) for longer
    than a cancel needs to land. Plus the counters the store keeps against its documents."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.queued_since: dict[str, float] = {}
        self.orphan_since: dict[str, float] = {}
        self.reported: set[tuple[str, str]] = set()
        self.samples = 0

    def bad(self, check: str, message: str, runs: tuple[str, ...]) -> None:
        if (check, runs[0] if runs else message) in self.reported:
            return
        self.reported.add((check, runs[0] if runs else message))
        at = self.world.now() - T0
        self.world.observed.append(Violation(check, f"at {at} ms: {message}", runs))

    def sample(self) -> None:
        self.samples += 1
        store = self.world.store
        now = trio.current_time()
        # Queued with a free slot of its key (the runs next in its FIFO that fit beside the held).
        free: set[str] = set()
        for key in set(store.queue_key.values()):
            held = sum(1 for k in store.slot_key.values() if k == key)
            room = _limit(key[1]) - held
            if room > 0:
                free.update(r for r in store._heads(key, room) if store.runs[r].status == "queued")
        for run_id, since in self._track(self.queued_since, free, now):
            allowed = self._allowed(since, QUEUED_CALM_S, QUEUED_FAULTY_S, 2 * SWEEP_S + 5.0)
            if now - since > allowed:
                run = store.runs[run_id]
                self.bad(
                    "queued_free",
                    f"run {run_id} ({run.workflow}) queued for {run.concurrency_key} with a slot free"
                    f" for {now - since:.0f} s (allowed {allowed:.0f} s)",
                    (run_id,),
                )
        # Open children without a live parent waiting for them.
        orphans: set[str] = set()
        for run in store.runs.values():
            if not run.is_open or run.parent is None or run.parent.on_close == "abandon":
                continue
            parent = store.runs.get(run.parent.run_id)
            fan = parent.fan if parent is not None else None
            if parent is None or not parent.is_open or fan is None or fan.slot(run.run_id) is None:
                if REOPENED_ORPHANS_ALLOWED and any(e.type in REOPEN for e in store.events[run.run_id]):
                    continue  # reopened by an operator after its parent let it go (see below)
                orphans.add(run.run_id)
        for run_id, since in self._track(self.orphan_since, orphans, now):
            allowed = self._allowed(since, ORPHAN_CALM_S, ORPHAN_FAULTY_S, ORPHAN_CALM_S + SWEEP_S)
            if now - since > allowed:
                run = store.runs[run_id]
                assert run.parent is not None
                parent = store.runs.get(run.parent.run_id)
                self.bad(
                    "orphan",
                    f"child {run_id} ({run.status}) open {now - since:.0f} s without its parent"
                    f" {run.parent.run_id} ({parent.status if parent else None}) waiting for it",
                    (run_id, run.parent.run_id),
                )
        for v in _counters(store):
            self.bad(v.check, v.message, v.runs)

    @staticmethod
    def _track(since: dict[str, float], holding: set[str], now: float) -> list[tuple[str, float]]:
        """The conditions to judge now: those holding (from when they began) and those that just
        ended (judged by how long they held, then forgotten)."""
        ended = [(run_id, t) for run_id, t in since.items() if run_id not in holding]
        for run_id, _ in ended:
            del since[run_id]
        return ended + [(run_id, since.setdefault(run_id, now)) for run_id in sorted(holding)]

    def _allowed(self, since: float, calm_s: float, faulty_s: float, after_calm_s: float) -> float:
        """How long a condition that began at `since` may hold: `calm_s` if it began once the
        world was calm, `faulty_s` while faults were injected, and one that began before the calm
        period may still hold `after_calm_s` into it."""
        calm_at = self.world.calm_at if self.world.calm else float("inf")
        if since >= calm_at:
            return calm_s
        return max(faulty_s, calm_at - since + after_calm_s) if self.world.calm else faulty_s


def _counters(store: Any) -> list[Violation]:
    """What the store counts (the key columns the pump and `why` read, the open-run gauge's
    count) equals what its documents say."""
    out = []
    counted = Counter(r.status for r in store.runs.values() if r.is_open)
    # count_open_runs without a checkpoint (the monitor is synchronous)
    held = {r for r, _ in store.slot_key.items()}
    queued = {r for r, _ in store.queue_key.items()}
    for run_id, run in store.runs.items():
        holds = bool(run.holds_slot and run.concurrency_key)
        if holds != (run_id in held):
            out.append(
                Violation(
                    "counters",
                    f"run {run_id} ({run.status}) holds_slot={holds}, slot_key says {run_id in held}",
                    (run_id,),
                )
            )
        if run_id in queued and not (run.is_open and run.status in ("queued", "paused")):
            out.append(
                Violation("counters", f"run {run_id} ({run.status}) still in its key's queue", (run_id,))
            )
        if run.status == "queued" and run.concurrency_key and run_id not in queued:
            out.append(Violation("counters", f"run {run_id} queued but not in its key's queue", (run_id,)))
    if sum(counted.values()) != sum(1 for r in store.runs.values() if r.is_open):
        out.append(Violation("counters", "the open-run count differs from the open documents"))
    return out


def combined_checks(world: World) -> list[Violation]:
    """The combined workload's invariants over the whole commit log and the final state (each
    commit replayed in order: checked after every step), and what the monitor found."""
    out = list(world.observed)
    out += _map_items(world)
    out += _compensation(world)
    out += _root_cause(world)
    out += _tokens(world)
    return out


def _map_items(world: World) -> list[Violation]:
    """One child per (parent, generation, step, attempt, index), at any commit; and a completed
    item is never started again unless the parent was reopened by an explicit intervention (a
    migration, even one changing maxConcurrency, never restarts finished work)."""
    out = []
    first: dict[tuple[str, str, int, int, int], str] = {}
    for _, unit in world.units:
        for one in (unit, *unit.children):
            ref = one.run.parent
            if one.expected_seq is not None or ref is None:
                continue
            key = (ref.run_id, ref.step, ref.generation, ref.attempt, ref.index)
            seen = first.setdefault(key, one.run.run_id)
            if seen != one.run.run_id:
                out.append(
                    Violation(
                        "map_item_twice",
                        f"parent {ref.run_id} step {ref.step} gen {ref.generation} attempt {ref.attempt}"
                        f" item {ref.index}: children {seen} and {one.run.run_id}",
                        (ref.run_id, seen, one.run.run_id),
                    )
                )
    runs, events = world.store.runs, world.store.events
    by_item: dict[tuple[str, str, int], list[Run]] = defaultdict(list)
    for run in runs.values():
        if run.parent is not None:
            by_item[(run.parent.run_id, run.parent.step, run.parent.index)].append(run)
    for (parent_id, step, index), kids in by_item.items():
        done = [k for k in kids if k.status == "completed"]
        if not done:
            continue
        gen = min(k.parent.generation for k in done if k.parent is not None)
        later = [k for k in kids if k.parent is not None and k.parent.generation > gen]
        if not later:
            continue
        bumps = {e.type for e in events.get(parent_id, []) if e.generation > gen and e.type in REOPEN}
        if not bumps:
            out.append(
                Violation(
                    "map_item_twice",
                    f"parent {parent_id} step {step} item {index}: completed in generation {gen}, started"
                    f" again in {sorted(k.parent.generation for k in later if k.parent)} with no redrive,"
                    " rewind or skip between",
                    (parent_id, *(k.run_id for k in kids)),
                )
            )
    return out


def _compensated(data: dict[str, Any]) -> bool:
    """A `run_failed` event's data: the run failed with a failure its compensation ran for (its
    own error, or under a `failError`, its cause)."""
    cause = data.get("cause") or {}
    return bool(data.get("compensatedBy") or cause.get("compensatedBy") or cause.get("compensated_by"))


def _compensation(world: World) -> list[Violation]:
    """No compensation step runs again after its run failed compensated, without an explicit
    rewind: the run is reopened only by a rewind (a redrive is refused, 409 `compensated`)."""
    out = []
    for run_id, events in world.store.events.items():
        compensated_at: int | None = None
        for e in events:
            if e.type == "run_failed" and _compensated(e.data):
                compensated_at = e.seq
            elif compensated_at is not None and e.type in ("run_redriven", "run_rewound"):
                # A skip of its last step (the compensation) is no rerun: it reaches $fail again.
                if e.type != "run_rewound":
                    out.append(
                        Violation(
                            "compensation_twice",
                            f"run {run_id} failed compensated (#{compensated_at}), then {e.type} (#{e.seq})",
                            (run_id,),
                        )
                    )
                compensated_at = None
            elif compensated_at is not None and e.type == "step_started" and e.step == "refund":
                out.append(
                    Violation(
                        "compensation_twice",
                        f"run {run_id}: its compensation started again (#{e.seq}) without a rewind",
                        (run_id,),
                    )
                )
    for call in world.calls:
        value = str(call.value)
        if call.kind == "redrive" and "compensated" in value and not value.startswith("409"):
            out.append(Violation("compensation_twice", f"a redrive refused as {call.value}, not 409"))
    return out


def _root_cause(world: World) -> list[Violation]:
    """A run that reached `$fail` through its compensation fails with the failure compensated
    (the failing step and its class, `compensatedBy`), under its `failError` when it has one."""
    out = []
    for run_id, run in world.store.runs.items():
        if run.status != "failed" or run.workflow != "combo" or run.error is None:
            continue
        events = world.store.events.get(run_id, [])
        last_start = next((e for e in reversed(events) if e.type == "step_started"), None)
        if last_start is None or last_start.step != "refund" or run.error.step == "refund":
            continue  # failed elsewhere, or its compensation failed (its own error, redrivable)
        entered = max(
            e.seq
            for e in events
            if e.type == "step_started"
            and e.step == "refund"
            and not any(
                x.type == "step_started" and x.step == "refund" and x.seq == e.seq - 1 for x in events
            )
        )
        failed = [e for e in events if e.type == "step_failed" and e.step != "refund" and e.seq < entered]
        compensated = run.error.compensated
        if not failed:
            continue  # entered by a rewind or a skip to it: nothing was compensated
        cause = failed[-1]
        if compensated is None or compensated.compensated_by != "refund":
            out.append(
                Violation(
                    "root_cause", f"run {run_id} reached $fail through refund, error {run.error}", (run_id,)
                )
            )
        elif (compensated.step, compensated.cls) != (cause.step, cause.data.get("class")):
            out.append(
                Violation(
                    "root_cause",
                    f"run {run_id}: error names {compensated.step}/{compensated.cls}, the failure compensated"
                    f" was {cause.step}/{cause.data.get('class')}",
                    (run_id,),
                )
            )
    return out


def _tokens(world: World) -> list[Violation]:
    """A rate-limit token is taken only as its push goes (no token held by a run that waits, or
    closed while it waited): every grant is followed by a push of a rate-limited step within
    `TAKE_TO_SEND_S` (unless the node died in between); and the tokens the nodes counted as
    taken are those the store granted."""
    out = []
    store = world.store
    granted = sum(n for _, _, n in store.takes)
    if granted != world.tokens_counted:
        out.append(
            Violation(
                "tokens", f"the store granted {granted} tokens, the nodes counted {world.tokens_counted}"
            )
        )
    sends = sorted(at for at, _, _, step in world.sends if step == "label")
    crashes = [(at - T0) / 1000 for at, what in world.events if "crashed" in what]
    used = 0
    for _, at_s, n in sorted(store.takes_at, key=lambda t: t[1]):
        for _ in range(n):
            while used < len(sends) and sends[used] < at_s:
                used += 1
            if used < len(sends) and sends[used] - at_s <= TAKE_TO_SEND_S:
                used += 1
                continue
            if any(at_s <= c <= at_s + TAKE_TO_SEND_S for c in crashes):
                continue
            out.append(Violation("tokens", f"a token taken at {at_s:.3f} s with no push after it"))
    return out
