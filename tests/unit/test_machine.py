"""The pure step machine, exhaustively: no Trio, no sockets, no database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.machine import Accepted, Completed, Failed, classify_response
from foliot.core.workflow.model import TERMINAL_STATUSES, run_to_dict

from .machine_kit import T0, Kit

TASK = {"name": "t", "type": "task"}


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b'{"a":1}', Completed({"a": 1})),
        (200, b"", Completed(None)),
        (200, b"  \n", Completed(None)),
        (201, b"[1,2]", Completed([1, 2])),
        (204, b"", Completed(None)),
        (200, b"null", Completed(None)),
        (200, b"not json", Failed("invalid_output", "the handler's answer is not JSON", False)),
        (200, b"NaN", Failed("invalid_output", "the handler's answer is not JSON", False)),
        (200, b"\xff\xfe", Failed("invalid_output", "the handler's answer is not JSON", False)),
        (202, b"", Accepted()),
        (202, b'{"ignored":true}', Accepted()),
        (408, b"", Failed("http_408", "the handler answered 408", True)),
        (429, b"", Failed("http_429", "the handler answered 429", True)),
        (400, b"", Failed("http_400", "the handler answered 400", False)),
        (401, b"", Failed("http_401", "the handler answered 401", False)),
        (404, b"oops", Failed("http_404", "the handler answered 404", False)),
        (422, b"", Failed("http_422", "the handler answered 422", False)),
        (500, b"", Failed("http_500", "the handler answered 500", True)),
        (503, b"<html>", Failed("http_503", "the handler answered 503", True)),
        (302, b"", Failed("http_302", "the handler answered 302", False)),
        (
            503,
            b'{"error":{"class":"busy","message":"later","retryable":false}}',
            Failed("busy", "later", False),
        ),
        (
            400,
            b'{"error":{"class":"card_declined"}}',
            Failed("card_declined", "the handler answered 400", False),
        ),
        (400, b'{"error":{"retryable":true}}', Failed("http_400", "the handler answered 400", True)),
        (
            500,
            b'{"error":{"class":7,"retryable":"yes"}}',
            Failed("http_500", "the handler answered 500", True),
        ),
        (500, b'{"error":"text"}', Failed("http_500", "the handler answered 500", True)),
    ],
)
def test_classification_table(status: int, body: bytes, expected: machine.Outcome) -> None:
    assert classify_response(status, body, None) == expected


def test_foliot_next_header_is_carried() -> None:
    assert classify_response(200, b"{}", "ship") == Completed({}, "ship")


def test_connection_and_timeout_failures_are_retryable() -> None:
    assert machine.connection_failure("refused") == Failed("connection_error", "refused", True)
    assert machine.timeout_failure().cls == "timeout"
    assert machine.timeout_failure().retryable


# --------------------------------------------------------------------------- tasks and retries


def test_task_step_dispatches_and_completes() -> None:
    k = Kit([TASK])
    tr = k.start({"x": 1})
    assert k.run.status == "running" and k.run.current_step == "t" and k.run.attempt == 1
    # A push attempt has no deadline until the dispatcher sends it (send time + timeout).
    assert k.run.task is not None and k.run.task.deadline is None and k.run.timer is None
    assert tr.effects == (machine.Dispatch(k.run.task, "/foliot/wf/t", 30_000),)
    assert tr.events[-1].data["deadline"] is None
    assert [t.status for t in tr.tasks] == ["open"]
    assert k.run.task.idempotency_key("run1") == "run1:1:t:1"
    tr = k.ok({"done": True})
    assert k.run.status == "completed" and k.run.state == {"t": {"done": True}}
    assert k.run.closed_at == T0 and k.run.task is None and k.run.timer is None
    assert [t.close_reason for t in tr.tasks] == ["answered"]
    assert k.events() == [
        "run_started",
        "step_started",
        "task_dispatched",
        "task_completed",
        "step_completed",
        "run_completed",
    ]
    assert [e.seq for tr in k.history for e in tr.events] == list(range(1, 7))
    assert all(e.generation == 1 for tr in k.history for e in tr.events)


def test_backoff_arithmetic() -> None:
    retry = {"maxAttempts": 6, "initialInterval": "1s", "backoffCoefficient": 3.0, "maxInterval": "20s"}
    k = Kit([{**TASK, "retry": retry}])
    k.start()
    delays = []
    for attempt in range(1, 6):
        assert k.run.attempt == attempt
        k.fail()
        assert k.run.status == "running" and k.run.task is None
        assert k.run.timer is not None and k.run.timer.kind == "retry"
        delays.append(k.run.timer.due - k.now)
        k.fire()
    assert delays == [1_000, 3_000, 9_000, 20_000, 20_000]
    keys = [e.data["idempotencyKey"] for tr in k.history for e in tr.events if e.type == "task_dispatched"]
    assert keys == [f"run1:1:t:{n}" for n in range(1, 7)]
    assert len(set(keys)) == 6
    k.fail()
    assert k.run.status == "failed"
    assert k.run.error is not None and k.run.error.cls == "boom" and k.run.error.step == "t"


def test_default_retry_policy() -> None:
    k = Kit([TASK])
    k.start()
    k.fail()
    assert k.run.timer is not None and k.run.timer.due - k.now == 1_000
    k.fire()
    k.fail()
    assert k.run.timer is not None and k.run.timer.due - k.now == 2_000
    k.fire()
    k.fail()
    assert k.run.status == "failed" and k.events().count("task_dispatched") == 3


def test_defaults_apply_per_field() -> None:
    k = Kit(
        [{**TASK, "retry": {"initialInterval": "5s"}}],
        defaults={"timeout": "10s", "retry": {"maxAttempts": 2, "initialInterval": "1s"}},
    )
    step = k.definition.step("t")
    assert step.timeout_ms == 10_000
    assert step.retry is not None
    assert (step.retry.max_attempts, step.retry.initial_interval_ms) == (2, 5_000)


def test_max_attempts_one_means_no_retry() -> None:
    k = Kit([{**TASK, "retry": {"maxAttempts": 1}}])
    k.start()
    k.fail()
    assert k.run.status == "failed"


def test_non_retryable_fails_at_once() -> None:
    k = Kit([TASK])
    k.start()
    k.fail(retryable=False)
    assert k.run.status == "failed" and k.events().count("task_dispatched") == 1


def test_retry_on_filters_classes() -> None:
    k = Kit([{**TASK, "retry": {"maxAttempts": 5, "retryOn": ["http_503", "busy"]}}])
    k.start()
    k.fail("busy")
    assert k.run.timer is not None and k.run.timer.kind == "retry"
    k.fire()
    k.fail("http_503")
    k.fire()
    k.fail("http_500")
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "http_500"


def test_deadline_times_out_the_attempt_and_retries() -> None:
    k = Kit([{**TASK, "timeout": "5s", "retry": {"maxAttempts": 2}}])
    k.start()
    first = k.token
    k.answer(Accepted(deadline=k.now + 5_000))
    tr = k.fire()
    assert "task_timed_out" in [e.type for e in tr.events]
    assert [t.close_reason for t in tr.tasks] == ["timed_out"]
    assert k.run.timer is not None and k.run.timer.kind == "retry"
    k.fire()
    assert k.token != first and k.run.attempt == 2
    # The first attempt's answer now changes nothing.
    tr = k.answer(Completed({"late": True}), token=first)
    assert not tr.changed and tr.reply == machine.Rejected(409, "task_closed", tr.reply.message)  # type: ignore[union-attr]
    k.answer(machine.timeout_failure())  # a synchronous push that passed its deadline
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "timeout"


def test_a_queued_push_has_no_deadline_timer_to_expire() -> None:
    """However long a push waits behind others, nothing times it out before it is sent."""
    k = Kit([{**TASK, "timeout": "5s"}])
    k.start()
    assert k.run.timer is None and k.run.task is not None and k.run.task.deadline is None
    k.now += 3_600_000  # an hour in the dispatcher's queue
    tr = k.ok({"late": "but fine"})
    assert k.run.status == "completed" and "task_timed_out" not in k.events()
    assert [t.close_reason for t in tr.tasks] == ["answered"]


def test_accepted_keeps_the_task_open_until_its_deadline() -> None:
    k = Kit([{**TASK, "timeout": "1m", "retry": {"maxAttempts": 1}}])
    k.start()
    sent = k.now + 40_000  # the push left the dispatcher's queue 40 s after the attempt began
    k.now = sent + 200
    tr = k.answer(Accepted(deadline=sent + 60_000))
    assert k.run.task is not None and k.run.task.accepted and k.run.task.deadline == sent + 60_000
    assert k.run.timer is not None and (k.run.timer.kind, k.run.timer.due) == ("task_deadline", sent + 60_000)
    assert [e.type for e in tr.events] == ["task_accepted"]
    assert tr.events[0].data["deadline"] == sent + 60_000
    assert [(t.status, t.deadline) for t in tr.tasks] == [("open", sent + 60_000)]
    assert not k.answer(Accepted(deadline=sent + 99_000)).changed
    tr = k.fire()
    assert tr.events[0].at == sent + 60_000 and tr.events[0].type == "task_timed_out"
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "timeout"


def test_accepted_without_a_deadline_counts_from_the_answer() -> None:
    k = Kit([{**TASK, "timeout": "1m"}])
    k.start()
    k.now += 5_000
    k.answer(Accepted())
    assert k.run.timer is not None and k.run.timer.due == k.now + 60_000


def test_accepted_then_completed_out_of_band() -> None:
    k = Kit([TASK, {"name": "u", "type": "task"}])
    k.start()
    k.answer(Accepted())
    k.answer(Completed({"ok": 1}), via_api=True)
    assert k.run.current_step == "u" and k.run.state == {"t": {"ok": 1}}


# --------------------------------------------------------------------------- next, sentinels, onFailure


def test_next_defaults_and_sentinels() -> None:
    k = Kit([{**TASK, "next": "c"}, {"name": "b", "type": "task"}, {"name": "c", "type": "task"}])
    k.start()
    k.ok()
    assert k.run.current_step == "c"
    k.ok()
    assert k.run.status == "completed"


@pytest.mark.parametrize(
    ("sentinel", "status", "cls"),
    [
        ("$end", "completed", None),
        ("$fail", "failed", "failed_by_definition"),
        ("$stuck", "stuck", "stuck_by_definition"),
    ],
)
def test_sentinels(sentinel: str, status: str, cls: str | None) -> None:
    k = Kit([{**TASK, "next": sentinel}, {"name": "never", "type": "task"}])
    k.start()
    k.ok(1)
    assert k.run.status == status
    assert (k.run.error.cls if k.run.error else None) == cls
    assert (k.run.closed_at is not None) == (status in TERMINAL_STATUSES)


def test_foliot_next_picks_the_step() -> None:
    k = Kit([TASK, {"name": "a", "type": "task"}, {"name": "b", "type": "task"}])
    k.start()
    k.ok("x", next="b")
    assert k.run.current_step == "b"
    tr = k.answer(Completed(None, "$end"))
    assert k.run.status == "completed"
    assert [e.data.get("next") for e in tr.events if e.type == "task_completed"] == ["$end"]


def test_invalid_next_fails_without_retry() -> None:
    k = Kit([{**TASK, "retry": {"maxAttempts": 5}}])
    k.start()
    k.ok("x", next="nowhere")
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.cls == "invalid_next" and "t" not in k.run.state


def test_invalid_next_via_api_answers_400_and_fails_the_step() -> None:
    k = Kit([{**TASK, "onFailure": "comp"}, {"name": "comp", "type": "task"}])
    k.start()
    tr = k.answer(Completed(1, "nowhere"), via_api=True)
    assert (
        isinstance(tr.reply, machine.Rejected) and tr.reply.status == 400 and tr.reply.code == "invalid_next"
    )
    assert tr.changed and k.run.current_step == "comp"


def test_on_failure_carries_the_error_into_the_next_task() -> None:
    k = Kit(
        [
            {**TASK, "retry": {"maxAttempts": 1}, "onFailure": "comp"},
            {"name": "comp", "type": "task", "next": "$fail"},
        ]
    )
    k.start()
    k.fail("card_declined", message="no funds")
    assert k.run.current_step == "comp"
    assert k.run.carried_error is not None and k.run.carried_error.to_json() == {
        "step": "t",
        "class": "card_declined",
        "message": "no funds",
    }
    k.ok()
    assert k.run.status == "failed" and k.run.error is not None
    assert (k.run.error.cls, k.run.error.compensated_by) == ("card_declined", "comp")


LIMIT = 1000


def _sized(n: int) -> str:
    return "x" * (n - 2)  # a JSON string of n bytes


@pytest.mark.parametrize("via_api", [False, True])
def test_output_at_the_limit_is_stored(via_api: bool) -> None:
    k = Kit([TASK], payload_max=LIMIT)
    k.start()
    tr = k.answer(Completed(_sized(LIMIT)), via_api=via_api)
    assert k.run.status == "completed" and tr.reply == machine.Ok()


@pytest.mark.parametrize("via_api", [False, True])
def test_output_over_the_limit_without_on_failure(via_api: bool) -> None:
    k = Kit([{**TASK, "retry": {"maxAttempts": 5}}], payload_max=LIMIT)
    k.start()
    tr = k.answer(Completed(_sized(LIMIT + 1)), via_api=via_api)
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.cls == "output_too_large" and "'t'" in k.run.error.message
    assert k.events().count("task_dispatched") == 1  # not retried
    if via_api:
        assert isinstance(tr.reply, machine.Rejected) and (tr.reply.status, tr.reply.code) == (
            400,
            "output_too_large",
        )
    else:
        assert tr.reply == machine.Ok()


def test_output_over_the_limit_with_on_failure() -> None:
    k = Kit([{**TASK, "onFailure": "comp"}, {"name": "comp", "type": "task"}], payload_max=LIMIT)
    k.start()
    k.ok("\u2028" * 333)  # 999 bytes of U+2028 plus quotes: 1001 > 1000
    assert k.run.current_step == "comp" and k.run.status == "running"
    assert k.run.carried_error is not None and k.run.carried_error.cls == "output_too_large"
    assert "t" not in k.run.state


# --------------------------------------------------------------------------- sleep


def test_sleep_duration() -> None:
    k = Kit([{"name": "s", "type": "sleep", "duration": "14d"}, TASK])
    k.start()
    assert k.run.status == "sleeping" and k.run.wake_at == T0 + 14 * 86_400_000
    assert not k.send(machine.TimerFired("step", "sleep", "stale"), after_ms=1).changed
    k.fire()
    assert k.run.current_step == "t" and k.run.status == "running"
    assert "sleep_finished" in k.events() and "s" not in k.run.state


def test_sleep_until_past_continues_at_once() -> None:
    k = Kit([{"name": "s", "type": "sleep", "until": "2000-01-01T00:00:00Z"}, TASK])
    k.start()
    assert k.run.current_step == "t"
    assert k.events()[:5] == [
        "run_started",
        "step_started",
        "sleep_started",
        "sleep_finished",
        "step_completed",
    ]


def test_sleep_until_path() -> None:
    k = Kit([{"name": "s", "type": "sleep", "untilPath": "input.at"}])
    k.start({"at": "2028-01-01T00:00:00.000Z"})
    assert k.run.status == "sleeping" and k.run.wake_at == 1_830_297_600_000
    bad = Kit([{"name": "s", "type": "sleep", "untilPath": "input.at"}])
    bad.start({"at": "soon"})
    assert bad.run.status == "failed" and bad.run.error is not None and bad.run.error.cls == "invalid_sleep"


# --------------------------------------------------------------------------- wait and signals


WAIT = {"name": "w", "type": "wait", "signal": "go"}


def test_wait_delivers() -> None:
    k = Kit([WAIT, TASK])
    k.start()
    assert k.run.status == "waiting" and k.run.wait_signal == "go" and k.run.wake_at is None
    tr = k.send(machine.SignalIn("go", {"n": 1}))
    assert tr.reply == machine.Ok("delivered")
    assert k.run.state == {"w": {"n": 1}} and k.run.current_step == "t"


def test_signals_buffer_fifo_per_name_and_are_never_dropped() -> None:
    k = Kit(
        [
            TASK,
            WAIT,
            {"name": "w2", "type": "wait", "signal": "go"},
            {"name": "w3", "type": "wait", "signal": "other"},
        ]
    )
    k.start()
    for payload in (1, 2):
        assert k.send(machine.SignalIn("go", payload)).reply == machine.Ok("buffered")
    assert k.send(machine.SignalIn("other", "o")).reply == machine.Ok("buffered")
    assert k.send(machine.SignalIn("unused", "u")).reply == machine.Ok("buffered")
    k.ok()
    assert k.run.state == {"t": None, "w": 1, "w2": 2, "w3": "o"}
    assert k.run.status == "completed"
    assert [s.name for s in k.run.buffer] == ["unused"]


def test_signal_of_another_name_while_waiting_is_buffered() -> None:
    k = Kit([WAIT])
    k.start()
    assert k.send(machine.SignalIn("nope")).reply == machine.Ok("buffered")
    assert k.run.status == "waiting"


def test_signal_ids_are_handed_to_the_store_and_buffered_ones_deduped_here() -> None:
    """The machine names the signalIds a transition takes (the store's unique key refuses a
    second one: tests/actors/test_signal_limits.py); one still in the buffer it knows itself."""
    k = Kit([TASK, WAIT, {"name": "w2", "type": "wait", "signal": "go"}])
    k.start()
    first = k.send(machine.SignalIn("go", 1, "s1"))
    assert first.reply == machine.Ok("buffered") and first.signal_ids == ("s1",)
    tr = k.send(machine.SignalIn("go", 2, "s1"))
    assert tr.reply == machine.Ok("duplicate") and not tr.changed and tr.signal_ids == ()
    k.ok()
    assert k.run.status == "waiting" and k.run.current_step == "w2"
    delivered = k.send(machine.SignalIn("go", 4, "s2"))
    assert delivered.reply == machine.Ok("delivered") and delivered.signal_ids == ("s2",)
    assert k.run.state["w2"] == 4
    assert k.send(machine.SignalIn("go", 5)).signal_ids == ()
    assert "signal_ids" not in run_to_dict(k.run)  # dedupe ids stay out of the document


def test_a_signal_id_holding_nul_is_refused() -> None:
    k = Kit([WAIT])
    k.start()
    tr = k.send(machine.SignalIn("go", None, "a\x00b"))
    assert tr.reply == machine.Rejected(
        400, "invalid_request", "signalId: must not contain U+0000", "signalId"
    )
    assert not tr.changed


def test_signal_to_a_closed_run() -> None:
    k = Kit([TASK])
    k.start()
    k.send(machine.SignalIn("go", None, "s1"))
    k.ok()
    tr = k.send(machine.SignalIn("go"))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "run_closed" and not tr.changed
    # A retry of a signal still buffered in the closed run is a duplicate, not an error (one
    # consumed earlier is found in the store by the actor: tests/actors/test_signal_limits.py).
    assert k.send(machine.SignalIn("go", None, "s1")).reply == machine.Ok("duplicate")


def test_buffer_is_bounded_in_count_and_refusals_change_nothing() -> None:
    k = Kit([TASK, WAIT], buffer_max=3)
    k.start()
    for i in range(3):
        assert k.send(machine.SignalIn("other", i, f"id{i}")).reply == machine.Ok("buffered")
    before = k.run
    tr = k.send(machine.SignalIn("other", 3, "id3"))
    assert isinstance(tr.reply, machine.Rejected)
    assert (tr.reply.status, tr.reply.code) == (409, "signal_buffer_full")
    assert not tr.changed and tr.run == before and tr.events == () and tr.signal_ids == ()
    # A retry of one already buffered is still a duplicate, full or not.
    assert k.send(machine.SignalIn("other", 0, "id0")).reply == machine.Ok("duplicate")
    # A signal the run waits for is delivered, never refused, however full the buffer.
    k.ok()
    assert k.run.status == "waiting"
    assert k.send(machine.SignalIn("go", "paid", "g")).reply == machine.Ok("delivered")
    assert k.run.status == "completed" and k.run.state["w"] == "paid"
    assert len(k.run.buffer) == 3


def test_buffer_is_bounded_in_bytes() -> None:
    k = Kit([WAIT], buffer_max_bytes=100)
    k.start()
    assert k.send(machine.SignalIn("other", "x" * 40)).reply == machine.Ok("buffered")  # 42 bytes
    assert k.send(machine.SignalIn("other", "y" * 40)).reply == machine.Ok("buffered")  # 84
    tr = k.send(machine.SignalIn("other", "z" * 20))  # 106 > 100
    assert isinstance(tr.reply, machine.Rejected)
    assert (tr.reply.status, tr.reply.code) == (413, "signal_buffer_too_large") and not tr.changed
    assert k.send(machine.SignalIn("other", "z" * 14)).reply == machine.Ok("buffered")  # exactly 100
    assert k.send(machine.SignalIn("go", "w" * 500)).reply == machine.Ok("delivered")


def test_the_document_stays_bounded_under_a_flood_of_big_signals() -> None:
    """Defect 8: 30 buffered 250 KB signals made a 7.5 MB run document."""
    k = Kit([WAIT])
    k.start()
    big = "s" * 250_000
    replies = [k.send(machine.SignalIn("other", big, f"sig-{i}")).reply for i in range(30)]
    assert replies[:4] == [machine.Ok("buffered")] * 4
    assert all(isinstance(r, machine.Rejected) and r.status == 413 for r in replies[4:])
    assert len(json.dumps(run_to_dict(k.run))) < 1_048_576 + 10_000


def test_wait_timeout_without_on_timeout_fails() -> None:
    k = Kit([{**WAIT, "timeout": "2d"}])
    k.start()
    assert k.run.wake_at == T0 + 2 * 86_400_000
    k.fire()
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "wait_timeout"


def test_wait_timeout_with_on_timeout() -> None:
    k = Kit([{**WAIT, "timeout": "2d", "onTimeout": "comp"}, {"name": "comp", "type": "task"}])
    k.start()
    k.fire()
    assert k.run.current_step == "comp" and "wait_timed_out" in k.events()


def test_signal_after_timeout_fired_is_buffered_not_lost() -> None:
    k = Kit([{**WAIT, "timeout": "1s", "onTimeout": "t"}, TASK])
    k.start()
    k.fire()
    assert k.send(machine.SignalIn("go")).reply == machine.Ok("buffered")


# --------------------------------------------------------------------------- choice


def test_choice_first_match_default_and_stuck() -> None:
    steps = [
        {
            "name": "c",
            "type": "choice",
            "choices": [
                {"when": {"path": "input.n", "op": "gt", "value": 10}, "next": "big"},
                {"when": {"path": "input.n", "op": "gt", "value": 5}, "next": "mid"},
            ],
            "default": "small",
        },
        {"name": "big", "type": "task", "next": "$end"},
        {"name": "mid", "type": "task", "next": "$end"},
        {"name": "small", "type": "task", "next": "$end"},
    ]
    for n, where in ((11, "big"), (6, "mid"), (1, "small")):
        k = Kit(steps)
        k.start({"n": n})
        assert k.run.current_step == where
    no_default = [{**steps[0], "default": None}, *steps[1:]]
    no_default[0] = {k: v for k, v in no_default[0].items() if v is not None}
    k = Kit(no_default)
    k.start({"n": 1})
    assert k.run.status == "stuck" and k.run.error is not None and k.run.error.cls == "no_choice_matched"
    assert k.run.closed_at is None


def test_choice_loop_parks_as_stuck() -> None:
    k = Kit(
        [
            {
                "name": "c",
                "type": "choice",
                "choices": [{"when": {"path": "input.x", "op": "exists", "value": False}, "next": "c"}],
            }
        ]
    )
    k.start()
    assert k.run.status == "stuck" and k.run.error is not None and k.run.error.cls == "loop_detected"


# --------------------------------------------------------------------------- run timeout, stale timers


def test_run_timeout_closes_the_run_and_its_task() -> None:
    k = Kit([TASK], runTimeout="1h")
    k.start()
    assert k.run.deadline == T0 + 3_600_000
    token = k.token
    tr = k.fire_run_timeout()
    assert k.run.status == "timed_out" and k.run.error is not None and k.run.error.cls == "run_timeout"
    assert [type(e) for e in tr.effects] == [machine.Abort]
    assert [t.close_reason for t in tr.tasks] == ["superseded"]
    assert not k.answer(Completed(1), token=token).changed


def test_run_timeout_from_the_start_request_wins() -> None:
    k = Kit([TASK], runTimeout="1h")
    k.start(run_timeout_ms=5_000)
    assert k.run.deadline == T0 + 5_000


def test_timers_of_a_closed_run_are_ignored() -> None:
    k = Kit([{"name": "s", "type": "sleep", "duration": "1s"}])
    k.start()
    timer = k.run.timer
    assert timer is not None
    k.send(machine.Cancel("x"))
    assert not k.send(machine.TimerFired("step", timer.kind, timer.key)).changed
    assert k.run.timers() == []


# --------------------------------------------------------------------------- pull tasks


QUEUED = {"name": "t", "type": "task", "queue": "warehouse", "timeout": "1m"}


def test_queued_task_has_no_deadline_until_claimed() -> None:
    k = Kit([QUEUED])
    k.start()
    assert k.run.task is not None and k.run.task.deadline is None and k.run.timer is None
    assert not k.send(machine.Heartbeat(k.token)).changed
    tr = k.send(machine.Claim(k.token, "w1"), after_ms=5_000)
    assert isinstance(tr.reply, machine.Ok) and k.run.task.deadline == T0 + 5_000 + 60_000
    assert not k.send(machine.Claim(k.token, "w2")).changed  # one poller only
    tr = k.send(machine.Heartbeat(k.token), after_ms=30_000)
    assert k.run.task.deadline == T0 + 35_000 + 60_000
    assert k.run.timer is not None and k.run.timer.due == k.run.task.deadline


def test_heartbeat_on_a_closed_task() -> None:
    k = Kit([TASK])
    k.start()
    token = k.token
    k.ok()
    tr = k.send(machine.Heartbeat(token))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "task_closed"


# --------------------------------------------------------------------------- interventions


def _at(situation: str) -> Kit:
    """A run in a named situation, for the intervention matrix."""
    steps: list[dict[str, Any]] = [
        {"name": "t", "type": "task", "retry": {"maxAttempts": 2}},
        {"name": "w", "type": "wait", "signal": "go", "timeout": "1h"},
        {"name": "s", "type": "sleep", "duration": "1h"},
        {
            "name": "c",
            "type": "choice",
            "choices": [{"when": {"path": "input.x", "op": "exists", "value": True}, "next": "$end"}],
        },
    ]
    k = Kit(steps, runTimeout="1d")
    k.start()
    if situation == "running_task":
        return k
    if situation == "running_backoff":
        k.fail()
        return k
    if situation == "failed_task":
        k.fail(retryable=False)
        return k
    k.ok({"r": 1})
    if situation == "waiting":
        return k
    if situation == "timed_out":
        k.fire_run_timeout()
        return k
    if situation == "cancelled":
        k.send(machine.Cancel())
        return k
    if situation == "failed_wait":
        k.fire()
        return k
    k.send(machine.SignalIn("go"))
    if situation == "sleeping":
        return k
    k.fire()
    if situation == "stuck_choice":
        return k
    raise AssertionError(situation)


SITUATIONS = {
    "running_task": "running",
    "running_backoff": "running",
    "failed_task": "failed",
    "waiting": "waiting",
    "sleeping": "sleeping",
    "stuck_choice": "stuck",
    "failed_wait": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
}

# situation -> which interventions are allowed
MATRIX = {
    "running_task": {"cancel", "rewind", "skip", "edit"},
    "running_backoff": {"cancel", "rewind", "skip", "edit"},
    "failed_task": {"redrive", "rewind", "skip", "edit"},
    "waiting": {"cancel", "rewind", "skip", "edit"},
    "sleeping": {"cancel", "rewind", "skip", "edit"},
    "stuck_choice": {"cancel", "redrive", "rewind", "edit"},
    "failed_wait": {"redrive", "rewind", "skip", "edit"},
    "timed_out": {"redrive", "rewind", "edit"},
    "cancelled": set(),
}

INTERVENTIONS: dict[str, machine.Message] = {
    "cancel": machine.Cancel("r"),
    "redrive": machine.Redrive("r"),
    "rewind": machine.Rewind("t", reason="r"),
    "skip": machine.Skip({"manual": True}, "r"),
    "edit": machine.EditState({"k": 1}, (), "r"),
}


@pytest.mark.parametrize("situation", list(SITUATIONS))
def test_situations_are_what_they_say(situation: str) -> None:
    assert _at(situation).run.status == SITUATIONS[situation]


@pytest.mark.parametrize("situation", list(SITUATIONS))
@pytest.mark.parametrize("action", list(INTERVENTIONS))
def test_intervention_matrix(situation: str, action: str) -> None:
    k = _at(situation)
    before = k.run
    # What the console offers (`machine.accepts`) is what the machine accepts.
    assert machine.accepts(before, "state" if action == "edit" else action, k.definition) == (
        action in MATRIX[situation]
    )
    tr = k.send(INTERVENTIONS[action])
    if action in MATRIX[situation]:
        assert isinstance(tr.reply, machine.Ok), tr.reply
        assert tr.changed
    else:
        assert isinstance(tr.reply, machine.Rejected) and tr.reply.status == 409
        assert tr.reply.code == "invalid_status"
        assert not tr.changed and tr.run == before


PAUSE_MESSAGES: dict[str, machine.Message] = {
    **INTERVENTIONS,
    "state": INTERVENTIONS["edit"],
    "pause": machine.Pause("r"),
    "unpause": machine.Unpause("r"),
}


@pytest.mark.parametrize("situation", ["queued", "paused"])
def test_accepts_is_what_the_machine_does_for_a_queued_or_paused_run(situation: str) -> None:
    """Issue 38, item 8: a queued run (no current step) takes cancel, pause and a state edit,
    never skip, rewind or redrive; a paused one only cancel, unpause and a state edit. Every
    intervention of `machine.INTERVENTIONS` agrees with the machine's answer."""
    k = Kit([{"name": "w", "type": "wait", "signal": "go"}], concurrency={"limit": 1})
    k.start()
    if situation == "paused":
        k.send(machine.Pause("hold"))
    before = k.run
    assert before.status == situation
    offered = {a for a in machine.INTERVENTIONS if machine.accepts(before, a, k.definition)}
    expected = {"cancel", "pause", "state"} if situation == "queued" else {"cancel", "unpause", "state"}
    assert offered == expected
    for action in machine.INTERVENTIONS:
        k.run = before
        reply = k.send(PAUSE_MESSAGES[action]).reply
        assert isinstance(reply, machine.Ok) == (action in offered), (action, reply)


def test_cancel_closes_the_in_flight_task() -> None:
    k = _at("running_task")
    token = k.token
    tr = k.send(machine.Cancel("no longer needed"))
    assert k.run.status == "cancelled" and k.run.closed_at is not None
    assert tr.effects == (machine.Abort(token),)
    assert [t.close_reason for t in tr.tasks] == ["cancelled"]
    assert [e.data for e in tr.events if e.type == "run_cancelled"] == [{"reason": "no longer needed"}]
    assert not k.answer(Completed(1), token=token).changed


def test_redrive_bumps_generation_and_restarts_at_attempt_one() -> None:
    k = _at("failed_task")
    k.send(machine.Redrive("fixed"))
    assert k.run.generation == 2 and k.run.status == "running" and k.run.attempt == 1
    assert k.run.closed_at is None and k.run.error is None
    keys = [e.data["idempotencyKey"] for e in k.history[-1].events if e.type == "task_dispatched"]
    assert keys == ["run1:2:t:1"]
    assert all(e.generation == 2 for e in k.history[-1].events)


def test_redrive_gives_a_timed_out_run_a_fresh_deadline() -> None:
    k = _at("timed_out")
    k.send(machine.Redrive(), after_ms=10)
    assert k.run.status == "waiting" and k.run.deadline == k.now + 86_400_000


def test_rewind_supersedes_the_open_task() -> None:
    k = _at("running_task")
    old = k.token
    tr = k.send(machine.Rewind("t"))
    assert k.run.generation == 2 and k.token != old
    assert machine.Abort(old) in tr.effects
    late = k.answer(Completed("late"), token=old)
    assert not late.changed and isinstance(late.reply, machine.Rejected) and late.reply.code == "task_closed"


def test_rewind_a_completed_run_onto_another_version() -> None:
    k = Kit([TASK])
    k.start()
    k.ok({"v": 1})
    v2 = Kit([{"name": "pre", "type": "task"}, TASK]).definition
    k.send(machine.Rewind("pre", target=v2, version=2, reason="new step"))
    assert k.run.version == 2 and k.run.status == "running" and k.run.current_step == "pre"
    assert k.run.state == {"t": {"v": 1}}  # state is kept
    rejected = k.send(machine.Rewind("nowhere"))
    assert isinstance(rejected.reply, machine.Rejected) and rejected.reply.status == 400


def test_skip_sets_output_and_moves_on() -> None:
    k = _at("waiting")
    k.send(machine.Skip({"paid": "offline"}, "paid by phone"))
    assert k.run.state["w"] == {"paid": "offline"} and k.run.status == "sleeping"
    assert k.run.generation == 1


def test_skip_output_is_held_to_the_limit() -> None:
    k = Kit([TASK], payload_max=LIMIT)
    k.start()
    tr = k.send(machine.Skip(_sized(LIMIT + 1)))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.status == 413 and not tr.changed


def test_edit_state_records_keys_and_reason_never_values() -> None:
    k = _at("waiting")
    tr = k.send(machine.EditState({"t": {"fixed": "SECRET"}, "extra": 2}, ("gone",), "handler bug"))
    assert k.run.state["t"] == {"fixed": "SECRET"} and k.run.state["extra"] == 2
    (event,) = tr.events
    assert event.type == "state_edited"
    assert event.data == {"set": ["extra", "t"], "unset": ["gone"], "reason": "handler bug"}
    assert "SECRET" not in repr(event)


def test_edit_state_value_over_the_limit_changes_nothing() -> None:
    k = Kit([WAIT], payload_max=LIMIT)
    k.start()
    tr = k.send(machine.EditState({"a": 1, "b": _sized(LIMIT + 1)}, (), "r"))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.status == 413
    assert not tr.changed and k.run.state == {}


def test_mark_stuck() -> None:
    k = _at("waiting")
    k.send(machine.MarkStuck("internal_error", "crashed"))
    assert k.run.status == "stuck" and k.run.error is not None and k.run.error.cls == "internal_error"
    k.send(machine.Redrive())
    assert k.run.status == "waiting" and k.run.generation == 2


def test_an_answer_through_complete_aborts_a_push_of_the_attempt_still_waiting() -> None:
    """A push waiting for its rate-limit token (or a sender) when the attempt is answered through
    `complete` must not be sent after it, taking a token for a closed attempt (tests/sim seed
    168: a push re-delivered after a restart waited for its token, the late answer closed the
    run meanwhile, and the push went 10 s later). An answer by the push itself aborts nothing."""
    k = Kit([{"name": "t", "type": "task"}])
    k.start()
    token = k.token
    tr = k.answer(Completed({"ok": 1}), via_api=True)
    assert machine.Abort(token) in tr.effects
    k = Kit([{"name": "t", "type": "task"}])
    k.start()
    assert not [e for e in k.ok({"ok": 1}).effects if isinstance(e, machine.Abort)]
