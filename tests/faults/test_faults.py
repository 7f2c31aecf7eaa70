"""The bounded fault suite: real `foliot serve` processes under a seeded schedule of faults,
a workload that logs every operation it invokes with its outcome, and the history checker
(tests/faults/checker.py) on what the engine holds once every fault is healed.

One scenario per configuration, each a few tens of seconds of faults (bench/faults.py runs the
same for as long as asked, per fault class). A failure prints the seed, the shortest histories
of the violations, and the servers' logs. The seeds are fixed: the schedule (which fault,
which node, how long) is the seed's; the moments on a loaded machine vary, the verdict must
not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import (
    FAULTS_CLUSTER,
    FAULTS_POSTGRES,
    FAULTS_SQLITE,
    TTL_MS,
    Result,
    Scenario,
    playable,
    run_scenario,
)

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def verdict(result: Result, classes: tuple[str, ...]) -> None:
    print(
        f"\n{result.config.store} seed {result.config.seed}: injected {dict(result.injected)}; "
        f"{len(result.history.ops)} operations, {result.report.counts}; {'; '.join(result.notes)}"
    )
    for measure in result.measures:
        print(f"  {measure}")
    if not result.report.ok:
        print(result.server_logs())
    assert result.report.ok, result.render()
    assert set(result.injected) == set(classes), result.injected  # every class was played
    acked = {op["f"] for op in result.history.ops if op["type"] == "ok"}
    assert {"start", "signal", "complete"} <= acked, acked


async def test_sqlite_under_kill_pause_a_faulty_handler_a_full_disk_and_a_stepped_clock(
    tmp_path: Path,
) -> None:
    classes = playable(FAULTS_SQLITE)
    result = await run_scenario(
        Scenario(store="sqlite", seed=11, faults=classes, duration_s=20, items=30, workdir=tmp_path)
    )
    verdict(result, classes)


@pytest.mark.postgres
async def test_postgres_under_restarts_outages_and_a_faulty_network(tmp_path: Path) -> None:
    # The stepped clock is the SQLite scenario's (the engine's clock is the same on both
    # stores; its two restarts would cost this one 20 s more).
    classes = tuple(c for c in playable(FAULTS_POSTGRES) if c != "clock")
    result = await run_scenario(
        Scenario(
            store="postgres",
            seed=12,
            faults=classes,
            duration_s=30,
            items=40,
            fault_gap_s=(0.5, 1.5),
            workdir=tmp_path,
        )
    )
    verdict(result, classes)


@pytest.mark.postgres
async def test_three_nodes_under_partitions_kills_and_pauses(tmp_path: Path) -> None:
    classes = ("db_partition", "peer_partition", "kill", "pause", "db_reset")
    result = await run_scenario(
        Scenario(
            store="cluster",
            seed=13,
            faults=classes,
            duration_s=30,
            items=40,
            fault_gap_s=(0.5, 1.5),
            workdir=tmp_path,
        )
    )
    verdict(result, classes)
    # A node cut off from PostgreSQL stops serving within its lease (then it acts on nothing:
    # the fencing audit and the pushes' lease check above found no act of it past its lease).
    cut = [m["s"] for m in result.measures if m["what"] == "unready_after_cut_s"]
    assert cut and max(cut) <= TTL_MS / 1000, cut
    # One cut off from its peers keeps serving the runs it owns.
    own = [m["answer"] for m in result.measures if m["what"] == "own_run_while_cut"]
    assert own and set(own) == {200}, own


assert set(FAULTS_CLUSTER) >= {"db_partition", "peer_partition", "kill", "pause", "db_reset"}
