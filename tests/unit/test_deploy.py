"""Safe deploys, the pure part: comparing a run's step across versions, replaying a recorded
history through a candidate, the state keys a candidate reads, and the machine's `Migrate`."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.workflow import deploy, machine
from foliot.core.workflow.compat import COMPATIBLE, MOVES, STRANDED, step_verdict
from foliot.core.workflow.definition import Definition, parse_definition
from foliot.core.workflow.machine import ChildRunClosed, Gathered, SignalIn
from foliot.core.workflow.model import ErrorInfo, Event, ParentRef

from .machine_kit import Kit


def wf(*steps: dict[str, Any], **doc: Any) -> Definition:
    return parse_definition({"name": "wf", "steps": list(steps), **doc})


def recorded(kit: Kit) -> list[Event]:
    return [e for tr in kit.history for e in tr.events]


def replay(kit: Kit, candidate: Definition, **kw: Any) -> deploy.Replayed:
    return deploy.replay(recorded(kit), kit.run, candidate, **kw)


TASKS = [{"name": "a", "type": "task"}, {"name": "b", "type": "task"}]


def two_tasks_done() -> Kit:
    kit = Kit(TASKS)
    kit.start({"x": 1})
    kit.ok({"v": 1})
    kit.ok({"v": 2})
    assert kit.run.status == "completed"
    return kit


# --------------------------------------------------------------------------- compare


@pytest.mark.parametrize(
    ("old", "new", "fields"),
    [
        ({"type": "task"}, {"type": "task"}, []),
        ({"type": "task"}, {"type": "task", "queue": "q"}, ["handler", "queue"]),
        ({"type": "task"}, {"type": "task", "handler": "/x"}, ["handler"]),
        ({"type": "task"}, {"type": "task", "retry": {"maxAttempts": 5}}, ["retry"]),
        ({"type": "task"}, {"type": "task", "timeout": "5s"}, ["timeout"]),
        (
            {"type": "task", "queue": "q"},
            {"type": "task", "queue": "q", "queueTimeout": "1m"},
            ["queueTimeout"],
        ),
        ({"type": "task"}, {"type": "task", "next": "$fail"}, ["next"]),
        ({"type": "task"}, {"type": "task", "onFailure": "$end"}, ["onFailure"]),
        ({"type": "task"}, {"type": "sleep", "duration": "1s"}, ["kind"]),
        ({"type": "sleep", "duration": "1s"}, {"type": "sleep", "duration": "2s"}, ["duration"]),
        ({"type": "wait", "signal": "go"}, {"type": "wait", "signal": "went"}, ["signals"]),
        ({"type": "wait", "signal": "go"}, {"type": "wait", "signal": "go", "timeout": "1h"}, ["timeout"]),
        (
            {"type": "wait", "signal": "go", "timeout": "1h"},
            {"type": "wait", "signal": "go", "timeout": "1h", "onTimeout": "$end"},
            ["onTimeout"],
        ),
        (
            {
                "type": "choice",
                "choices": [{"when": {"path": "input.x", "op": "eq", "value": 1}, "next": "$end"}],
            },
            {
                "type": "choice",
                "choices": [{"when": {"path": "input.x", "op": "eq", "value": 2}, "next": "$end"}],
            },
            ["choices"],
        ),
        (
            {
                "type": "choice",
                "choices": [{"when": {"path": "input.x", "op": "eq", "value": 1}, "next": "$end"}],
            },
            {
                "type": "choice",
                "choices": [{"when": {"path": "input.x", "op": "eq", "value": 1}, "next": "$end"}],
                "default": "$fail",
            },
            ["default"],
        ),
        ({"type": "run", "workflow": "c"}, {"type": "run", "workflow": "d"}, ["workflow"]),
        ({"type": "run", "workflow": "c"}, {"type": "run", "workflow": "c", "version": 2}, ["workflow"]),
        (
            {"type": "run", "workflow": "c"},
            {"type": "run", "workflow": "c", "retry": {"maxAttempts": 2}},
            ["retry"],
        ),
        (
            {"type": "map", "workflow": "c", "itemsPath": "input.items"},
            {"type": "map", "workflow": "c", "itemsPath": "input.other"},
            ["itemsPath"],
        ),
        (
            {"type": "map", "workflow": "c", "itemsPath": "input.items"},
            {"type": "map", "workflow": "c", "itemsPath": "input.items", "toleratedFailures": 2},
            ["tolerance"],
        ),
        (
            {
                "type": "parallel",
                "branches": [{"name": "x", "workflow": "c"}, {"name": "y", "workflow": "c"}],
            },
            {
                "type": "parallel",
                "branches": [{"name": "x", "workflow": "c"}, {"name": "y", "workflow": "d"}],
            },
            ["workflow"],
        ),
    ],
)
def test_a_step_is_compared_field_by_field(
    old: dict[str, Any], new: dict[str, Any], fields: list[str]
) -> None:
    before, after = wf({"name": "s", **old}), wf({"name": "s", **new})
    verdict = step_verdict(before, after, "s")
    assert [d.field for d in verdict.differences] == fields
    assert verdict.verdict == (MOVES if fields else COMPATIBLE)
    for d in verdict.differences:
        assert d.to_json()["field"] == d.field


def test_a_removed_or_renamed_step_strands_the_run() -> None:
    kit = Kit(TASKS)
    kit.start()
    verdict = deploy.compare(kit.run, kit.definition, wf({"name": "A", "type": "task"}, TASKS[1]))
    assert verdict.verdict == STRANDED and not verdict.in_place
    assert deploy.compare(kit.run, kit.definition, wf(*TASKS)).verdict == COMPATIBLE


def test_in_place_only_when_nothing_in_flight_changed() -> None:
    base = wf({"name": "s", "type": "task"})
    assert step_verdict(base, wf({"name": "s", "type": "task", "retry": {"maxAttempts": 9}}), "s").in_place
    assert step_verdict(base, wf({"name": "s", "type": "task", "next": "$fail"}), "s").in_place
    assert not step_verdict(base, wf({"name": "s", "type": "task", "queue": "q"}), "s").in_place
    assert not step_verdict(base, wf({"name": "s", "type": "sleep", "duration": "1s"}), "s").in_place
    assert step_verdict(base, base, None).verdict == COMPATIBLE


def test_open_runs_are_grouped_with_counts_examples_and_verdicts() -> None:
    old = wf(*TASKS)
    candidate = wf({"name": "a2", "type": "task"}, {"name": "b", "type": "task", "queue": "q"})
    agg = deploy.OpenRuns(candidate)
    for n in range(25):
        agg.add(f"r{n}", 1, "a", "running", old)
    agg.add("rb", 1, "b", "running", old)
    groups = agg.groups()
    assert agg.total == 26
    assert [(g["step"], g["count"], g["verdict"]) for g in groups] == [("a", 25, STRANDED), ("b", 1, MOVES)]
    assert len(groups[0]["exampleRunIds"]) == deploy.MAX_EXAMPLES
    assert [d["field"] for d in groups[1]["differences"]] == ["handler", "queue"]


# --------------------------------------------------------------------------- state keys


def test_state_keys_read_by_every_kind_of_reader() -> None:
    candidate = wf(
        {
            "name": "c",
            "type": "choice",
            "choices": [
                {
                    "when": {
                        "all": [
                            {"path": "state.a.ok", "op": "eq", "value": True},
                            {"not": {"path": "input.vip", "op": "exists", "value": True}},
                        ]
                    },
                    "next": "s",
                }
            ],
            "default": "s",
        },
        {"name": "s", "type": "sleep", "untilPath": "input.when"},
        {"name": "r", "type": "run", "workflow": "c", "inputPath": "state.a"},
        {"name": "m", "type": "map", "workflow": "c", "itemsPath": "input.items"},
        {
            "name": "p",
            "type": "parallel",
            "branches": [
                {"name": "x", "workflow": "c", "inputPath": "input.x"},
                {"name": "y", "workflow": "c"},
            ],
        },
        output="state.m",
    )
    reads = deploy.state_keys_read(candidate)
    assert [(r.dotted, r.step, r.field, r.optional) for r in reads] == [
        ("state.a.ok", "c", "choices[0].when", False),
        ("input.vip", "c", "choices[0].when", True),
        ("input.when", "s", "untilPath", False),
        ("state.a", "r", "inputPath", False),
        ("input.items", "m", "itemsPath", False),
        ("input.x", "p", "branches[0].inputPath", False),
        ("state.m", None, "output", False),
    ]


def test_missing_keys_leave_out_what_steps_ahead_write() -> None:
    candidate = wf(
        {"name": "pay", "type": "task"},
        {
            "name": "route",
            "type": "choice",
            "choices": [
                {"when": {"path": "state.charge.ok", "op": "eq", "value": True}, "next": "$end"},
                {"when": {"path": "state.pay.ok", "op": "eq", "value": True}, "next": "$end"},
            ],
            "default": "$end",
        },
    )
    agg = deploy.OpenRuns(candidate)
    # at pay: state.pay is written ahead (not missing); state.charge is written by no step
    agg.add("r1", 1, "pay", "running", None, {}, {})
    # at route, with pay done under its old name
    agg.add("r2", 1, "route", "running", None, {}, {"charge": {"ok": True}})
    missing = agg.missing()
    assert [(m["path"], m["runs"], m["exampleRunIds"]) for m in missing] == [
        ("state.charge.ok", 1, ["r1"]),
        ("state.pay.ok", 1, ["r2"]),
    ]


def test_a_path_read_twice_by_one_predicate_counts_each_run_once() -> None:
    candidate = wf(
        {
            "name": "c",
            "type": "choice",
            "choices": [
                {
                    "when": {
                        "all": [
                            {"path": "input.x", "op": "gt", "value": 1},
                            {"path": "input.x", "op": "lt", "value": 5},
                        ]
                    },
                    "next": "$end",
                }
            ],
            "default": "$end",
        },
    )
    agg = deploy.OpenRuns(candidate)
    agg.add("r1", 1, "c", "running", None, {}, {})
    assert [(m["path"], m["runs"], m["exampleRunIds"]) for m in agg.missing()] == [("input.x", 1, ["r1"])]
    assert agg.paths("c") == (("input", "x"),)


# Reads of several kinds at several steps: paths shared between steps (`d` and `e` read
# `input.x` on two branches, `c` sees both ahead), a path read twice by one predicate, an
# optional (`exists`) one, one written ahead (`state.t`), an array index (`input.items.0`).
LACKING_CANDIDATE = wf(
    {"name": "t", "type": "task"},
    {
        "name": "c",
        "type": "choice",
        "choices": [
            {
                "when": {
                    "any": [
                        {"path": "input.x", "op": "eq", "value": 1},
                        {"path": "state.t.ok", "op": "eq", "value": True},
                        {"path": "input.x", "op": "gt", "value": 3},
                        {"path": "input.z", "op": "exists", "value": True},
                    ]
                },
                "next": "d",
            },
            {"when": {"path": "state.old.v", "op": "eq", "value": 1}, "next": "e"},
        ],
        "default": "d",
    },
    {
        "name": "d",
        "type": "choice",
        "choices": [{"when": {"path": "input.x", "op": "eq", "value": 2}, "next": "m"}],
        "default": "m",
    },
    {"name": "m", "type": "map", "workflow": "child", "itemsPath": "input.items.0", "next": "$end"},
    {
        "name": "e",
        "type": "choice",
        "choices": [{"when": {"path": "input.x", "op": "eq", "value": 3}, "next": "m"}],
        "default": "m",
    },
    output="state.old",
)
LACKING_STEPS = ("t", "c", "d", "e", "m", "gone", None)


def _lacking_runs() -> Any:
    """Open runs: (version, step, status, created_at, input, state); created_at ties often
    (run_id, their index, orders them)."""
    from hypothesis import strategies as st

    values = st.sampled_from([None, 0, 1, True, [], [7], {"v": 1}, {"ok": True}, {"0": 1}])
    inputs = st.one_of(st.dictionaries(st.sampled_from(["x", "y", "items", "z"]), values, max_size=4), values)
    states = st.dictionaries(st.sampled_from(["t", "old", "m"]), values, max_size=3)
    run = st.tuples(
        st.integers(1, 3),
        st.sampled_from(LACKING_STEPS),
        st.sampled_from(["running", "waiting"]),
        st.integers(0, 9),
        inputs,
        states,
    )
    return st.lists(run, max_size=60)


def test_missing_keys_counted_by_group_order_ties_by_the_run_that_found_them() -> None:
    """Two entries as large with one path (read at `d` and at `e`): the one whose run comes
    first (newest) is listed first, whichever group the store answers for first."""
    agg = deploy.OpenRuns(LACKING_CANDIDATE)
    assert [r.step for r in agg.relevant("d")][:1] == ["d"] and "d" not in [r.step for r in agg.relevant("e")]
    x = ("input", "x")
    agg.add_lacking([deploy.Lacking("e", x, 1, ((3, "old"),)), deploy.Lacking("d", x, 1, ((5, "new"),))])
    assert [(m["path"], m["readBy"], m["exampleRunIds"]) for m in agg.missing()][:2] == [
        ("input.x", "d", ["new"]),
        ("input.x", "e", ["old"]),
    ]


def test_missing_keys_counted_by_group_give_the_report_of_every_run() -> None:
    """`add_lacking` (the store counts each group's runs lacking each path, and gives their
    newest 20) reports exactly what `add_state` of every run, fed newest first across each
    version's groups, reports: counts, examples, and the order of ties."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_lacking_runs(), st.randoms(use_true_random=False))
    def check(drawn: list[tuple[Any, ...]], rnd: Any) -> None:
        runs = [(f"r{n:03d}", *r) for n, r in enumerate(drawn)]
        full, counted = deploy.OpenRuns(LACKING_CANDIDATE), deploy.OpenRuns(LACKING_CANDIDATE)
        for version in sorted({r[1] for r in runs}, reverse=True):
            mine = [r for r in runs if r[1] == version]
            stream = sorted(
                (r for r in mine if full.relevant(r[2])), key=lambda r: (r[4], r[0]), reverse=True
            )
            for run_id, _, step, _, _, given_input, state in stream:
                full.add_state(run_id, step, given_input, state)
            lacking = []
            for step, status in {(r[2], r[3]) for r in mine if counted.relevant(r[2])}:
                group = [r for r in mine if (r[2], r[3]) == (step, status)]
                for path in counted.paths(step):
                    reads = [deploy.ReadPath(path, step, "f")]
                    without = [r for r in group if deploy.missing_keys(reads, r[5], r[6])]
                    newest = sorted(((r[4], r[0]) for r in without), reverse=True)[: deploy.MAX_EXAMPLES]
                    lacking.append(deploy.Lacking(step, path, len(without), tuple(newest)))
            rnd.shuffle(lacking)  # the order the store answers in does not matter
            counted.add_lacking(lacking)
        assert counted.missing() == full.missing()

    check()


# --------------------------------------------------------------------------- replay: same


def test_the_same_definition_replays_the_same() -> None:
    kit = two_tasks_done()
    result = replay(kit, kit.definition)
    assert result.same and result.compared == len(recorded(kit))


def test_every_kind_of_input_replays_the_same() -> None:
    steps = [
        {"name": "t", "type": "task", "retry": {"maxAttempts": 3, "initialInterval": "1s"}},
        {
            "name": "q",
            "type": "task",
            "queue": "work",
            "queueTimeout": "1m",
            "retry": {"maxAttempts": 2, "initialInterval": "1s"},
        },
        {"name": "nap", "type": "sleep", "duration": "1m"},
        {"name": "hold", "type": "wait", "signal": "go", "timeout": "1h", "onTimeout": "pick"},
        {"name": "pick", "type": "wait", "signals": ["yes", "no"], "onSignal": {"no": "$fail"}},
        {
            "name": "route",
            "type": "choice",
            "choices": [{"when": {"path": "state.t.n", "op": "gt", "value": 1}, "next": "one"}],
            "default": "$fail",
        },
        {"name": "one", "type": "run", "workflow": "child"},
        {"name": "many", "type": "map", "workflow": "child", "itemsPath": "input.items"},
        {
            "name": "both",
            "type": "parallel",
            "branches": [{"name": "l", "workflow": "child"}, {"name": "r", "workflow": "child"}],
        },
        {"name": "acc", "type": "task"},
    ]
    kit = Kit(steps)
    kit.start({"items": [1, 2]})
    kit.fail()  # t: attempt 1 fails, retried
    kit.fire()
    kit.ok({"n": 2})
    kit.fire()  # q: no worker in time
    kit.fire()  # retry
    kit.send(machine.Claim(kit.token, "w1"))
    kit.ok("queued")
    kit.send(SignalIn("yes", {"early": True}, "s1"))  # buffered while asleep
    kit.fire()  # nap ends; hold waits for go
    kit.fire()  # hold times out -> pick consumes the buffered yes
    assert kit.run.current_step == "one"
    run_child = kit.run.fan.open[0].run_id  # type: ignore[union-attr]
    kit.send(_closed(kit, run_child, output={"child": 1}))
    for child in [s.run_id for s in kit.run.fan.open]:  # type: ignore[union-attr]
        kit.send(_closed(kit, child))
    kit.send(Gathered("many", kit.run.generation, 1, ("m1", "m2")))
    for child in [s.run_id for s in kit.run.fan.open]:  # type: ignore[union-attr]
        kit.send(_closed(kit, child))
    kit.send(Gathered("both", kit.run.generation, 1, ("L", "R")))
    kit.answer(machine.Accepted(kit.now + 1000))
    kit.ok("done")
    assert kit.run.status == "completed", kit.events()
    result = replay(kit, kit.definition)
    assert result.same, result.divergence
    assert result.compared == len(recorded(kit))


def _closed(kit: Kit, run_id: str, output: Any = None, status: str = "completed") -> ChildRunClosed:
    fan = kit.run.fan
    assert fan is not None
    slot = fan.slot(run_id)
    assert slot is not None
    return ChildRunClosed(
        run_id, ParentRef("run1", fan.step, fan.generation, fan.attempt, slot.index), status, output
    )


def test_interventions_replay_the_same() -> None:
    kit = Kit([{"name": "a", "type": "task", "retry": {"maxAttempts": 1}}, {"name": "b", "type": "task"}])
    kit.start()
    kit.send(machine.Pause("look"))
    kit.ok({"v": 1})  # held
    kit.send(machine.Unpause())
    kit.fail(retryable=False)  # b fails, run fails
    kit.send(machine.Redrive("again"))
    kit.send(machine.EditState({"a": {"v": 1}}, (), "fix"))
    kit.send(machine.Skip({"skipped": True}, "skip b"))
    assert kit.run.status == "completed"
    assert replay(kit, kit.definition).same


def test_a_cancelled_and_a_timed_out_run_replay_the_same() -> None:
    kit = Kit(TASKS)
    kit.start()
    kit.send(machine.Cancel("no"))
    assert replay(kit, kit.definition).same
    kit = Kit(TASKS, runTimeout="1h")
    kit.start()
    kit.fire_run_timeout()
    assert replay(kit, kit.definition).same


# --------------------------------------------------------------------------- replay: divergences


def test_a_renamed_step_diverges_where_the_history_names_it() -> None:
    kit = two_tasks_done()
    result = replay(kit, wf({"name": "a", "type": "task"}, {"name": "b2", "type": "task"}))
    assert result.divergence is not None
    assert result.divergence.reason == "step_missing"
    started_b = next(e for e in recorded(kit) if e.type == "step_started" and e.step == "b")
    assert result.divergence.seq == started_b.seq
    assert result.divergence.candidate == {"type": "step_started", "step": "b2"}


def test_a_removed_step_diverges() -> None:
    kit = two_tasks_done()
    result = replay(kit, wf({"name": "a", "type": "task"}))
    assert result.divergence is not None and result.divergence.reason in ("step_missing", "end")


def test_a_different_next_step_diverges() -> None:
    kit = two_tasks_done()
    candidate = wf({"name": "a", "type": "task", "next": "$end"}, {"name": "b", "type": "task"})
    result = replay(kit, candidate)
    assert result.divergence is not None
    assert result.divergence.candidate == {"type": "run_completed", "step": "a"}


def test_a_choice_branching_the_other_way_diverges() -> None:
    def doc(value: int) -> list[dict[str, Any]]:
        return [
            {"name": "a", "type": "task"},
            {
                "name": "c",
                "type": "choice",
                "choices": [{"when": {"path": "state.a.n", "op": "gt", "value": value}, "next": "big"}],
                "default": "small",
            },
            {"name": "big", "type": "task", "next": "$end"},
            {"name": "small", "type": "task", "next": "$end"},
        ]

    kit = Kit(doc(10))
    kit.start()
    kit.ok({"n": 5})
    kit.ok()
    assert replay(kit, wf(*doc(10))).same
    result = replay(kit, wf(*doc(1)))
    assert result.divergence is not None and result.divergence.reason == "choice"
    assert result.divergence.recorded == {"type": "choice_evaluated", "step": "c", "next": "small"}
    assert result.divergence.candidate == {"type": "choice_evaluated", "step": "c", "next": "big"}


def test_a_retry_policy_that_gives_up_earlier_diverges() -> None:
    kit = Kit([{"name": "a", "type": "task", "retry": {"maxAttempts": 3}}])
    kit.start()
    kit.fail()
    kit.fire()
    kit.ok()
    result = replay(kit, wf({"name": "a", "type": "task", "retry": {"maxAttempts": 1}}))
    assert result.divergence is not None and result.divergence.reason == "retry"
    assert "gives up" in result.divergence.message


def test_a_retry_policy_that_retries_where_the_run_gave_up_diverges() -> None:
    kit = Kit([{"name": "a", "type": "task", "retry": {"maxAttempts": 1}}])
    kit.start()
    kit.fail()
    assert kit.run.status == "failed"
    result = replay(kit, wf({"name": "a", "type": "task", "retry": {"maxAttempts": 3}}))
    assert result.divergence is not None and result.divergence.reason == "retry"


def test_retry_on_classes_are_replayed() -> None:
    kit = Kit([{"name": "a", "type": "task", "retry": {"maxAttempts": 3}}])
    kit.start()
    kit.fail("card_declined")
    kit.fire()
    kit.ok()
    candidate = wf({"name": "a", "type": "task", "retry": {"maxAttempts": 3, "retryOn": ["timeout"]}})
    result = replay(kit, candidate)
    assert result.divergence is not None and result.divergence.reason == "retry"


def test_a_wait_for_a_signal_the_run_never_got_diverges() -> None:
    kit = two_tasks_done()
    candidate = wf(TASKS[0], {"name": "w", "type": "wait", "signal": "approve", "next": "b"}, TASKS[1])
    result = replay(kit, candidate)
    assert result.divergence is not None and result.divergence.reason == "next"
    # at the very end: a closed run the candidate keeps waiting
    kit = Kit([{"name": "a", "type": "task"}])
    kit.start()
    kit.ok()
    result = replay(
        kit, wf({"name": "a", "type": "task", "next": "w"}, {"name": "w", "type": "wait", "signal": "go"})
    )
    assert result.divergence is not None
    assert result.divergence.reason == "next"


def test_the_end_of_history_with_the_candidate_still_waiting() -> None:
    kit = Kit([{"name": "w", "type": "wait", "signal": "go"}])
    kit.start()
    kit.send(machine.Cancel())
    # the candidate waits for another signal; the run was cancelled while waiting: same shape
    assert replay(kit, wf({"name": "w", "type": "wait", "signal": "stop"})).same
    kit = Kit([{"name": "w", "type": "wait", "signal": "go"}])
    kit.start()
    kit.send(SignalIn("go", {"ok": 1}))
    result = replay(kit, wf({"name": "w", "type": "wait", "signal": "stop"}))
    assert result.divergence is not None and result.divergence.reason == "signal"


def test_a_signal_payload_comes_from_the_consuming_step() -> None:
    steps = [
        {"name": "w", "type": "wait", "signal": "go"},
        {
            "name": "c",
            "type": "choice",
            "choices": [{"when": {"path": "state.w.ok", "op": "eq", "value": True}, "next": "$end"}],
            "default": "$fail",
        },
    ]
    kit = Kit(steps)
    kit.start()
    kit.send(SignalIn("go", {"ok": True}, "sig-1"))
    assert kit.run.status == "completed"
    assert replay(kit, kit.definition).same


def test_a_timer_the_candidate_lacks_diverges() -> None:
    kit = Kit([{"name": "w", "type": "wait", "signal": "go", "timeout": "1m", "onTimeout": "$end"}])
    kit.start()
    kit.fire()
    result = replay(kit, wf({"name": "w", "type": "wait", "signal": "go"}))
    assert result.divergence is not None and result.divergence.reason == "timer"


def test_a_changed_kind_diverges() -> None:
    kit = two_tasks_done()
    result = replay(kit, wf(TASKS[0], {"name": "b", "type": "sleep", "duration": "1s"}))
    assert result.divergence is not None and result.divergence.reason == "kind"


def test_a_child_step_of_another_kind_diverges() -> None:
    kit = Kit([{"name": "one", "type": "run", "workflow": "child"}])
    kit.start()
    child = kit.run.fan.open[0].run_id  # type: ignore[union-attr]
    kit.send(_closed(kit, child, output={"x": 1}))
    assert replay(kit, kit.definition).same
    result = replay(kit, wf({"name": "one", "type": "task"}))
    assert result.divergence is not None and result.divergence.reason == "kind"


def test_a_map_that_tolerates_failures_diverges() -> None:
    doc = {"name": "m", "type": "map", "workflow": "child", "itemsPath": "input.items"}
    kit = Kit([doc])
    kit.start({"items": [1, 2]})
    first = kit.run.fan.open[0].run_id  # type: ignore[union-attr]
    kit.send(_closed(kit, first, status="failed"))
    assert kit.run.status == "failed"
    assert replay(kit, kit.definition).same
    result = replay(kit, wf({**doc, "toleratedFailures": 1}))
    assert result.divergence is not None


def test_a_truncated_history_is_same_up_to_its_end() -> None:
    kit = two_tasks_done()
    events = recorded(kit)
    result = deploy.replay(events[:4], kit.run, kit.definition, truncated=True)
    assert result.same and result.truncated


def test_a_history_without_its_start_is_reported() -> None:
    kit = two_tasks_done()
    result = deploy.replay(recorded(kit)[1:], kit.run, kit.definition)
    assert result.divergence is not None and result.divergence.seq is None


def test_a_migrated_run_replays_against_its_new_version() -> None:
    kit = Kit(TASKS)
    kit.start()
    candidate = wf({"name": "a", "type": "task", "retry": {"maxAttempts": 5}}, TASKS[1])
    kit.send(machine.Migrate(candidate, 2, (), "deploy"))
    kit.definition = candidate
    kit.ok()
    kit.ok()
    assert "run_migrated" in kit.events()
    assert replay(kit, candidate).same


# --------------------------------------------------------------------------- the machine's Migrate


def test_migrate_keeps_a_compatible_run_where_it_stands() -> None:
    kit = Kit(TASKS)
    kit.start()
    token, generation = kit.token, kit.run.generation
    target = wf({"name": "a", "type": "task", "next": "$end"}, TASKS[1])
    tr = kit.send(machine.Migrate(target, 2, (), "v2"))
    assert isinstance(tr.reply, machine.Ok)
    assert kit.run.version == 2 and kit.run.generation == generation and kit.token == token
    assert [e.type for e in tr.events] == ["run_migrated"]
    assert tr.events[0].data == {
        "reason": "v2",
        "fromVersion": 1,
        "toVersion": 2,
        "fromStep": "a",
        "toStep": "a",
        "inPlace": True,
    }
    kit.definition = target
    kit.ok()
    assert kit.run.status == "completed"  # the new next
    again = kit.send(machine.Migrate(target, 2, ()))
    assert not again.changed


def test_migrate_reenters_a_step_whose_work_in_flight_changed() -> None:
    kit = Kit(TASKS)
    kit.start()
    old_token = kit.token
    target = wf({"name": "a", "type": "task", "queue": "q"}, TASKS[1])
    tr = kit.send(machine.Migrate(target, 2, ()))
    assert kit.run.generation == 2 and kit.token != old_token and kit.run.task.queue == "q"  # type: ignore[union-attr]
    assert [e.type for e in tr.events][:3] == ["run_migrated", "step_started", "task_dispatched"]
    assert any(isinstance(e, machine.Abort) and e.token == old_token for e in tr.effects)


def test_migrate_refuses_a_stranded_run_without_a_step_map_entry() -> None:
    kit = Kit(TASKS)
    kit.start()
    target = wf({"name": "a2", "type": "task"}, TASKS[1])
    tr = kit.send(machine.Migrate(target, 2, ()))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "stranded" and not tr.changed
    tr = kit.send(machine.Migrate(target, 2, (("a", "nope"),)))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.field == "stepMap.a"
    tr = kit.send(machine.Migrate(target, 2, (("a", "a2"),), "renamed"))
    assert isinstance(tr.reply, machine.Ok)
    assert kit.run.current_step == "a2" and kit.run.version == 2 and kit.run.generation == 2
    assert tr.events[0].data["toStep"] == "a2" and tr.events[0].step == "a2"


def test_migrate_refuses_closed_runs_and_reentering_paused_ones() -> None:
    kit = two_tasks_done()
    tr = kit.send(machine.Migrate(wf(*TASKS), 2, ()))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "invalid_status"
    kit = Kit(TASKS)
    kit.start()
    kit.send(machine.Pause())
    tr = kit.send(machine.Migrate(wf({"name": "a", "type": "task", "queue": "q"}, TASKS[1]), 2, ()))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "run_paused"
    tr = kit.send(machine.Migrate(wf(*TASKS), 2, ()))
    assert isinstance(tr.reply, machine.Ok) and kit.run.status == "paused" and kit.run.version == 2


def test_migrate_moves_a_waiting_run_to_new_signals_and_child_steps() -> None:
    kit = Kit([{"name": "w", "type": "wait", "signal": "go"}])
    kit.start()
    target = wf({"name": "w", "type": "wait", "signal": "start"})
    kit.send(machine.Migrate(target, 2, ()))
    assert kit.run.wait_signal == "start" and kit.run.generation == 2


# --------------------------------------------------------------------------- migrate mid-fan-out

MAP = {"name": "m", "type": "map", "workflow": "child", "itemsPath": "input.items", "maxConcurrency": 2}


def started_indexes(kit: Kit) -> list[int]:
    return [e.data["index"] for tr in kit.history for e in tr.events if e.type == "child_started"]


def map_midway(items: int = 6, completed: int = 2) -> Kit:
    """A map of `items` children, 2 at a time, `completed` of them done."""
    kit = Kit([MAP, {"name": "after", "type": "task"}])
    kit.start({"items": list(range(items))})
    for _ in range(completed):
        kit.send(_closed(kit, kit.run.fan.open[0].run_id, output="done"))  # type: ignore[union-attr]
    return kit


def test_migrate_mid_map_keeps_finished_and_running_children() -> None:
    """Issue 38: v2 changes only maxConcurrency 2 -> 4; the run keeps its 2 completed and 2
    running children (same generation, nothing cancelled) and the 2 items not started follow
    v2 at once. Every item starts exactly once."""
    kit = map_midway()
    running = [s.run_id for s in kit.run.fan.open]  # type: ignore[union-attr]
    generation = kit.run.generation
    target = wf({**MAP, "maxConcurrency": 4}, {"name": "after", "type": "task"})
    tr = kit.send(machine.Migrate(target, 2, (), "wider"))
    assert isinstance(tr.reply, machine.Ok), tr.reply
    assert kit.run.version == 2 and kit.run.generation == generation and kit.run.status == "waiting"
    assert not [e for e in tr.effects if isinstance(e, machine.CancelChildren)]
    fan = kit.run.fan
    assert fan is not None and fan.completed == 2 and fan.started == 6 and len(fan.open) == 4
    assert [s.run_id for s in fan.open][:2] == running
    assert [c.parent.index for c in tr.children] == [4, 5]
    migrated = tr.events[0]
    assert migrated.type == "run_migrated" and migrated.data["inPlace"] is True
    assert migrated.data["children"] == {
        "completed": 2,
        "failed": 0,
        "cancelled": 0,
        "running": 2,
        "notStarted": 2,
    }
    kit.definition = target
    for child in [s.run_id for s in fan.open]:
        kit.send(_closed(kit, child, output="done"))
    assert kit.run.fan is not None and kit.run.fan.completed == 6
    kit.send(Gathered("m", generation, 1, ("done",) * 6))
    assert kit.run.current_step == "after" and kit.run.state["m"] == ["done"] * 6
    assert sorted(started_indexes(kit)) == list(range(6))  # each item once


def test_migrate_mid_map_to_a_lower_concurrency_starts_nothing_until_it_fits() -> None:
    kit = map_midway(items=6, completed=1)
    target = wf({**MAP, "maxConcurrency": 1}, {"name": "after", "type": "task"})
    tr = kit.send(machine.Migrate(target, 2, ()))
    assert isinstance(tr.reply, machine.Ok) and not tr.children
    kit.definition = target
    kit.send(_closed(kit, kit.run.fan.open[0].run_id))  # type: ignore[union-attr]
    assert len(kit.run.fan.open) == 1  # type: ignore[union-attr]
    kit.send(_closed(kit, kit.run.fan.open[0].run_id))  # type: ignore[union-attr]
    assert len(kit.run.fan.open) == 1 and kit.run.fan.started == 4  # type: ignore[union-attr]
    assert sorted(started_indexes(kit)) == list(range(4))


def test_migrate_of_a_paused_map_keeps_it_and_unpause_follows_the_new_step() -> None:
    kit = map_midway()
    kit.send(machine.Pause())
    target = wf({**MAP, "maxConcurrency": 3}, {"name": "after", "type": "task"})
    tr = kit.send(machine.Migrate(target, 2, ()))
    assert isinstance(tr.reply, machine.Ok) and not tr.children and kit.run.status == "paused"
    kit.definition = target
    tr = kit.send(machine.Unpause())
    assert [c.parent.index for c in tr.children] == [4]  # 2 running + 1 under the new limit
    assert sorted(started_indexes(kit)) == list(range(5))


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        ({"itemsPath": "input.other"}, "itemsPath"),
        ({"workflow": "other"}, "workflow"),
        ({"workflow": "child", "version": 3}, "workflow"),
    ],
)
def test_migrate_refuses_a_map_whose_children_cannot_be_kept(changed: dict[str, Any], field: str) -> None:
    kit = map_midway()
    before = kit.run
    tr = kit.send(machine.Migrate(wf({**MAP, **changed}, {"name": "after", "type": "task"}), 2, ()))
    assert isinstance(tr.reply, machine.Rejected) and not tr.changed and kit.run == before
    assert tr.reply.status == 409 and tr.reply.code == "fan_out_changed"
    assert f"changes its {field}" in tr.reply.message and "2 completed, 2 running" in tr.reply.message


def test_migrate_refuses_moving_a_fanned_out_run_with_a_step_map() -> None:
    kit = map_midway()
    target = wf({**MAP, "name": "m2"}, {"name": "after", "type": "task"})
    tr = kit.send(machine.Migrate(target, 2, ()))  # stranded: still its children first
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "fan_out_changed"
    assert "has no step 'm'" in tr.reply.message
    tr = kit.send(machine.Migrate(target, 2, (("m", "m2"),)))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "fan_out_changed"
    assert "stepMap moves it to 'm2'" in tr.reply.message
    assert kit.run.version == 1 and sorted(started_indexes(kit)) == list(range(4))


def test_migrate_keeps_the_child_of_a_run_step_and_the_branches_of_a_parallel() -> None:
    kit = Kit([{"name": "one", "type": "run", "workflow": "child"}])
    kit.start()
    child = kit.run.fan.open[0].run_id  # type: ignore[union-attr]
    target = wf({"name": "one", "type": "run", "workflow": "child", "retry": {"maxAttempts": 3}})
    tr = kit.send(machine.Migrate(target, 2, ()))
    assert isinstance(tr.reply, machine.Ok) and not tr.children and not tr.effects
    assert kit.run.fan is not None and kit.run.fan.open[0].run_id == child and kit.run.generation == 1
    tr = kit.send(machine.Migrate(wf({"name": "one", "type": "run", "workflow": "other"}), 3, ()))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "fan_out_changed"
    assert "waits for the children of run step 'one' (0 completed, 1 running)" in tr.reply.message
    branches = [{"name": "l", "workflow": "child"}, {"name": "r", "workflow": "child"}]
    kit = Kit([{"name": "both", "type": "parallel", "branches": branches}])
    kit.start()
    kit.send(_closed(kit, kit.run.fan.open[0].run_id))  # type: ignore[union-attr]
    same = wf({"name": "both", "type": "parallel", "branches": branches, "onParentClose": "abandon"})
    assert isinstance(kit.send(machine.Migrate(same, 2, ())).reply, machine.Ok)
    assert kit.run.fan is not None and kit.run.fan.completed == 1 and len(kit.run.fan.open) == 1
    more = wf({"name": "both", "type": "parallel", "branches": [*branches, {"name": "x", "workflow": "c"}]})
    tr = kit.send(machine.Migrate(more, 3, ()))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "fan_out_changed"


def test_migrate_at_a_child_step_without_children_follows_the_old_rules() -> None:
    """Between attempts (a retry timer, no fan-out) a changed child step is re-entered."""
    kit = Kit([{"name": "one", "type": "run", "workflow": "child", "retry": {"maxAttempts": 2}}])
    kit.start()
    kit.send(_closed(kit, kit.run.fan.open[0].run_id, status="failed"))  # type: ignore[union-attr]
    assert kit.run.fan is None and kit.run.timer is not None
    tr = kit.send(machine.Migrate(wf({"name": "one", "type": "run", "workflow": "other"}), 2, ()))
    assert isinstance(tr.reply, machine.Ok) and kit.run.generation == 2
    assert [c.workflow for c in tr.children] == ["other"]


def test_the_dry_run_says_what_migrate_does_to_runs_mid_map() -> None:
    """The plan of a group is what the machine's Migrate does to each of its runs: the issue's
    run keeps 12 completed items and 2 running, 6 items not started follow the new version."""
    kit = map_midway(items=20, completed=12)
    fan = kit.run.fan
    assert fan is not None and (fan.completed, len(fan.open), fan.total - fan.started) == (12, 2, 6)
    wider = wf({**MAP, "maxConcurrency": 4}, {"name": "after", "type": "task"})
    agg = deploy.OpenRuns(wider)
    agg.add("run1", 1, "m", "waiting", kit.definition, fan=fan)
    [group] = agg.groups()
    assert group["verdict"] == MOVES and [d["field"] for d in group["differences"]] == ["maxConcurrency"]
    assert group["migrate"] == [
        {
            "outcome": "stays",
            "runs": 1,
            "code": None,
            "message": "stays at map step 'm' with its children: keeps 12 completed items and 2 running;"
            " 6 items not started follow the candidate (maxConcurrency 2 → 4)",
        }
    ]
    assert isinstance(kit.send(machine.Migrate(wider, 2, ())).reply, machine.Ok)
    other = wf({**MAP, "itemsPath": "input.other"}, {"name": "after", "type": "task"})
    agg = deploy.OpenRuns(other)
    agg.add("a", 1, "m", "waiting", kit.definition, fan=fan)
    agg.add("b", 1, "m", "waiting", kit.definition, fan=fan)
    [group] = agg.groups()
    [plan] = group["migrate"]
    assert plan["outcome"] == "refused" and plan["code"] == "fan_out_changed" and plan["runs"] == 2
    assert plan["message"].startswith(
        "2 runs wait for the children of map step 'm' (24 completed, 4 running) and the candidate"
        " changes its itemsPath"
    )
    refused = map_midway(items=20, completed=12).send(machine.Migrate(other, 2, ()))
    assert isinstance(refused.reply, machine.Rejected) and refused.reply.code == plan["code"]


def test_the_plan_of_each_kind_of_group() -> None:
    old = wf(MAP, {"name": "t", "type": "task"})
    stays = deploy.migrate_plan(step_verdict(old, old, "t"), "t", "running", 3, "task", deploy.Fans())
    assert [(p["outcome"], p["runs"]) for p in stays] == [("stays", 3)]
    queued = wf(MAP, {"name": "t", "type": "task", "queue": "q"})
    verdict = step_verdict(old, queued, "t")
    assert [p["outcome"] for p in deploy.migrate_plan(verdict, "t", "running", 1, "task", deploy.Fans())] == [
        "reenters"
    ]
    [paused] = deploy.migrate_plan(verdict, "t", "paused", 1, "task", deploy.Fans())
    assert paused["code"] == "run_paused"
    gone = wf(MAP)
    [stranded] = deploy.migrate_plan(step_verdict(old, gone, "t"), "t", "running", 2, "task", deploy.Fans())
    assert stranded["outcome"] == "refused" and stranded["code"] == "stranded"
    # a paused group at a map step: 1 run waits for children, 1 held an answer (no fan-out)
    wider = wf({**MAP, "maxConcurrency": 4}, {"name": "t", "type": "task"})
    fans = deploy.Fans(runs=1, total=5, started=3, completed=1, open=2)
    plan = deploy.migrate_plan(step_verdict(old, wider, "m"), "m", "paused", 2, "map", fans)
    assert [(p["outcome"], p["runs"], p["code"]) for p in plan] == [
        ("stays", 1, None),
        ("refused", 1, "run_paused"),
    ]
    assert "keeps 1 completed item and 2 running; 2 items not started" in plan[0]["message"]


def test_a_child_that_could_not_start_replays_the_same() -> None:
    """A run step whose workflow was missing at attempt 1 and found at attempt 2: the history
    has `child_not_started` (no id) then `child_started`; the replay follows both."""
    step = {"name": "ship", "type": "run", "workflow": "shipping", "retry": {"maxAttempts": 2}}
    kit = Kit([step, {"name": "after", "type": "task"}])
    first = kit.start()
    missing = ErrorInfo(None, "workflow_not_found", "workflow 'shipping' not found")
    tr = machine.child_not_started(first, first.children[0], missing, kit.definition, kit.ctx())
    kit.history[-1], kit.run = tr, tr.run
    assert kit.run.status == "running"  # waiting to retry
    kit.fire()
    (child,) = kit.history[-1].children
    kit.send(_closed(kit, child.run_id, output={"shipped": True}))
    kit.ok("done")
    assert kit.run.status == "completed", kit.events()
    assert kit.events().count("child_not_started") == 1
    result = replay(kit, kit.definition)
    assert result.same, result.divergence
    assert result.compared == len(recorded(kit))
