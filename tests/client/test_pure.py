"""The client's pure parts, without I/O: error mapping, retry rules, answers, heartbeats,
CLI configuration, and signature verification on the vectors the engine generated."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from foliot_client import errors
from foliot_client._base import RetryPolicy, should_retry
from foliot_client.cli.config import ConfigError, resolve
from foliot_client.cli.render import (
    CONFLICT,
    NOT_FOUND,
    REFUSED,
    UNREACHABLE,
    Output,
    cell,
    exit_code,
    one_line,
    printable,
)
from foliot_client.handlers import HttpAnswer, answer_for_exception, answer_for_value
from foliot_client.outcomes import ACCEPTED, Next, TaskFailure, answer_of, failure_of
from foliot_client.signing import SignatureError, verify_signature
from foliot_client.worker import heartbeat_period

VECTORS = json.loads(Path(__file__).with_name("signing_vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_client_verifier_agrees_with_the_engine_vectors(vector: dict[str, Any]) -> None:
    body = vector["body"].encode()
    if vector["valid"]:
        verify_signature(body, vector["header"], vector["secrets"], now=vector["now"])
    else:
        with pytest.raises(SignatureError):
            verify_signature(body, vector["header"], vector["secrets"], now=vector["now"])


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "invalid_request", errors.InvalidRequest),
        (400, "output_too_large", errors.OutputTooLarge),
        (401, "unauthorized", errors.Unauthorized),
        (403, "forbidden", errors.Forbidden),
        (404, "not_found", errors.NotFound),
        (409, "invalid_status", errors.InvalidStatus),
        (409, "task_closed", errors.TaskClosed),
        (409, "business_key_in_use", errors.BusinessKeyInUse),
        (409, "run_closed", errors.RunClosed),
        (409, "idempotency_key_reused", errors.IdempotencyKeyReused),
        (409, "signal_buffer_full", errors.SignalBufferFull),
        (413, "signal_buffer_too_large", errors.PayloadTooLarge),
        (429, "overloaded", errors.Overloaded),
        (503, "unavailable", errors.Unavailable),
        (500, "internal", errors.InternalError),
        (409, "a_code_from_the_future", errors.Conflict),
        (418, "teapot", errors.InternalError),
    ],
)
def test_error_codes_map_to_classes(status: int, code: str, cls: type[errors.Refused]) -> None:
    error = errors.from_response(status, {"error": {"code": code, "message": "m", "field": "a.b"}})
    assert type(error) is cls
    assert (error.status, error.code, error.field) == (status, code, "a.b")
    assert str(error) == f"{status} {code} [a.b]: m"


def test_error_extras_and_bodies_that_are_not_errors() -> None:
    busy = errors.from_response(
        409, {"error": {"code": "business_key_in_use", "message": "m", "runId": "run_1"}}
    )
    assert isinstance(busy, errors.BusinessKeyInUse) and busy.run_id == "run_1"
    over = errors.from_response(
        429, {"error": {"code": "overloaded", "message": "m", "retryAfter": 2, "reason": "inflight"}}
    )
    assert isinstance(over, errors.Overloaded) and (over.retry_after, over.reason) == (2.0, "inflight")
    assert type(errors.from_response(502, None)) is errors.InternalError
    assert type(errors.from_response(503, "<html>")) is errors.Unavailable
    assert errors.from_response(500, None).code == "internal"


def test_retry_only_when_nothing_changed_or_the_call_is_safe() -> None:
    never_sent = errors.TransportError("refused", connected=False)
    maybe_sent = errors.TransportError("reset", connected=True)
    overloaded = errors.from_response(429, {"error": {"code": "overloaded", "message": ""}})
    unavailable = errors.from_response(503, {"error": {"code": "unavailable", "message": ""}})
    gateway = errors.from_response(502, None)
    conflict = errors.from_response(409, {"error": {"code": "invalid_status", "message": ""}})
    internal = errors.from_response(500, {"error": {"code": "internal", "message": ""}})
    for safe in (True, False):
        assert should_retry(never_sent, safe)
        assert should_retry(overloaded, safe)
        assert should_retry(unavailable, safe)
        assert not should_retry(conflict, safe)
        assert not should_retry(internal, safe)
    assert should_retry(maybe_sent, True) and not should_retry(maybe_sent, False)
    assert should_retry(gateway, True) and not should_retry(gateway, False)


def test_backoff_grows_caps_and_honours_retry_after() -> None:
    policy = RetryPolicy(initial_interval=1, coefficient=2, max_interval=5)
    error = errors.TransportError("x", connected=False)
    assert [policy.delay(n, error, rand=lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 5, 5]
    assert policy.delay(3, error, rand=lambda: 0.0) == 2  # jitter keeps at least half
    over = errors.from_response(429, {"error": {"code": "overloaded", "message": "", "retryAfter": 3}})
    assert policy.delay(1, over, rand=lambda: 0.0) == 3


def test_handler_results_become_complete_bodies() -> None:
    assert answer_of({"a": 1}) == {"output": {"a": 1}}
    assert answer_of(None) == {"output": None}
    assert answer_of(Next("ship", [1])) == {"output": [1], "next": "ship"}
    with pytest.raises(TypeError):
        answer_of(ACCEPTED)
    assert failure_of(TaskFailure("card_declined", "no", retryable=False)) == {
        "error": {"class": "card_declined", "message": "no", "retryable": False}
    }
    assert failure_of(KeyError("sku")) == {
        "error": {"class": "KeyError", "message": "'sku'", "retryable": True}
    }
    assert len(failure_of(ValueError("x" * 5000))["error"]["message"]) == 2048


def test_handler_results_become_push_answers() -> None:
    ok = answer_for_value({"é": "<&>"})
    assert (ok.status, ok.body, ok.final) == (200, '{"é":"<&>"}'.encode(), True)
    nxt = answer_for_value(Next("ship", 1))
    assert ("foliot-next", "ship") in nxt.headers and nxt.body == b"1"
    accepted = answer_for_value(ACCEPTED)
    assert (accepted.status, accepted.body, accepted.final) == (202, b"", True)
    retry = answer_for_exception(RuntimeError("db down"))
    assert retry.status == 500 and not retry.final
    assert json.loads(retry.body) == {
        "error": {"class": "RuntimeError", "message": "db down", "retryable": True}
    }
    final = answer_for_exception(TaskFailure("bad_sku", retryable=False))
    assert final.status == 422 and final.final
    not_json = answer_for_value(object())
    assert not_json.status == 500 and json.loads(not_json.body)["error"]["class"] == "invalid_output"
    assert not HttpAnswer(500, (), b"not json").final


def test_heartbeat_period_is_a_third_of_the_time_left() -> None:
    deadline = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    now = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert heartbeat_period(deadline, now, None) == 10
    assert heartbeat_period(deadline, now + 30, None) == 0.1  # late: as often as allowed
    assert heartbeat_period(deadline, now, 2.5) == 2.5
    assert heartbeat_period(None, now, None) is None


def test_cli_settings_come_from_flags_then_environment_then_profile() -> None:
    profiles = {
        "default": {"url": "http://d", "token": "td"},
        "prod": {"url": "http://p", "token": "tp", "app": "a"},
    }
    assert (
        resolve(url=None, token=None, app=None, profile=None, profiles={}, env={}).url
        == "http://127.0.0.1:8080"
    )
    base = resolve(url=None, token=None, app=None, profile=None, profiles=profiles, env={})
    assert (base.url, base.token, base.app) == ("http://d", "td", None)
    prod = resolve(
        url=None, token=None, app=None, profile=None, profiles=profiles, env={"FOLIOT_PROFILE": "prod"}
    )
    assert (prod.url, prod.token, prod.app) == ("http://p", "tp", "a")
    env = resolve(
        url=None, token=None, app=None, profile="prod", profiles=profiles, env={"FOLIOT_TOKEN": "te"}
    )
    assert env.token == "te"
    flag = resolve(
        url="http://f", token="tf", app="b", profile="prod", profiles=profiles, env={"FOLIOT_TOKEN": "te"}
    )
    assert (flag.url, flag.token, flag.app) == ("http://f", "tf", "b")
    with pytest.raises(ConfigError, match="no profile 'nope'"):
        resolve(url=None, token=None, app=None, profile="nope", profiles=profiles, env={})


def test_cli_exit_codes_and_one_line_errors() -> None:
    def err(status: int, code: str) -> errors.Refused:
        return errors.from_response(status, {"error": {"code": code, "message": "msg", "field": "steps[0]"}})

    assert exit_code(err(400, "invalid_request")) == REFUSED
    assert exit_code(err(404, "not_found")) == NOT_FOUND
    assert exit_code(err(409, "invalid_status")) == CONFLICT
    assert exit_code(err(429, "overloaded")) == UNREACHABLE
    assert exit_code(err(500, "internal")) == UNREACHABLE
    assert exit_code(errors.TransportError("refused", connected=False)) == UNREACHABLE
    assert one_line(err(400, "invalid_request")) == "error: 400 invalid_request [steps[0]]: msg"


HOSTILE = "k\x1b[8mhidden\x1b]0;pwned\x07\x1b[1A\x1b[2K\r\x9b31m\x7f\x00"
HOSTILE_SHOWN = "k\\x1b[8mhidden\\x1b]0;pwned\\x07\\x1b[1A\\x1b[2K\\x0d\\x9b31m\\x7f\\x00"


def test_printable_escapes_every_control_character_as_git_quotes_a_path() -> None:
    assert printable(HOSTILE) == HOSTILE_SHOWN
    assert printable("plain [/x] :ship: caf\u00e9 \u00a0 a\\b") == "plain [/x] :ship: caf\u00e9 \u00a0 a\\b"
    # In a string with something escaped, a backslash is doubled: `\x1b` always means ESC.
    assert printable("a\\x1b\x1b") == "a\\\\x1b\\x1b"
    assert printable("line\n\tnext") == "line\n\tnext"
    assert printable("line\n\tnext", keep="") == "line\\x0a\\x09next"
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        assert "\\x" in printable(chr(code), keep="") and chr(code) not in printable(chr(code), keep="")


def test_every_way_the_cli_prints_a_server_string_escapes_control_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = errors.from_response(400, {"error": {"code": "invalid_request", "message": HOSTILE + "\nx"}})
    assert one_line(refused) == f"error: 400 invalid_request: {HOSTILE_SHOWN}\\x0ax"
    assert cell(HOSTILE) == HOSTILE_SHOWN and cell({"k": "\x9b\x1b"}) == '{"k":"\\u009b\\u001b"}'
    out = Output(as_json=False)
    out.table([{"businessKey": HOSTILE}], ["businessKey"])
    out.record({"businessKey": HOSTILE, HOSTILE: 1})
    out.text(f"message {HOSTILE}")
    printed = capsys.readouterr().out
    assert printed.count(HOSTILE_SHOWN) == 4 and not any(c in printed for c in "\x1b\x07\x9b\x7f\x00\r")
    Output(as_json=True).record({"businessKey": HOSTILE})
    assert json.loads(capsys.readouterr().out) == {"businessKey": HOSTILE}  # --json: as the server sent it


def test_bidirectional_formatting_characters_are_shown_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """A business key with U+202E (right-to-left override) reached the terminal raw from
    `runs list`, `runs show`, `runs events` and `schedules show`: the rest of its line is shown
    reversed, so a cell could read as another run's id or status ("Trojan Source")."""
    spoof = "bk\u202edeliatf\u2066x\u2069\u200f"
    assert printable(spoof) == "bk\\u202edeliatf\\u2066x\\u2069\\u200f"
    assert cell({"k": "\u202e"}) == '{"k":"\\u202e"}'
    rtl = "caf\u00e9 \u05e9\u05dc\u05d5\u05dd"
    assert printable(rtl) == rtl  # right-to-left text itself stays
    out = Output(as_json=False)
    out.table([{"businessKey": spoof}], ["businessKey"])
    out.record({"input": {"k": spoof}})
    printed = capsys.readouterr().out
    assert not any(c in printed for c in "\u202e\u2066\u2069\u200f"), printed
