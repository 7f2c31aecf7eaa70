"""The runs list's `attention` column and filter (issue 26 point 9): which open runs are
blocked while their status looks healthy (`foliot.observe.diagnosis.attention`).

Judged from what a list read already holds (the run documents) and what this node knows in
memory (its pull queues' pollers, its cached workflow definitions): no read per run. A
filtered page examines at most `ATTENTION_SCAN` runs of the list's order, so a request costs
the same however few runs match (docs/api.md)."""

from __future__ import annotations

from typing import Final

from ..core.workflow.model import Run
from ..observe.diagnosis import QueueSeen, attention
from .services import Services

ATTENTION_SCAN: Final = 500


class Judge:
    """Attention reasons for the runs of one request (definitions read once per version)."""

    def __init__(self, eng: Services) -> None:
        self.eng = eng
        self.now = eng.clock.now()
        self._awaited: dict[tuple[str, str, int], frozenset[str] | None] = {}

    async def reasons(self, run: Run) -> tuple[str, ...]:
        queue = None
        task = run.task
        if task is not None and task.queue is not None and task.claimed_by is None:
            last, _ = self.eng.queues.last_polled(run.app, task.queue)
            queue = QueueSeen(
                name=task.queue,
                backlog=self.eng.queues.depth(run.app, task.queue),
                waiting_pollers=self.eng.queues.waiting_on(run.app, task.queue),
                last_poll_at=last,
                tracked_since=self.eng.started_at,
            )
        awaited = await self._signals(run) if run.buffer else None
        return attention(run, self.now, queue, awaited)

    async def _signals(self, run: Run) -> frozenset[str] | None:
        key = (run.app, run.workflow, run.version)
        if key not in self._awaited:
            found = await self.eng.directory.maybe_definition(*key)
            self._awaited[key] = (
                None if found is None else frozenset(name for step in found.steps for name in step.awaited)
            )
        return self._awaited[key]
