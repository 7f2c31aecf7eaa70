"""One actor for every durable timer of every kind of actor: a run's sleeps, wait timeouts, task
deadlines, backoffs and run timeouts; an SWF execution's timeouts and timers.

Timers are rows in storage (derived from each actor's document on every commit), each naming
its actor by (kind, id), read in storage order `(due_at, id, slot)` (ids are unique across
kinds). A due timer is delivered as `deliver(kind, id, slot, timer kind, key)`; the actor's kind
turns it into its own firing message. The wheel holds only a prefix of that order in memory: at most
`page_size` rows paged in at a time, and none due later than `window_ms` ahead, so a million
parked runs cost a million rows, not a million heap entries. Everything before `_limit` is known
to the wheel; armings committed by this node (`sync`) join the prefix when they fall inside it.

A timer is in one of three places: *waiting* (in the heap), *in flight* (handed to its
actor, not yet settled) or in storage only. A firing is in flight from delivery until the actor
`settle`s it, after its commit or once it found the firing stale; while in flight, neither a
page-in nor a sync adds that arming again, so it fires once. At most `max_inflight` firings are
out at a time, which paces a storm of timers due together at the rate the store commits them and
bounds how many passivated runs timers rehydrate at once. A firing that could not be applied
(storage down, the actor crashed) goes back to waiting with a backoff; one whose mailbox was
full is handed out again 100 ms later, never twice at once.

Heap entries are never deleted: a superseded one is recognised as stale when it surfaces and
skipped, and the heap is rebuilt when stale entries outnumber live ones, as trio's own deadline
heap does.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

import trio

from ..storage.base import TimerRecord
from .clock import Clock
from .runtime import Arming

log = logging.getLogger("foliot.timers")

TimerId = tuple[str, str]  # (actor id, slot)
Position = tuple[int, str, str]  # (due_at, actor id, slot): the storage order
FlightId = tuple[str, str, str]  # (actor id, slot, key): one arming
# deliver(actor kind, actor id, slot, timer kind, key) -> False when the mailbox is full
Deliver = Callable[[str, str, str, str, str], bool]

MAILBOX_FULL_RETRY_MS: Final = 100
RETRY_MS: Final = (200, 1_000, 5_000, 10_000)  # after a firing was not applied, by attempt
LEASE_MS: Final = 120_000  # a firing never settled (a lost message) is handed out again


class TimerSource(Protocol):
    """What the wheel needs from a store."""

    async def timers_due_before(
        self, before: int, limit: int, after: Position | None = None
    ) -> list[TimerRecord]: ...


class _Entry:
    """One arming the wheel knows about."""

    __slots__ = ("actor", "attempts", "due", "fire_at", "key", "kind", "seq")

    def __init__(self, actor: str, kind: str, key: str, due: int, fire_at: int, attempts: int = 0) -> None:
        self.actor = actor  # the actor's kind
        self.kind = kind
        self.key = key
        self.due = due
        self.fire_at = fire_at
        self.attempts = attempts
        self.seq = 0


def _just_after(pos: Position) -> Position:
    """The smallest position greater than `pos` (never sent to SQL: only compared here)."""
    return (pos[0], pos[1], pos[2] + "\x00")


class TimerWheel:
    def __init__(
        self,
        store: TimerSource,
        clock: Clock,
        deliver: Deliver,
        *,
        window_ms: int = 60_000,
        max_inflight: int = 256,
        page_size: int | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._deliver = deliver
        self._window_ms = max(window_ms, 100)
        self._max_inflight = max(1, max_inflight)
        self._page = max(16, page_size if page_size is not None else 4 * self._max_inflight)
        self._heap: list[tuple[int, str, str, int]] = []  # (fire_at, actor id, slot, seq)
        self._waiting: dict[TimerId, _Entry] = {}
        self._inflight: dict[FlightId, tuple[_Entry, int]] = {}  # -> (entry, handed out at)
        self._limit: Position = (0, "", "")  # every stored timer before this is known
        self._cursor: Position | None = None  # where the next page-in reads from
        self._paging: dict[TimerId, tuple[str, str, str, int] | None] | None = None
        self._seq = 0
        self._wake = trio.Event()
        self.fired = 0
        self.retried = 0
        self.max_inflight_seen = 0
        self.last_lag_ms = 0
        self.max_lag_ms = 0
        self.observe_lag: Callable[[float], None] = lambda seconds: None  # the engine's histogram
        # Whether this node runs an actor (several nodes: its partition is leased here); the
        # timers of other actors are skipped at page-in and dropped when they come due.
        self.owned: Callable[[str], bool] = lambda actor_id: True
        self._rewinds = 0

    # ------------------------------------------------------------------ feeding

    def sync(
        self,
        actor: str,
        actor_id: str,
        before: Iterable[tuple[str, Arming]],
        after: Iterable[tuple[str, Arming]],
    ) -> None:
        """After a commit: make the wheel's view of one actor's timers match its document.

        `before` and `after` are the (slot, arming) pairs of the document before and after the
        commit (`Kind.timers`): slots in `after` are (re)armed, the others of `before` dropped."""
        paging = self._paging
        gone = {slot for slot, _ in before}
        for slot, timer in after:
            gone.discard(slot)
            arming = (actor, timer.kind, timer.key, timer.due)
            if paging is not None:
                paging[(actor_id, slot)] = arming  # newer than what the page-in reads
            self._apply(actor_id, slot, arming)
        for slot in gone:
            if paging is not None:
                paging[(actor_id, slot)] = None
            self._waiting.pop((actor_id, slot), None)
        if len(self._waiting) > 2 * self._page and paging is None:
            self._shrink()

    def settle(self, actor_id: str, slot: str, key: str, *, applied: bool) -> None:
        """The actor is done with a firing: applied or stale (`applied`), or not applied
        (storage failed, the actor crashed): then it is handed out again after a backoff.
        Settling a firing that is no longer in flight does nothing."""
        flight = self._inflight.pop((actor_id, slot, key), None)
        if flight is None:
            return
        self._wake.set()  # a slot is free
        if applied:
            return
        entry = flight[0]
        tid = (actor_id, slot)
        if tid in self._waiting or (entry.due, actor_id, slot) >= self._limit:
            return  # a newer arming is waiting, or the page-in will read the row again
        self.retried += 1
        entry.fire_at = self._clock.now() + RETRY_MS[min(entry.attempts, len(RETRY_MS) - 1)]
        entry.attempts += 1
        self._push(actor_id, slot, entry)

    def defer(self, actor_id: str, slot: str, key: str, fire_at: int) -> None:
        """The actor puts a firing off to `fire_at` (its app's turn has not come,
        `actors/lanes.py`): it leaves the firings in flight and is handed out again then, unless
        a newer arming replaced it meanwhile."""
        flight = self._inflight.pop((actor_id, slot, key), None)
        if flight is None:
            return
        self._wake.set()  # a slot is free
        entry = flight[0]
        if (actor_id, slot) in self._waiting or (entry.due, actor_id, slot) >= self._limit:
            return  # a newer arming is waiting, or the page-in will read the row again
        entry.fire_at = fire_at
        self._push(actor_id, slot, entry)

    def _apply(self, actor_id: str, slot: str, arming: tuple[str, str, str, int] | None) -> None:
        tid = (actor_id, slot)
        if arming is None:
            self._waiting.pop(tid, None)
            return
        actor, kind, key, due = arming
        if (actor_id, slot, key) in self._inflight:
            return  # being fired: its settle decides what happens next
        current = self._waiting.get(tid)
        if current is not None and current.key == key and current.due == due:
            return  # already waiting (perhaps with a later fire_at after a full mailbox)
        if (due, actor_id, slot) >= self._limit:
            # Beyond what the wheel holds: storage has it and a later page-in brings it.
            self._waiting.pop(tid, None)
            return
        self._push(actor_id, slot, _Entry(actor, kind, key, due, due))

    def _push(self, actor_id: str, slot: str, entry: _Entry) -> None:
        self._seq += 1
        entry.seq = self._seq
        self._waiting[(actor_id, slot)] = entry
        heapq.heappush(self._heap, (entry.fire_at, actor_id, slot, entry.seq))
        if self._heap[0][3] == entry.seq:
            self._wake.set()
        if len(self._heap) > 2 * len(self._waiting) + 1024:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._heap = [(e.fire_at, tid[0], tid[1], e.seq) for tid, e in self._waiting.items()]
        heapq.heapify(self._heap)

    def _shrink(self) -> None:
        """Too many waiting (a burst of armings inside the prefix): keep the first `page_size`
        in storage order and leave the rest to storage, pulling the limit back to match."""
        order = sorted(self._waiting.items(), key=lambda kv: (kv[1].due, kv[0][0], kv[0][1]))
        keep, drop = order[: self._page], order[self._page :]
        for tid, _ in drop:
            del self._waiting[tid]
        (actor_id, slot), first = drop[0]
        self._limit = (first.due, actor_id, slot)
        if self._cursor is not None and self._cursor >= self._limit:
            (actor_id, slot), last = keep[-1]
            self._cursor = (last.due, actor_id, slot)
        self._rebuild_heap()

    def rewind(self) -> None:
        """Page in again from the start of the table (partitions were gained: their timers
        were skipped by earlier page-ins). What the wheel holds stays; rows read again are
        recognised as already known."""
        self._rewinds += 1
        self._limit = (0, "", "")
        self._cursor = None
        self._wake.set()

    def forget(self, which: Callable[[str], bool]) -> int:
        """Drop the timers of the actors `which` picks (their partition left this node), waiting
        or in flight: their next owner pages them in from storage."""
        waiting = [tid for tid in self._waiting if which(tid[0])]
        for tid in waiting:
            del self._waiting[tid]
        flying = [fid for fid in self._inflight if which(fid[0])]
        for fid in flying:
            del self._inflight[fid]
        if flying:
            self._wake.set()
        return len(waiting) + len(flying)

    # ------------------------------------------------------------------ introspection

    def stats(self) -> dict[str, Any]:
        nxt = self._peek()
        return {
            "inMemory": len(self._waiting) + len(self._inflight),
            "waiting": len(self._waiting),
            "inflight": len(self._inflight),
            "maxInflight": self._max_inflight,
            "heapEntries": len(self._heap),
            "nextDue": None if nxt is None else nxt[0],
            "fired": self.fired,
            "retried": self.retried,
            "lagMs": self.last_lag_ms,
            "maxLagMs": self.max_lag_ms,
            "horizon": self._limit[0],
        }

    def pending_for(self, actor_id: str, slots: Iterable[str]) -> list[dict[str, Any]]:
        """The armings of these slots of one actor that the wheel holds (waiting or in flight)."""
        out = []
        for slot in slots:
            cur = self._waiting.get((actor_id, slot))
            if cur is not None:
                out.append({"slot": slot, "kind": cur.kind, "key": cur.key, "due": cur.due})
        for (aid, slot, key), (entry, _) in self._inflight.items():
            if aid == actor_id:
                out.append({"slot": slot, "kind": entry.kind, "key": key, "due": entry.due})
        return out

    def _peek(self) -> tuple[int, str, str, int] | None:
        """The earliest live heap entry (ties in storage order), dropping stale ones on the way."""
        heap = self._heap
        while heap:
            top = heap[0]
            entry = self._waiting.get((top[1], top[2]))
            if entry is not None and entry.seq == top[3]:
                return top
            heapq.heappop(heap)
        return None

    # ------------------------------------------------------------------ the actor

    async def page_in(self) -> None:
        """Read the next stored timers, in storage order: no more than fit in `page_size`, and
        none due more than `window_ms` ahead (overdue ones included)."""
        room = self._page - len(self._waiting)
        if room <= 0:
            return
        before = self._clock.now() + self._window_ms
        self._paging = {}
        rewinds = self._rewinds
        try:
            rows = await self._store.timers_due_before(before, room, self._cursor)
            touched = self._paging
        finally:
            self._paging = None
        if rewinds == self._rewinds:  # else rewound meanwhile: read again from the start
            if rows:
                last = rows[-1]
                self._cursor = (last.due_at, last.run_id, last.slot)
            reached = _just_after(self._cursor) if len(rows) == room and self._cursor else (before, "", "")
            self._limit = max(self._limit, reached)
        owned = self.owned
        for r in rows:
            if (r.run_id, r.slot) not in touched and owned(r.run_id):
                self._apply(r.run_id, r.slot, (r.actor_kind, r.kind, r.key, r.due_at))
        for (actor_id, slot), arming in touched.items():
            self._apply(actor_id, slot, arming)  # committed while we read: newer than the row

    def _wants_page_in(self, now: int) -> bool:
        if self._limit[0] > now + self._window_ms // 2 or len(self._waiting) >= self._page:
            return False  # the prefix reaches far enough ahead, or memory is full
        if len(self._waiting) < self._page // 2:
            return True
        nxt = self._peek()
        return nxt is None or nxt[0] > self._limit[0]  # a stored timer may be due before it

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.page_in()
        task_status.started()
        while True:
            now = self._clock.now()
            self._expire_leases(now)
            if self._wants_page_in(now):
                try:
                    await self.page_in()
                except Exception:
                    log.exception("timer page-in failed; retrying")
                    await trio.sleep(1)
                    continue
                now = self._clock.now()
            self._fire_due(now)
            self._wake = trio.Event()
            with trio.move_on_at(self._clock.trio_deadline(self._wake_at(now))):
                await self._wake.wait()

    def _wake_at(self, now: int) -> int:
        at = self._limit[0] - self._window_ms // 2
        if at <= now:
            at = now + self._window_ms // 2  # reached only through firing, which wakes us
        if len(self._inflight) < self._max_inflight:
            nxt = self._peek()
            if nxt is not None:
                at = min(at, nxt[0])
        if self._inflight:
            oldest = next(iter(self._inflight.values()))[1]
            at = min(at, oldest + LEASE_MS)
        return at

    def _fire_due(self, now: int) -> None:
        """Hand out due firings, earliest first, while fewer than `max_inflight` are out."""
        while len(self._inflight) < self._max_inflight:
            top = self._peek()
            if top is None or top[0] > now:
                return
            heapq.heappop(self._heap)
            _, actor_id, slot, _ = top
            entry = self._waiting.pop((actor_id, slot))
            if not self.owned(actor_id):
                continue  # its partition left this node: its next owner fires it
            fid = (actor_id, slot, entry.key)
            self._inflight[fid] = (entry, now)
            if not self._deliver(entry.actor, actor_id, slot, entry.kind, entry.key):
                # Mailbox full: still waiting, handed out again shortly; never twice at once.
                del self._inflight[fid]
                entry.fire_at = now + MAILBOX_FULL_RETRY_MS
                self._push(actor_id, slot, entry)
                continue
            self.fired += 1
            self.max_inflight_seen = max(self.max_inflight_seen, len(self._inflight))
            if entry.attempts == 0:
                self.last_lag_ms = now - entry.due
                self.max_lag_ms = max(self.max_lag_ms, self.last_lag_ms)
                self.observe_lag(self.last_lag_ms / 1000)

    def _expire_leases(self, now: int) -> None:
        while self._inflight:
            fid, (entry, at) = next(iter(self._inflight.items()))
            if now < at + LEASE_MS:
                return
            log.warning("timer %s of %s %s was never settled; firing it again", fid[2], entry.actor, fid[0])
            self.settle(fid[0], fid[1], fid[2], applied=False)
