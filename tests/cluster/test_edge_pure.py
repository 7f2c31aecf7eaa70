"""The cluster edge's pure parts: the hop header, offer announcements, the operators' report."""

from __future__ import annotations

import json

import pytest

from foliot.actors.pull import PAYLOAD_MAX, announcement
from foliot.cluster import hop
from foliot.cluster import tell as remote
from foliot.cluster.report import report, single_node
from foliot.core.leases import Lease, Node, View
from foliot.core.swf import messages as m
from foliot.core.swf.model import ExecutionRef
from foliot.core.workflow.duration import format_timestamp as ts

KEY = b"k" * 32
NOW = 1_800_000_000_000


def test_a_hop_header_verifies_for_its_request_only() -> None:
    value = hop.sign(KEY, "node-a", NOW, "POST", "/apps/x/signals", b'{"name":"go"}')
    assert hop.verify(KEY, value, NOW + 1000, "POST", "/apps/x/signals", b'{"name":"go"}') == "node-a"
    assert hop.verify(KEY, value, NOW, "POST", "/apps/x/signals", b'{"name":"stop"}') is None  # body
    assert hop.verify(KEY, value, NOW, "POST", "/apps/y/signals", b'{"name":"go"}') is None  # path
    assert hop.verify(KEY, value, NOW, "PUT", "/apps/x/signals", b'{"name":"go"}') is None  # method
    assert hop.verify(b"x" * 32, value, NOW, "POST", "/apps/x/signals", b'{"name":"go"}') is None  # key
    late = NOW + hop.WINDOW_MS + 1
    assert hop.verify(KEY, value, late, "POST", "/apps/x/signals", b'{"name":"go"}') is None  # stale


def test_a_forged_or_malformed_hop_header_is_refused() -> None:
    good = hop.sign(KEY, "a", NOW, "POST", "/p", b"")
    _, at, nonce, mac = good.split(";")
    for value in (
        None,
        "",
        "a;b",
        f"b;{at};{nonce};{mac}",
        f"a;{int(at) + 1};{nonce};{mac}",
        f"a;{at};{nonce[:-1]}0;{mac}" if nonce[-1] != "0" else f"a;{at};{nonce[:-1]}1;{mac}",
        f"a;{at};{mac}",
        f"a;x;{nonce};{mac}",
        f"{good};x",
        "a" * 600,
    ):
        assert hop.verify(KEY, value, NOW, "POST", "/p", b"") is None, value


def test_a_hop_header_is_accepted_once_within_a_short_window() -> None:
    replays = hop.Replays()
    value = hop.sign(KEY, "node-a", NOW, "POST", "/internal/claim", b"{}")
    assert replays.accept(KEY, value, NOW + 10, "POST", "/internal/claim", b"{}") == "node-a"
    assert replays.accept(KEY, value, NOW + 20, "POST", "/internal/claim", b"{}") is None  # replayed
    assert replays.refused == 1
    assert replays.accept(KEY, value, NOW, "POST", "/internal/tell", b"{}") is None  # path
    assert replays.accept(KEY, value, NOW, "POST", "/internal/claim", b"[]") is None  # body
    assert hop.WINDOW_MS <= 30_000
    late = NOW + hop.WINDOW_MS + 1
    fresh = hop.sign(KEY, "node-a", NOW, "POST", "/internal/claim", b"{}")
    assert replays.accept(KEY, fresh, late, "POST", "/internal/claim", b"{}") is None  # stale
    # Nonces are forgotten once their header is out of the window: memory stays bounded.
    for i in range(100):
        at = NOW + i * 1_000
        assert replays.accept(KEY, hop.sign(KEY, "b", at, "GET", "/x", b""), at, "GET", "/x", b"") == "b"
    assert len(replays) <= hop.WINDOW_MS // 1_000 + 1


def test_announcements_stay_under_the_notify_limit_and_name_every_queue() -> None:
    keys = [(f"app-{i}", "q" * 120) for i in range(200)]
    payloads = announcement("node-a", "http://10.0.0.1:8080", keys)
    assert len(payloads) > 1 and all(len(p.encode()) < PAYLOAD_MAX for p in payloads)
    heard = [tuple(k) for p in payloads for k in json.loads(p)["k"]]
    assert heard == keys
    assert {json.loads(p)["n"] for p in payloads} == {"node-a"}
    assert announcement("node-a", "http://x", []) == []


def test_the_report_counts_only_unexpired_leases() -> None:
    view = View(
        now=NOW,
        nodes=(Node("a", "http://a", NOW - 500, 7), Node("b", "http://b", NOW - 60_000, 0)),
        leases=(
            Lease(0, "a", 3, NOW + 5_000),
            Lease(1, "b", 2, NOW - 1),  # expired: nobody holds it
            Lease(2, None, 9, 0),
            Lease(3, "a", 1, NOW + 5_000),
        ),
    )
    out = report(view, partitions=4)
    assert out["nodes"] == [
        {
            "nodeId": "a",
            "address": "http://a",
            "lastHeartbeat": ts(NOW - 500),
            "partitions": 2,
            "liveActors": 7,
        },
        {
            "nodeId": "b",
            "address": "http://b",
            "lastHeartbeat": ts(NOW - 60_000),
            "partitions": 0,
            "liveActors": 0,
        },
    ]
    assert out["partitions"] == 4
    assert [(m["nodeId"], m["epoch"]) for m in out["map"]] == [("a", 3), (None, 2), (None, 9), ("a", 1)]


def test_a_single_node_holds_every_partition() -> None:
    out = report(single_node("solo", "http://127.0.0.1:8080", NOW, 5))
    assert out["nodes"] == [
        {"nodeId": "solo", "address": "http://127.0.0.1:8080", "lastHeartbeat": ts(NOW), "partitions": 256,
         "liveActors": 5}
    ]  # fmt: skip
    assert {m["nodeId"] for m in out["map"]} == {"solo"} and len(out["map"]) == 256


def test_every_message_between_nodes_travels_as_json_and_comes_back_the_same() -> None:
    from foliot.core.workflow import machine
    from foliot.core.workflow.model import ErrorInfo, ParentRef

    ref = ExecutionRef("o-1", "r" * 44)
    messages = [
        m.Signal("poke", "in", external=ref, external_initiated_event_id=7),
        m.Signal("poke"),
        m.RequestCancel(external=ref, external_initiated_event_id=3, cause=None),
        m.Terminate(cause="CHILD_POLICY_APPLIED"),
        m.ChildStarted(5, "child-run"),
        m.ChildStartFailed(5, "WORKFLOW_ALREADY_RUNNING"),
        m.ChildClosed(5, ref, "COMPLETED", result="ok"),
        m.ExternalSignaled(9, ref),
        m.ExternalSignalFailed(9),
        m.ExternalCancelRequested(9, ref),
        m.ExternalCancelFailed(9),
        m.LambdaCompleted(4, result="42"),
        m.LambdaFailed(4, reason="boom", details=None),
        machine.ChildRunClosed(
            "run_c",
            ParentRef("run_p", "ship", 2, 1, 7),
            "failed",
            {"any": ["json", 1]},
            ErrorInfo("s", "c", "m"),
        ),
        machine.ChildRunClosed("run_c", ParentRef("run_p", "ship", 1, 1), "completed", None, None),
        machine.Cancel("its parent closed"),
        machine.Admit(),
        machine.Cancel("schedule 'nightly': cancel_previous"),  # a run's cancel
        machine.Cancel(),
    ]
    assert {type(x).__name__ for x in messages} == set(remote.MESSAGES)
    for message in messages:
        assert remote.decode(json.loads(json.dumps(remote.encode(message)))) == message


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        {"type": "PollDecision", "scheduled_event_id": 1},  # not carried between nodes
        {"type": "Signal"},  # signal_name missing
        {"type": "Signal", "signal_name": "x", "extra": 1},
        {"type": "Signal", "signal_name": ["x"]},
        {"type": "Signal", "signal_name": "x", "external": {"type": "Run", "run_id": "r"}},
        {
            "type": "ChildClosed",
            "initiated_event_id": 1,
            "execution": {"type": "ExecutionRef"},
            "close_status": "X",
        },
    ],
)
def test_anything_else_is_refused(raw: object) -> None:
    with pytest.raises(remote.Undecodable):
        remote.decode(raw)


def test_a_message_that_cannot_travel_is_not_encoded() -> None:
    with pytest.raises(remote.Undecodable):
        remote.encode(m.PollDecision(1))
