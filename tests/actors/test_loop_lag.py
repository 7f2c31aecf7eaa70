"""`Admission.watch_lag` under MockClock: the event loop's lag is probed only while starts or
signals arrive (an idle node has no periodic wake-up), a late loop is measured, and with
`FOLIOT_ADMISSION_LAG_MS` set it makes the gate shed and shrink its limit."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from foliot.actors.admission import Admission
from foliot.core.config import Settings

from .conftest import advance


def admission(lag_ms: int = 0) -> Admission:
    settings = Settings(admission_target_ms=100, admission_interval_ms=200, admission_lag_ms=lag_ms)
    store: Any = object()  # no writer queue
    return Admission(settings, dispatcher=None, store=store)  # type: ignore[arg-type]


async def test_the_probe_runs_only_while_starts_or_signals_arrive(autojump_clock: MockClock) -> None:
    adm = admission()
    async with trio.open_nursery() as nursery:
        await nursery.start(adm.watch_lag)
        await advance(3600)  # idle: parked, no wake-up at all
        assert adm.lag_probes == 0
        assert adm.shed() is None  # a start or signal arrives
        await advance(0.5)
        assert 9 <= adm.lag_probes <= 11  # every 50 ms
        await advance(3600)  # idle again: it parks once a second has gone by
        assert adm.lag_probes <= 10 + 1.0 / 0.05 + 2
        assert adm.gate.last_lag_s == 0.0 and not adm.gate.shedding
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("lag_ms", "sheds"), [(0, False), (100, True)])
async def test_a_late_loop_is_measured_and_sheds_only_with_a_lag_bound(
    mock_clock: MockClock, lag_ms: int, sheds: bool
) -> None:
    adm = admission(lag_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(adm.watch_lag)
        for _ in range(10):  # a second of signals while the loop runs 300 ms late
            assert adm.gate.shedding or adm.shed() is None
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(0.35)  # the process was not scheduled for 300 ms past the wake-up
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert adm.gate.last_lag_s >= 0.25
    assert adm.gate.shedding is sheds
    assert (adm.gate.scale < 1.0) is sheds
