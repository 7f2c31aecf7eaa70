"""A start or signal counts as work (in flight, timed by the latency gate) only from
`Ticket.begin`: once its caller is authenticated and its body read (issue 20: stalled heads
counted from the head on and filled the gate's burst)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.actors.admission import Admission
from foliot.core.config import Settings
from foliot.core.errors import Overloaded


class Dispatcher:
    backlog = 0


def admission(**overrides: Any) -> Admission:
    settings = Settings(admission_target_ms=100, admission_interval_ms=200, **overrides)
    store: Any = object()  # no writer queue
    return Admission(settings, dispatcher=Dispatcher(), store=store)  # type: ignore[arg-type]


async def test_a_request_not_yet_read_holds_no_capacity(autojump_clock: MockClock) -> None:
    adm = admission(max_inflight_requests=2)
    with adm.admit("a"), adm.admit("a"), adm.admit("a"):  # three heads, no body read yet
        assert adm.inflight == 0
        with adm.admit("b") as ticket:  # another app's request is let in
            ticket.begin()
            assert (adm.inflight, adm.admitted) == (1, 1)
            await trio.sleep(0.3)
    assert (adm.inflight, adm.admitted) == (0, 1)  # the three never read were never work


async def test_the_burst_bound_counts_only_what_was_read(autojump_clock: MockClock) -> None:
    adm = admission()
    burst = adm.gate.burst
    held = [adm.admit("a") for _ in range(burst)]
    for ctx in held:
        ctx.__enter__()  # stalled: never read
    with adm.admit("b") as ticket:  # not refused: the stalled ones are not work
        ticket.begin()
    tickets = [adm.admit("b") for _ in range(burst)]
    for ctx in tickets:
        ctx.__enter__().begin()
    with pytest.raises(Overloaded) as refused, adm.admit("b"):  # what was read does count
        pass
    assert refused.value.reason == "latency"
    for ctx in tickets + held:
        ctx.__exit__(None, None, None)
    assert adm.inflight == 0
