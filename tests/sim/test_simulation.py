"""The seeded simulation of the runtime (tests/sim/runner.py), as tests.

- `test_seeds`: `FOLIOT_SIM_SEEDS` seeds (default `DEFAULT_SEEDS`, under a minute on a 2-core
  machine), split in `CHUNKS` tests so that `pytest -n` spreads them; `FOLIOT_SIM_FIRST` moves
  the window. A failing seed is shrunk and printed with its history and how to replay it.
- `test_replay`: with `FOLIOT_SIM_SEED` (and `FOLIOT_SIM_OPS`), that one seed (else skipped).
- `test_defect_found`: each seed (and operations) that showed a defect, now fixed in foliot.
- `test_a_seed_replays_exactly`: two runs of one seed make the same history.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from .runner import Result, report, shrink, simulate

DEFAULT_SEEDS = 96
CHUNKS = 8
SEEDS = int(os.environ.get("FOLIOT_SIM_SEEDS", DEFAULT_SEEDS))
FIRST = int(os.environ.get("FOLIOT_SIM_FIRST", 0))

# (seed, operations kept or None for all, the defect it showed): each is fixed in foliot.
# Commits written with their reply lost (the connection lost during the commit) lost their
# effects until the next restart, and their callers were told "nothing was changed":
DEFECTS = [
    (93, [12], "a start's commit written, reply lost: its first push never sent (the retry replayed)"),
    (1, None, "a start's commit written, reply lost (no Idempotency-Key): its push never sent"),
    (1, [5, 6, 14, 15, 20], "a child's closing commit written, reply lost: its parent never told"),
    (51, [9, 10, 14, 15, 16, 17, 36], "a commit written, reply lost: the wheel never armed its sleep"),
    (51, None, "a sleep's firing written, reply lost: the next step's push never sent"),
    (60, [0, 1, 3], "a retry timer's commit written, reply lost: the next attempt never pushed"),
    (136, [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 17], "a failure written, reply lost: its retry never armed"),
]


def _fail(result: Result) -> None:
    pytest.fail(report(shrink(result, budget_s=60.0)), pytrace=False)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_seeds(chunk: int) -> None:
    for seed in range(FIRST + chunk, FIRST + SEEDS, CHUNKS):
        result = simulate(seed)
        if not result.ok:
            _fail(result)


def test_replay() -> None:
    seed = os.environ.get("FOLIOT_SIM_SEED")
    if seed is None:
        pytest.skip("set FOLIOT_SIM_SEED (and FOLIOT_SIM_OPS) to replay one seed")
    ops = os.environ.get("FOLIOT_SIM_OPS")
    result = simulate(int(seed), [int(i) for i in ops.split(",")] if ops else None)
    if not result.ok:
        pytest.fail(report(result), pytrace=False)


@pytest.mark.parametrize(("seed", "ops", "defect"), DEFECTS, ids=[f"seed{d[0]}" for d in DEFECTS])
def test_defect_found(seed: int, ops: list[int] | None, defect: str) -> None:
    result = simulate(seed, ops)
    if not result.ok:
        pytest.fail(f"{defect}\n{report(result)}", pytrace=False)


def _digest(result: Result) -> str:
    world = result.world
    h = hashlib.sha256()
    for call in sorted(world.calls, key=lambda c: (c.at, c.kind, repr(c.args))):
        polled = call.kind == "poll" and call.outcome == "ok"
        value = [task.token for _, task in call.value] if polled else call.value  # no trace ids
        h.update(repr((call.at, call.kind, call.args, call.outcome, value, call.done)).encode())
    for delivery in world.deliveries:
        h.update(repr(delivery).encode())
    for run_id in sorted(world.store.events):
        for e in world.store.events[run_id]:
            h.update(repr((run_id, e.seq, e.at, e.type, e.step, e.attempt, e.data)).encode())
    h.update(repr(sorted(world.counts.items())).encode())
    return h.hexdigest()


def test_a_seed_replays_exactly() -> None:
    first, again = simulate(58), simulate(58)
    assert first.world.deliveries and first.world.counts.get("crash")  # a busy seed
    assert _digest(first) == _digest(again)
