"""Run seeds of the simulation, check them, shrink a failing one, and print what it shows.

`simulate(seed)` runs one world (tests/sim/world.py) under `MockClock(autojump_threshold=0)`:
the workload's operations at their times, then a calm period (no faults, handlers and workers
answering at once) until every open run waits on a caller (a signal), at most `CALM_S` virtual
seconds, then the checker. Trio's own scheduling order
is drawn from the seed too (its scheduler made deterministic and its random generator seeded,
as Hypothesis does), so a seed replays exactly, in this process or another:
`FOLIOT_SIM_SEED=<seed> pytest tests/sim`, or `python -m tests.sim --seed <seed>`. A failing
seed is shrunk by running it again with fewer operations (halves, then one at a time) for as
long as it still fails the same check; the operations kept are printed with the history, and
`--ops 1,4,7` replays just those.

`python -m tests.sim --seconds 60 [--jobs 2] [--floor]` runs consecutive seeds for a minute
(in as many processes) and prints seeds per minute, CPU per seed and every failure, shrunk;
`--floor` then runs the same seeds with no operations as long (a node, its faults and its calm
period alone), the figure the first is to be read against on a shared machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import sys
import time
from collections.abc import Iterable

import attrs
import trio
import trio._core._run as trio_run
from trio.testing import MockClock

from . import combined
from .checker import Monitor, Violation, check, quiet, use_limits
from .combined import CombinedClients, ComboOp, Definitions
from .store import T0
from .workload import WORKFLOWS, Clients, Op, operations, worker
from .world import World

CALM_S = 15 * 60  # after the workload: no faults, everything answered; then the checks
WORKLOAD_LIMIT_S = 3600  # the workload's calls end long before (a hang is a failure)
WORKERS = 2


@attrs.define
class Result:
    seed: int
    ops: list[Op | ComboOp]
    violations: list[Violation]
    world: World
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.violations


class _Errors(logging.Handler):
    """Errors Foliot logs during a run (an actor that crashed, a task that raised)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_EXPECTED_ERRORS = (
    "timer page-in failed",  # storage failed under the wheel: it retries
    "pruning failed",
)


async def _world(world: World, ops: list[Op | ComboOp]) -> int:
    for definition in WORKFLOWS:
        world.store.add_workflow(definition)
    clients = Clients(world, world.seed)
    definitions = Definitions.draw(world.seed)
    mixed = CombinedClients(world, definitions)
    mixed.register()
    world.limits = {"ship": definitions.ship_limit(), "combo#prep": definitions.prep_limit(1)}
    use_limits(world.limits)
    world.monitor = monitor = Monitor(world)
    async with trio.open_nursery() as nursery:
        await nursery.start(world.serve)
        for number in range(WORKERS):
            nursery.start_soon(worker, world, number)
        with trio.move_on_after(WORKLOAD_LIMIT_S) as limit:
            async with trio.open_nursery() as calls:
                for op in ops:
                    calls.start_soon(mixed.run if isinstance(op, ComboOp) else clients.run, op)
        if limit.cancelled_caught:
            world.failures.append(f"the workload's calls did not end within {WORKLOAD_LIMIT_S} s")
        world.calm = True
        world.calm_at = trio.current_time()
        calm_since = world.now()
        with trio.move_on_after(CALM_S):
            while True:  # until every open run waits on a caller (or the calm period ends)
                await trio.sleep(30)  # virtual: the whole world runs under MockClock (see `simulate`)
                monitor.sample()
                if quiet(world):
                    break
        monitor.sample()  # the conditions still holding at the end, judged by how long they held
        up = world.incarnation
        world.ended = up.node.clock.now() if up is not None else world.now()  # the node's own time
        world.crash("the simulation ends")  # nothing more is written: the checks read a still store
        nursery.cancel_scope.cancel()
    return calm_since


def simulate(seed: int, keep: Iterable[int] | None = None) -> Result:
    started = time.perf_counter()
    world = World(seed)
    first: list[Op | ComboOp] = list(operations(seed, world.span_ms))
    ops = first + list(combined.operations(seed, world.span_ms, len(first)))
    if keep is not None:
        kept = set(keep)
        ops = [op for op in ops if op.index in kept]
    # Trio's scheduler, made deterministic as pytest-trio and Hypothesis make it (each batch of
    # runnable tasks sorted, then shuffled by its generator), its generator seeded by the seed.
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(f"{seed}:scheduling")
    errors = _Errors()
    foliot = logging.getLogger("foliot")
    level, foliot.level = foliot.level, logging.ERROR
    propagate, foliot.propagate = foliot.propagate, False
    foliot.addHandler(errors)
    try:
        calm_since = trio.run(_world, world, ops, clock=MockClock(autojump_threshold=0))
    finally:
        foliot.removeHandler(errors)
        foliot.level, foliot.propagate = level, propagate
    for record in errors.records:
        message = record.getMessage()
        if not any(message.startswith(expected) for expected in _EXPECTED_ERRORS):
            cause = f": {record.exc_info[1]!r}" if record.exc_info and record.exc_info[1] else ""
            world.failures.append(f"foliot logged an error: {message}{cause}")
    violations = check(world, calm_since=calm_since)
    return Result(seed, ops, violations, world, time.perf_counter() - started)


def _checks(result: Result) -> set[str]:
    return {v.check for v in result.violations}


def shrink(result: Result, budget_s: float = 120.0) -> Result:
    """Fewer operations, same seed, still failing a check it failed: halves, then one by one."""
    deadline = time.perf_counter() + budget_s
    wanted = _checks(result)
    best = result
    chunk = max(1, len(best.ops) // 2)
    while chunk >= 1 and time.perf_counter() < deadline:
        i = 0
        shrunk = False
        while i < len(best.ops) and time.perf_counter() < deadline:
            keep = [op.index for j, op in enumerate(best.ops) if not i <= j < i + chunk]
            if not keep:
                i += chunk
                continue
            trial = simulate(result.seed, keep)
            if not trial.ok and _checks(trial) & wanted:
                best, shrunk = trial, True
            else:
                i += chunk
        if not shrunk:
            chunk //= 2
    return best


def report(result: Result) -> str:
    """The seed, how to replay it, what failed, and the history of the runs it names."""
    world = result.world
    ops = ",".join(str(op.index) for op in result.ops)
    lines = [
        f"seed {result.seed}: {len(result.violations)} violation(s)",
        f"  replay: FOLIOT_SIM_SEED={result.seed} FOLIOT_SIM_OPS={ops} pytest tests/sim"
        f"  (or python -m tests.sim --seed {result.seed} --ops {ops})",
        f"  profile: {world.profile}",
        f"  faults injected: {dict(sorted(world.counts.items()))}",
    ]
    lines += [f"  {v}" for v in result.violations[:20]]
    named = {run for v in result.violations for run in v.runs}
    lines.append("  operations:")
    lines += [f"    {op.line()}" for op in result.ops]
    lines.append("  history (ms since the start):")
    entries: list[tuple[int, str]] = [(at, f"{at - T0:>9} -- {what}") for at, what in world.events]
    for call in world.calls:
        args = " ".join(str(v) for v in call.args.values())
        value = str(call.value)
        if call.op >= 0 or not named or any(run in args or run in value for run in named):
            entries.append((call.at, f"{call.line()}"))
    for d in world.deliveries:
        if not named or d.run_id in named:
            entries.append((d.at, f"{d.at - T0:>9} {d.via:<9} {d.key} token={d.token} node={d.incarnation}"))
    for run_id in sorted(named):
        for e in world.store.events.get(run_id, []):
            data = " ".join(f"{k}={v}" for k, v in e.data.items() if v is not None)
            entries.append(
                (e.at, f"{e.at - T0:>9} event     {run_id} #{e.seq} {e.type} {e.step or ''} {data}")
            )
    lines += ["    " + text for _, text in sorted(entries, key=lambda entry: entry[0])[:400]]
    return "\n".join(lines)


def _sweep(first: int, step: int, seconds: float, bare: bool) -> tuple[int, list[int], float]:
    """Seeds first, first + step, ... for `seconds`: (how many, the failing ones, CPU seconds).
    `bare`: with no operations (the floor: a node, its faults and its calm period alone)."""
    started, cpu = time.perf_counter(), time.process_time()
    seed, failed = first, []
    while time.perf_counter() - started < seconds:
        if not simulate(seed, [] if bare else None).ok:
            failed.append(seed)
            print(f"seed {seed}: FAILED", flush=True)
        seed += step
    return (seed - first) // step, failed, time.process_time() - cpu


def _sweeps(first: int, jobs: int, seconds: float, bare: bool) -> tuple[int, list[int], float]:
    if jobs == 1:
        return _sweep(first, 1, seconds, bare)
    with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
        parts = list(
            pool.map(_sweep, range(first, first + jobs), [jobs] * jobs, [seconds] * jobs, [bare] * jobs)
        )
    return sum(p[0] for p in parts), sorted(s for p in parts for s in p[1]), sum(p[2] for p in parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="run consecutive seeds this long")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=1, help="processes running seeds side by side")
    parser.add_argument("--floor", action="store_true", help="also run seeds with no operations, as long")
    parser.add_argument("--seed", type=int, help="run this seed only (and print its history)")
    parser.add_argument("--ops", help="with --seed: only these operations (comma-separated)")
    parser.add_argument("--no-shrink", action="store_true")
    args = parser.parse_args(argv)
    if args.seed is not None:
        keep = [int(i) for i in args.ops.split(",")] if args.ops else None
        result = simulate(args.seed, keep)
        print(report(result) if not result.ok else f"seed {args.seed}: ok ({result.seconds:.2f} s)")
        return 0 if result.ok else 1
    ran, failed, cpu = _sweeps(args.first, args.jobs, args.seconds, bare=False)
    minutes = args.seconds / 60
    print(
        f"{ran} seeds in {args.seconds:.0f} s on {args.jobs} process(es): {ran / minutes:.0f} seeds/minute,"
        f" {cpu * 1000 / max(ran, 1):.0f} ms of CPU per seed, {len(failed)} failed"
    )
    if args.floor:
        bare, _, bare_cpu = _sweeps(args.first, args.jobs, args.seconds, bare=True)
        print(
            f"floor (the same seeds with no operations): {bare / minutes:.0f} seeds/minute,"
            f" {bare_cpu * 1000 / max(bare, 1):.0f} ms of CPU per seed; ratio {ran / max(bare, 1):.2f}"
        )
    for seed in failed:
        result = simulate(seed)
        print(report(result if args.no_shrink else shrink(result)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
