"""The admission as the front door's thread asks it (`Admission.door_refusal`, time passed in),
and a start or signal the door let in is not put to the latency gate a second time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trio.testing import MockClock

from foliot.actors.admission import DOOR_ADMITTED, Admission
from foliot.core.config import Settings
from foliot.core.errors import Overloaded


class Dispatcher:
    backlog = 0


def admission() -> Admission:
    settings = Settings(admission_target_ms=100, admission_interval_ms=200)
    store: Any = object()  # no writer queue
    return Admission(settings, dispatcher=Dispatcher(), store=store)  # type: ignore[arg-type]


def test_the_door_lets_a_burst_in_then_refuses_what_would_queue() -> None:
    adm = admission()
    burst = adm.gate.burst
    for _ in range(burst):
        assert adm.door_refusal(0.0) is None
        adm.door_forward()
    assert adm.door_pending == burst
    refusal = adm.door_refusal(0.01)
    assert refusal is not None
    status, retry_after, body = refusal
    error = json.loads(body)["error"]
    assert (status, retry_after, error["code"], error["reason"]) == (429, 1, "overloaded", "latency")
    assert error["retryAfter"] == 1
    assert adm.refused["latency"] == 1
    adm.door_answer()  # one answered: room for one more
    assert adm.door_refusal(0.02) is None


def test_while_shedding_the_door_counts_what_it_let_in_as_in_flight() -> None:
    adm = admission()
    adm.gate.shedding = True  # limit: the floor (no throughput measured yet)
    limit = adm.gate.limit
    assert limit is not None
    for _ in range(limit):
        assert adm.door_refusal(0.0) is None
        adm.door_forward()
    assert adm.door_refusal(0.0) is not None  # none served yet (inflight 0): the door's count


async def test_a_start_or_signal_the_door_let_in_is_not_gated_again(autojump_clock: MockClock) -> None:
    adm = admission()
    adm.gate.shedding = True
    adm.inflight = 100  # far past the gate's limit, under FOLIOT_MAX_INFLIGHT_REQUESTS
    with pytest.raises(Overloaded):
        adm.check("shop")
    token = DOOR_ADMITTED.set(True)
    try:
        adm.check("shop")  # the door asked the gate when it let this one in
        adm.inflight = adm.max_inflight
        with pytest.raises(Overloaded) as caught:  # the other bounds still hold
            adm.check("shop")
        assert caught.value.reason == "inflight"
    finally:
        DOOR_ADMITTED.reset(token)
