"""The fault harness's checker on hand-made histories: one that is right passes, and each way
of being wrong is caught, named, and shown with its history."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ..cluster.history import LeaseChange, LeaseHistory, Write
from .checker import Observed, Op, check, explained_status

RUN = "run_1"
KEY_A = f"{RUN}:1:a:1"


def op(n: int, f: str, value: dict[str, Any], kind: str = "ok", item: Any = 0, **result: Any) -> Op:
    return {
        "n": n,
        "proc": "c0",
        "f": f,
        "item": item,
        "value": value,
        "t0": float(n),
        "t1": n + 0.5,
        "type": kind,
        "result": result,
    }


def ev(
    seq: int, type_: str, step: str | None = None, attempt: int | None = None, gen: int = 1, **data: Any
) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": type_,
        "step": step,
        "attempt": attempt,
        "generation": gen,
        "data": data,
        "atS": 100.0 + seq,
    }


START = {"businessKey": "order-0", "workflow": "order", "input": {"item": 0}}
SIGNAL = {"runId": RUN, "name": "go", "signalId": "sig-0"}


def good() -> tuple[list[Op], Observed]:
    """Started, its task pushed once and answered, a sleep, the signal consumed, completed."""
    history = [
        op(0, "start", START, runId=RUN, status="running"),
        op(1, "signal", SIGNAL, runId=RUN, status="delivered"),
    ]
    events = [
        ev(1, "run_started"),
        ev(2, "step_started", "a", kind="task"),
        ev(3, "task_dispatched", "a", 1, idempotencyKey=KEY_A),
        ev(4, "task_completed", "a", 1),
        ev(5, "step_completed", "a", 1),
        ev(6, "step_started", "nap", kind="sleep"),
        ev(7, "sleep_started", "nap"),
        ev(8, "sleep_finished", "nap"),
        ev(9, "step_completed", "nap"),
        ev(10, "step_started", "go", kind="wait"),
        ev(11, "signal_received", "go", name="go", signalId="sig-0", buffered=False),
        ev(12, "signal_consumed", "go", name="go", signalId="sig-0"),
        ev(13, "step_completed", "go"),
        ev(14, "run_completed", "go"),
    ]
    doc = {
        "runId": RUN,
        "status": "completed",
        "generation": 1,
        "input": {"item": 0},
        "businessKey": "order-0",
        "currentStep": "go",
        "waitSignal": None,
    }
    delivery = {"key": KEY_A, "runId": RUN, "generation": 1, "step": "a", "attempt": 1, "at": 103.5}
    seen = Observed({RUN: doc}, {RUN: events}, {RUN: []}, {"order-0": [RUN]}, [delivery])
    return history, seen


def kinds(history: list[Op], seen: Observed) -> list[str]:
    return sorted({v.kind for v in check(history, seen).violations})


def test_a_right_history_passes() -> None:
    history, seen = good()
    report = check(history, seen)
    assert report.ok, report.render()
    assert report.counts.acknowledged == 2 and report.counts.lost == 0


def test_an_acknowledged_start_that_is_missing_is_lost() -> None:
    history, seen = good()
    seen.runs.clear()
    seen.events.clear()
    seen.by_business_key.clear()
    report = check(history, seen)
    assert "lost_start" in kinds(history, seen) and report.counts.lost >= 1


def test_two_runs_for_one_start_are_a_duplicate_under_another_key() -> None:
    history, seen = good()
    seen.runs["run_2"] = {**seen.runs[RUN], "runId": "run_2"}
    seen.events["run_2"] = copy.deepcopy(seen.events[RUN])
    seen.by_business_key["order-0"].append("run_2")
    report = check(history, seen)
    assert "duplicate_start" in kinds(history, seen) and report.counts.duplicated_other_key == 1


def test_one_start_answered_with_two_runs_is_a_duplicate() -> None:
    history, seen = good()
    history.append(op(2, "start", START, runId="run_9"))
    assert "duplicate_start" in kinds(history, seen)


def test_a_start_refused_every_time_must_leave_no_run() -> None:
    history, seen = good()
    history[0] = op(0, "start", START, kind="fail", status_code=503, code="unavailable")
    history.pop()  # its signal was never sent
    assert kinds(history, seen) == ["failed_start_applied"]


def test_an_acknowledged_signal_never_received_is_lost() -> None:
    history, seen = good()
    seen.events[RUN] = [
        e for e in seen.events[RUN] if e["type"] not in ("signal_received", "signal_consumed")
    ]
    assert "lost_signal" in kinds(history, seen)


def test_a_buffered_signal_is_consumed_or_still_buffered() -> None:
    history, seen = good()
    extra = {"runId": RUN, "name": "go", "signalId": "sig-x"}
    history.append(op(2, "signal", extra, runId=RUN, status="buffered"))
    seen.events[RUN].insert(-1, ev(15, "signal_received", None, name="go", signalId="sig-x", buffered=True))
    seen.events[RUN] = [{**e, "seq": i + 1} for i, e in enumerate(seen.events[RUN])]
    assert "lost_signal" in kinds(history, seen)  # neither consumed nor in the stored buffer
    seen.buffers[RUN] = ["sig-x"]
    assert check(history, seen).ok


def test_a_signal_received_twice_is_a_duplicate() -> None:
    history, seen = good()
    events = seen.events[RUN]
    events.insert(11, ev(0, "signal_received", None, name="go", signalId="sig-0", buffered=True))
    seen.events[RUN] = [{**e, "seq": i + 1} for i, e in enumerate(events)]
    assert "duplicate_signal" in kinds(history, seen)


def test_a_signal_acknowledged_delivered_must_have_been_consumed() -> None:
    history, seen = good()
    seen.events[RUN] = [e for e in seen.events[RUN] if e["type"] != "signal_consumed"]
    seen.buffers[RUN] = ["sig-0"]
    assert "lost_signal" in kinds(history, seen)


def test_a_delivery_with_another_attempts_key_is_caught() -> None:
    history, seen = good()
    seen.deliveries.append({**seen.deliveries[0], "key": f"{RUN}:1:a:2"})
    report = check(history, seen)
    assert "wrong_key" in kinds(history, seen) and report.counts.duplicated_other_key == 1


def test_a_delivery_of_an_attempt_never_dispatched_is_a_phantom() -> None:
    history, seen = good()
    seen.deliveries.append({**seen.deliveries[0], "key": f"{RUN}:1:a:2", "attempt": 2})
    assert "phantom_attempt" in kinds(history, seen)


def test_a_key_delivered_again_is_counted_not_refused() -> None:
    history, seen = good()
    seen.deliveries.append({**seen.deliveries[0], "at": 104.0})
    report = check(history, seen)
    assert report.ok and report.counts.duplicated_same_key == 1


def test_a_second_attempt_opened_while_the_first_had_no_outcome_is_a_duplicate() -> None:
    history, seen = good()
    events = seen.events[RUN]
    events[3:3] = [ev(0, "task_dispatched", "a", 2, idempotencyKey=f"{RUN}:1:a:2")]
    seen.events[RUN] = [{**e, "seq": i + 1} for i, e in enumerate(events)]
    report = check(history, seen)
    assert "duplicate_attempt" in kinds(history, seen) and report.counts.duplicated_other_key >= 1


def test_a_status_its_history_does_not_explain_is_caught() -> None:
    history, seen = good()
    seen.runs[RUN]["status"] = "waiting"
    seen.runs[RUN]["waitSignal"] = "go"
    assert "status" in kinds(history, seen)
    history, seen = good()
    seen.runs[RUN]["generation"] = 2
    assert "status" in kinds(history, seen)


def test_a_timer_that_fired_twice_is_caught() -> None:
    history, seen = good()
    events = seen.events[RUN]
    events.insert(8, ev(0, "sleep_finished", "nap"))
    seen.events[RUN] = [{**e, "seq": i + 1} for i, e in enumerate(events)]
    assert "history" in kinds(history, seen)


def test_events_after_a_close_are_caught_unless_a_redrive_reopened_it() -> None:
    history, seen = good()
    seen.events[RUN].append(ev(15, "step_started", "b", kind="task"))
    assert "history" in kinds(history, seen)
    history, seen = good()
    seen.events[RUN] += [ev(15, "run_redriven", "go", gen=2), ev(16, "run_completed", "go", gen=2)]
    seen.runs[RUN]["generation"] = 2
    history.append(op(2, "redrive", {"runId": RUN}, runId=RUN, generation=2))
    assert check(history, seen).ok


@pytest.mark.parametrize("f", ["cancel", "redrive", "complete"])
def test_an_intervention_acknowledged_but_missing_is_lost(f: str) -> None:
    history, seen = good()
    value = {"runId": RUN, "key": f"{RUN}:1:pick:1"}
    history.append(op(2, f, value, runId=RUN, generation=2))
    report = check(history, seen)
    assert f"lost_{f}" in kinds(history, seen) and report.counts.lost == 1


def test_a_run_left_running_after_healing_is_stalled() -> None:
    history, seen = good()
    seen.events[RUN] = seen.events[RUN][:7]
    seen.runs[RUN].update(status="sleeping", currentStep="nap")
    history.pop()
    assert kinds(history, seen) == ["stalled"]
    assert check(history, seen, settled=False).ok
    # Waiting for a signal nobody acknowledged is no stall: the client gave up.
    history, seen = good()
    seen.events[RUN] = seen.events[RUN][:10]
    seen.runs[RUN].update(status="waiting", currentStep="go", waitSignal="go")
    history.pop()
    assert check(history, seen).ok
    history.append(op(1, "signal", SIGNAL, runId=RUN, status="buffered"))
    seen.events[RUN].append(ev(11, "signal_received", None, name="go", signalId="sig-0", buffered=True))
    seen.buffers[RUN] = ["sig-0"]
    assert kinds(history, seen) == ["stalled"]  # buffered while it waits for it


def cluster_seen(writer: str, at_us: int, push_node: str | None = None) -> tuple[list[Op], Observed]:
    history, seen = good()
    seen.writes = [Write(RUN, 1, f"foliot-{writer}", at_us)]
    seen.leases = LeaseHistory(
        [LeaseChange(3, "n0", 1, 200_000, 0), LeaseChange(3, "n1", 2, 400_000, 200_000_000)]
    )
    seen.node_of = {"foliot-n0": "n0", "foliot-n1": "n1"}
    seen.partition_of = lambda run_id: 3
    if push_node is not None:
        seen.deliveries[0].update(node=push_node, sentAt=at_us / 1e6)
    return history, seen


def test_a_write_after_the_lease_ended_is_caught() -> None:
    assert check(*cluster_seen("n0", 150_000_000)).ok
    assert kinds(*cluster_seen("n0", 199_999_999)) == []
    assert kinds(*cluster_seen("n0", 200_000_001)) == ["fencing"]  # n1 held it by then
    assert kinds(*cluster_seen("n1", 150_000_000)) == ["fencing"]


def test_a_push_sent_after_the_lease_ended_is_caught() -> None:
    assert check(*cluster_seen("n0", 150_000_000, push_node="n0")).ok
    assert kinds(*cluster_seen("n1", 300_000_000, push_node="n0")) == ["push_unleased"]


def test_a_failure_names_the_seed_and_the_shortest_history() -> None:
    history, seen = good()
    seen.events[RUN] = [e for e in seen.events[RUN] if e["type"] != "signal_consumed"]
    text = check(history, seen).render(seed=42)
    assert text.startswith("seed 42: ")
    assert "[lost_signal] run_1 signal sig-0" in text
    assert "op#1" in text and "signal_received" in text  # the operation and the events behind it


def test_the_fold_of_a_history_gives_its_status() -> None:
    _, seen = good()
    events = seen.events[RUN]
    assert explained_status(events) == "completed"
    assert explained_status(events[:7]) == "sleeping"
    assert explained_status(events[:10]) == "waiting"
    assert explained_status(events[:3]) == "running"
    assert explained_status([*events[:10], ev(11, "run_paused", "go")]) == "paused"
    assert explained_status([*events[:10], ev(11, "run_paused"), ev(12, "run_unpaused")]) == "waiting"
    assert explained_status([ev(1, "something_new")]) is None
