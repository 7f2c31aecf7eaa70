"""The console's pure parts: session cookies and CSRF tokens, the SVG graph, the version diff."""

from __future__ import annotations

import re

from foliot.console import graph
from foliot.console.views import diff_lines
from foliot.http.sessions import csrf_ok, csrf_token, make_cookie, read_cookie, session_key

KEY = session_key("admin-token")


def test_cookie_round_trip_expiry_tampering_and_purpose() -> None:
    cookie = make_cookie(KEY, "op_1", 1000)
    assert read_cookie(KEY, cookie, 999) == "op_1"
    assert read_cookie(KEY, cookie, 1000) is None  # expired
    assert read_cookie(session_key("other-admin-token"), cookie, 0) is None  # admin token changed
    assert read_cookie(KEY, cookie, 0, purpose="login") is None  # a session cookie is no login cookie
    payload, mac = cookie.split(".")
    forged = make_cookie(KEY, "admin", 1000).split(".")[0] + "." + mac
    assert read_cookie(KEY, forged, 0) is None
    for junk in (None, "", ".", "x.y", payload, "a" * 600, cookie + "0"):
        assert read_cookie(KEY, junk, 0) is None


def test_csrf_is_bound_to_the_session() -> None:
    a, b = make_cookie(KEY, "admin", 10), make_cookie(KEY, "op_2", 10)
    token = csrf_token(KEY, a)
    assert csrf_ok(KEY, a, token)
    assert not csrf_ok(KEY, b, token)
    assert not csrf_ok(KEY, a, None) and not csrf_ok(KEY, None, token) and not csrf_ok(KEY, a, token[:-1])


DOC = {
    "name": "order",
    "steps": [
        {"name": "reserve", "type": "task", "onFailure": "release"},
        {"name": "pay", "type": "wait", "signal": "paid", "timeout": "2d", "onTimeout": "release"},
        {
            "name": "route",
            "type": "choice",
            "choices": [{"when": {"path": "state.x", "op": "exists", "value": True}, "next": "ship"}],
            "default": "$stuck",
        },
        {"name": "ship", "type": "task", "next": "$end"},
        {"name": "release", "type": "task", "next": "$fail"},
    ],
}


def test_edges_cover_every_transition() -> None:
    assert graph.edges(DOC) == [
        graph.Edge("reserve", "pay", "", "next"),
        graph.Edge("reserve", "release", "on failure", "failure"),
        graph.Edge("pay", "route", "", "next"),
        graph.Edge("pay", "release", "on timeout", "timeout"),
        graph.Edge("route", "ship", "when #1", "choice"),
        graph.Edge("route", "$stuck", "default", "default"),
        graph.Edge("ship", "$end", "", "next"),
        graph.Edge("release", "$fail", "", "next"),
    ]
    last_default = {"name": "x", "steps": [{"name": "a", "type": "sleep", "duration": "1s"}]}
    assert graph.edges(last_default) == [graph.Edge("a", "$end", "", "next")]


def test_svg_marks_and_nodes() -> None:
    svg = graph.render(DOC, graph.Marks("pay", frozenset({"reserve", "pay"}), frozenset({"reserve"})))
    nodes = dict(re.findall(r'<g class="([^"]*)" data-step="([^"]+)">', svg)[i][::-1] for i in range(8))
    assert nodes["reserve"] == "node kind-task failed"  # failed wins over passed-through
    assert nodes["pay"] == "node kind-wait visited current"
    assert nodes["ship"] == "node kind-task"
    assert (
        nodes["$end"] == "node sentinel"
        and nodes["$fail"] == "node sentinel"
        and nodes["$stuck"] == "node sentinel"
    )
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    # adjacent `next` edges are short lines; the other six run in lanes with labels
    assert svg.count('<line class="edge"') == 2
    assert svg.count('<path class="edge') == 6
    assert ">on failure<" in svg and ">when #1<" in svg and ">default<" in svg


def test_on_signal_branches_are_edges_and_labels_never_overlap() -> None:
    doc = {
        "name": "x",
        "steps": [
            {"name": "w", "type": "wait", "signals": ["a", "b"], "onSignal": {"a": "t", "b": "u"}},
            {
                "name": "c",
                "type": "choice",
                "choices": [
                    {"when": {"path": "input", "op": "exists"}, "next": n}
                    for n in ("t", "u", "$end", "$fail", "w")
                ],
                "default": "$stuck",
            },
            {"name": "t", "type": "task"},
            {"name": "u", "type": "task"},
        ],
    }
    kinds = [(e.source, e.target, e.label) for e in graph.edges(doc) if e.kind == "signal"]
    assert kinds == [("w", "t", "on a"), ("w", "u", "on b")]
    svg = graph.render(doc)
    labels = re.findall(r'<text class="edge-label" x="([\d.]+)" y="([\d.]+)">([^<]*)</text>', svg)
    assert {text for _, _, text in labels} >= {"on a", "on b", "when #1", "when #5", "default"}
    spots = [(x, float(y)) for x, y, _ in labels]
    for i, (x, y) in enumerate(spots):  # no two labels on the same line within a line's height
        assert all(not (x == x2 and abs(y - y2) < graph.LABEL_LINE) for x2, y2 in spots[i + 1 :])


def test_svg_escapes_text() -> None:
    hostile = {"name": "x", "steps": [{"name": "a<b>&", "type": "task<script>"}]}
    svg = graph.render(hostile, graph.Marks("a<b>&"))
    assert "<script>" not in svg and "a<b>" not in svg
    assert "a&lt;b&gt;&amp;" in svg and "task&lt;script&gt;" in svg


def test_diff_lines() -> None:
    old = {"name": "x", "steps": [{"name": "a", "type": "task"}]}
    new = {"name": "x", "steps": [{"name": "a", "type": "task"}, {"name": "b", "type": "task"}]}
    lines = diff_lines(old, new)
    assert lines[0] == ("@", "@@ -4,6 +4,10 @@")
    assert [line for kind, line in lines if kind == "+"] == [
        "+    },",
        "+    {",
        '+      "name": "b",',
        '+      "type": "task"',
    ]
    assert [line for kind, line in lines if kind == "-"] == []
    assert diff_lines(old, old) == []
