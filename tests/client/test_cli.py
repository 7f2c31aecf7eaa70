"""The operator CLI through `click.testing` against a live Foliot (both stores): every command,
tables and `--json` parsed back, profiles, exit codes and one-line errors; and the engine's
`foliot` delegating to it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result
from foliot_client.cli import cli
from foliot_client.cli import main as cli_main

from foliot.cli import main as engine_main

from ..conftest import ADMIN, Api
from ..helpers import answer_json

FLOW_YAML = """\
name: flow
steps:
  - name: reserve
    type: task
    retry: {maxAttempts: 1}
  - name: pay
    type: wait
    signal: paid
  - name: ship
    type: task
"""


class Cli:
    def __init__(self, api: Api, tmp: Path) -> None:
        self.env = {
            "FOLIOT_URL": api.running.url,
            "FOLIOT_TOKEN": api.key,
            "FOLIOT_APP": api.app,
            "FOLIOT_CONFIG": str(tmp / "none.toml"),
            "FOLIOT_PROFILE": "",
            "COLUMNS": "200",
        }

    async def __call__(self, *args: str, env: dict[str, str] | None = None, code: int = 0) -> Result:
        runner = CliRunner()
        merged = {**self.env, **(env or {})}
        result = await trio.to_thread.run_sync(lambda: runner.invoke(cli, list(args), env=merged))
        assert result.exit_code == code, (args, result.exit_code, result.output, result.stderr)
        return result

    async def json(self, *args: str, **kw: Any) -> Any:
        return json.loads((await self("--json", *args, **kw)).stdout)


@pytest.fixture
def run_cli(api: Api, tmp_path: Path) -> Cli:
    return Cli(api, tmp_path)


async def test_workflows_push_list_show_diff(api: Api, run_cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(FLOW_YAML)
    pushed = await run_cli.json("workflows", "push", str(path))
    assert pushed["workflows"] == [{"file": str(path), "name": "flow", "version": 1, "created": True}]
    table = (await run_cli("workflows", "push", str(path))).stdout
    assert "flow" in table and "False" in table  # unchanged: same version
    (tmp_path / "flow.json").write_text(json.dumps({**_flow(), "runTimeout": "1d"}))
    assert (await run_cli.json("workflows", "push", str(tmp_path / "flow.json")))["workflows"][0][
        "version"
    ] == 2

    listed = await run_cli.json("workflows", "list")
    assert [(w["name"], w["version"]) for w in listed["workflows"]] == [("flow", 2)]
    shown = await run_cli.json("workflows", "show", "flow", "--version", "1")
    assert shown["definition"]["steps"][1]["signal"] == "paid"
    assert "signal: paid" in (await run_cli("workflows", "show", "flow")).stdout
    diff = (await run_cli("workflows", "diff", "flow")).stdout
    assert '+  "runTimeout": "1d",' in diff and "--- flow v1" in diff
    same = await run_cli.json("workflows", "diff", "flow", "--file", str(tmp_path / "flow.json"))
    assert same["same"] is True
    assert (await run_cli("workflows", "diff", "flow", "1", "1")).stdout == ""


def _flow() -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(FLOW_YAML))


async def test_runs_from_start_to_every_intervention(api: Api, run_cli: Cli) -> None:
    api.handler.route("reserve", lambda body, h: answer_json({"ok": 1}))
    await api.register(_flow())
    run = await run_cli.json("runs", "start", "flow", "--input", '{"orderId": 7}', "--business-key", "o-7")
    run_id = run["runId"]
    assert run["input"] == {"orderId": 7}
    await api.until(run_id, "waiting")
    shown = await run_cli.json("runs", "show", run_id)
    assert shown["status"] == "waiting" and shown["state"] == {"reserve": {"ok": 1}}
    assert run_id in (await run_cli("runs", "show", run_id)).stdout
    listed = await run_cli.json("runs", "list", "--status", "waiting")
    assert [r["runId"] for r in listed["runs"]] == [run_id]
    assert run_id in (await run_cli("runs", "list")).stdout

    sent = await run_cli.json(
        "runs", "signal", "paid", "--workflow", "flow", "--business-key", "o-7", "--payload", "[1]"
    )
    assert sent == {"runId": run_id, "status": "delivered"}
    await api.until(run_id, "completed")
    events = await run_cli.json("runs", "events", run_id)
    assert events["events"][0]["type"] == "run_started" and events["events"][-1]["type"] == "run_completed"
    assert "signal_received" in (await run_cli("runs", "events", run_id)).stdout

    rewound = await run_cli.json("runs", "rewind", run_id, "--to", "pay", "--reason", "again")
    assert rewound["currentStep"] == "pay" and rewound["status"] == "waiting"
    edited = await run_cli.json(
        "runs", "edit-state", run_id, "--set", 'note="vip"', "--unset", "ship", "--reason", "ops"
    )
    assert edited["state"]["note"] == "vip" and "ship" not in edited["state"]
    skipped = await run_cli("runs", "skip", run_id, "--output", '{"by": "phone"}')
    assert "skipped a step of run" in skipped.stdout
    await api.until(run_id, "completed")
    result = await run_cli("runs", "cancel", run_id, code=4)
    assert result.stderr.startswith("error: 409 invalid_status") and result.stderr.count("\n") == 1

    api.handler.route(
        "reserve", lambda body, h: answer_json({"error": {"class": "x", "retryable": False}}, 500)
    )
    second = await run_cli.json("runs", "start", "flow")
    await api.until(second["runId"], "failed")
    api.handler.route("reserve", lambda body, h: answer_json({"ok": 2}))
    redriven = await run_cli.json("runs", "redrive", second["runId"], "--reason", "fixed")
    assert redriven["generation"] == 2
    await api.until(second["runId"], "waiting")
    cancelled = await run_cli("runs", "cancel", second["runId"], "--reason", "no")
    assert "now cancelled" in cancelled.stdout


async def test_errors_exit_codes_and_usage(api: Api, run_cli: Cli) -> None:
    missing = await run_cli("runs", "show", "run_nope", code=3)
    assert missing.stderr.startswith("error: 404 not_found") and missing.stdout == ""
    await run_cli("runs", "start", "flow", code=3)  # no such workflow yet
    await api.register(_flow())
    bad = await run_cli("runs", "start", "flow", "--run-timeout", "1.5s", code=1)
    assert "400 invalid_request [runTimeout]" in bad.stderr
    await run_cli("runs", "start", "flow", "--input", "{not json", code=2)
    await run_cli("runs", "signal", "paid", code=2)
    await run_cli("runs", "list", env={"FOLIOT_TOKEN": "fk_x.y"}, code=1)
    unreachable = await run_cli("runs", "list", env={"FOLIOT_URL": "http://127.0.0.1:9"}, code=5)
    assert unreachable.stderr.startswith("error: cannot reach the server")
    await run_cli("runs", "list", env={"FOLIOT_APP": ""}, code=2)
    await run_cli("runs", "list", "--profile", "nope", code=2)


async def test_profiles_file(api: Api, run_cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[profiles.default]\nurl = "http://127.0.0.1:9"\n\n'
        f'[profiles.local]\nurl = "{api.running.url}"\ntoken = "{api.key}"\napp = "{api.app}"\n'
    )
    env = {"FOLIOT_CONFIG": str(config), "FOLIOT_URL": "", "FOLIOT_TOKEN": "", "FOLIOT_APP": ""}
    assert (await run_cli.json("--profile", "local", "runs", "list", env=env))["runs"] == []
    assert (await run_cli.json("runs", "list", env={**env, "FOLIOT_PROFILE": "local"}))["runs"] == []
    await run_cli("runs", "list", env=env, code=2)  # default profile has no token


async def test_apps_limits_shows_and_sets_overrides(api: Api, run_cli: Cli) -> None:
    admin = {"FOLIOT_TOKEN": ADMIN}
    shown = await run_cli.json("apps", "limits", api.app, env=admin)
    assert shown["limits"]["maxOpenRuns"] == {
        "value": 1_000_000,
        "source": "default",
        "setting": "FOLIOT_APP_MAX_OPEN_RUNS",
    }
    changed = await run_cli.json(
        "apps", "limits", api.app, "--set", "maxOpenRuns=5000", "--set", "scheduleFireRate=2.5", env=admin
    )
    assert changed["limits"]["maxOpenRuns"]["value"] == 5000
    assert changed["limits"]["scheduleFireRate"] == {
        "value": 2.5,
        "source": "override",
        "setting": "FOLIOT_SCHEDULE_FIRE_RATE_PER_APP",
    }
    table = (await run_cli("apps", "limits", api.app, "--set", "maxOpenRuns=default", env=admin)).stdout
    assert "maxOpenRuns" in table and "override" in table  # scheduleFireRate still is
    back = await run_cli.json("apps", "limits", api.app, env=admin)
    assert back["limits"]["maxOpenRuns"]["value"] == 1_000_000
    await run_cli("apps", "limits", api.app, "--set", "maxOpenRuns", env=admin, code=2)
    await run_cli("apps", "limits", api.app, "--set", "nope=1", env=admin, code=1)  # the server's 400
    await run_cli("apps", "limits", api.app, code=1)  # an app key is no admin


async def test_apps_actors_timers_queues_as_admin(api: Api, run_cli: Cli) -> None:
    admin = {"FOLIOT_TOKEN": ADMIN}
    created = await run_cli.json(
        "apps", "create", "billing", "--handler-base-url", "http://127.0.0.1:1", env=admin
    )
    assert created["apiKey"].startswith("fk_") and created["signingSecret"]
    assert (created["weight"], created["rateLimit"]) == (1, None)
    flow = await run_cli.json(
        "apps", "create", "billing", "--handler-base-url", "http://127.0.0.1:1",
        "--weight", "4", "--rate-limit", "100/1m", env=admin,
    )  # fmt: skip
    assert (flow["weight"], flow["rateLimit"]) == (4, {"limit": 100, "periodMs": 60_000})
    flow = await run_cli.json(
        "apps", "create", "billing", "--handler-base-url", "http://127.0.0.1:1", "--no-rate-limit", env=admin
    )
    assert (flow["weight"], flow["rateLimit"]) == (4, None)
    await run_cli(
        "apps", "create", "billing", "--handler-base-url", "http://127.0.0.1:1", "--rate-limit", "100",
        env=admin, code=2,
    )  # fmt: skip
    key = await run_cli.json("apps", "keys", "create", "billing", env=admin)
    rotated = await run_cli.json("apps", "rotate-secret", "billing", "--grace", "60", env=admin)
    view = await run_cli.json("apps", "show", "billing", env=admin)
    assert {k["keyId"] for k in view["apiKeys"]} == {created["keyId"], key["keyId"]}
    assert rotated["secretId"] in {s["secretId"] for s in view["signingSecrets"]}
    revoked = await run_cli.json("apps", "keys", "revoke", key["keyId"], "--app", "billing", env=admin)
    assert revoked["revoked"] is True
    assert "billing" in (await run_cli("apps", "show", env={**admin, "FOLIOT_APP": "billing"})).stdout
    await run_cli("apps", "show", "billing", code=1)  # an app key may not read another app

    await api.register({"name": "q", "steps": [{"name": "pick", "type": "task", "queue": "warehouse"}]})
    run = await api.start("q")
    await api.until(run["runId"], "running")
    actors = await run_cli.json("actors", env=admin)
    assert run["runId"] in {a["runId"] for a in actors["actors"]}
    assert "warehouse" in (await run_cli("actors", env=admin)).stdout
    one = await run_cli.json("actors", run["runId"], env=admin)
    assert one["inflight"]["queue"] == "warehouse"
    assert "count" in await run_cli.json("timers", env=admin)
    with trio.fail_after(10):
        while not (queues := (await run_cli.json("queues", env=admin))["queues"]):
            await trio.sleep(0.01)
    assert queues == [{"app": api.app, "queue": "warehouse", "depth": 1, "waitingPollers": 0}]
    assert "warehouse" in (await run_cli("queues", env=admin)).stdout
    await run_cli("timers", code=1)  # an app key is no admin


async def test_engine_foliot_command_delegates_operator_commands(
    api: Api, run_cli: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await api.register(_flow())
    for name, value in run_cli.env.items():
        monkeypatch.setenv(name, value)
    code = await trio.to_thread.run_sync(lambda: engine_main(["--json", "workflows", "list"]))
    assert code == 0
    assert json.loads(capsys.readouterr().out)["workflows"][0]["name"] == "flow"
    code = await trio.to_thread.run_sync(lambda: engine_main(["runs", "show", "run_nope"]))
    assert code == 3 and capsys.readouterr().err.startswith("error: 404 not_found")
    assert await trio.to_thread.run_sync(lambda: cli_main(["nope"])) == 2


async def test_why_pause_unpause_and_bulk(api: Api, run_cli: Cli) -> None:
    await api.register({"name": "q", "steps": [{"name": "pick", "type": "task", "queue": "warehouse"}]})
    run = await api.start("q")
    await api.until(run["runId"], "running")
    why = await run_cli.json("why", run["runId"])
    assert why["runId"] == run["runId"] and "warehouse" in why["summary"]
    text = (await run_cli("why", run["runId"])).stdout
    lines = text.splitlines()  # the summary names durations, which move between the two calls
    assert lines[0].startswith("needs attention: queued on `warehouse`") and why["attention"] is True
    assert len(lines) == 1 + len(why["facts"]) and "  - 1 task(s) wait on `warehouse`" in lines
    await run_cli("why", "run_nope", code=3)

    paused = await run_cli.json("runs", "pause", run["runId"], "--reason", "hold")
    assert paused["status"] == "paused"
    assert "now running" in (await run_cli("runs", "unpause", run["runId"])).stdout
    others = [(await api.start("q"))["runId"] for _ in range(3)]
    for run_id in others:
        await api.until(run_id, "running")
    done = await run_cli.json(
        "runs", "bulk", "cancel", "--workflow", "q", "--page-size", "2", "--reason", "x", "--yes"
    )
    assert (done["acted"], done["matched"], done["skipped"]) == (4, 4, 0) and done["pages"] >= 2
    again = (await run_cli("runs", "bulk", "cancel", "--workflow", "q", "--yes")).stdout
    assert "cancelled 0 of 4 matching runs (4 skipped)" in again
    asked = (await run_cli("runs", "bulk", "cancel", "--workflow", "q")).stdout
    assert "nothing to do: would cancel 0 of 4 matching runs (4 skipped)" in asked
    await run_cli("runs", "bulk", "explode", "--workflow", "q", code=2)


async def test_signal_with_start_from_the_cli(api: Api, run_cli: Cli) -> None:
    await api.register({"name": "cart", "steps": [{"name": "w", "type": "wait", "signal": "add"}]})
    args = ("runs", "signal", "add", "--workflow", "cart", "--business-key", "c-1", "--start-if-missing")
    started = await run_cli.json(*args, "--input", '{"u": 7}', "--payload", "1")
    assert started["started"] is True
    assert (await api.until(started["runId"], "completed"))["input"] == {"u": 7}
    await run_cli("runs", "signal", "add", "--run", started["runId"], "--start-if-missing", code=2)
    await run_cli("runs", "signal", "add", "--run", started["runId"], "--input", "1", code=2)


ROOT = Path(__file__).parents[2]


async def through_a_pipe(run_cli: Cli, *args: str, env: dict[str, str] | None = None, code: int = 0) -> str:
    """The engine's `foliot` as a real process whose stdout is a pipe, 80 columns wide."""
    path = os.pathsep.join(
        filter(None, [str(ROOT), str(ROOT / "clients" / "python"), os.environ.get("PYTHONPATH")])
    )
    full = {**os.environ, **run_cli.env, "COLUMNS": "80", "PYTHONPATH": path, **(env or {})}
    done = await trio.run_process(
        [sys.executable, "-m", "foliot.cli", *args], env=full, capture_stdout=True, capture_stderr=True,
        check=False,
    )  # fmt: skip
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == code, (args, done.returncode, out, err)
    assert "…" not in out and "Traceback" not in err, (out, err)
    return out


def fields(text: str) -> dict[str, str]:
    """`field  value` lines (a record, or one block of a vertical table) as a mapping."""
    pairs = (line.split(None, 1) for line in text.splitlines() if line.strip())
    return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}


async def test_server_strings_are_shown_literally_and_never_cut_at_80_columns(api: Api, run_cli: Cli) -> None:
    message = "[/items] missing [bold]x :ship: :thumbs_up:"
    api.handler.route(
        "ship", lambda body, h: answer_json({"error": {"class": "no[/x]", "message": message,
                                                       "retryable": False}}, 500)
    )  # fmt: skip
    await api.register({"name": "hostile", "steps": [{"name": "ship", "type": "task"}]})
    run = await api.start("hostile", {"note": "[red]:ship:[/red]"}, businessKey="k[/x]")
    run_id = run["runId"]
    await api.until(run_id, "failed")

    listed = await through_a_pipe(run_cli, "runs", "list")
    assert fields(listed)["runId"] == run_id and fields(listed)["businessKey"] == "k[/x]"
    shown = await through_a_pipe(run_cli, "runs", "show", run_id)
    assert message in shown and '"note":"[red]:ship:[/red]"' in shown and "no[/x]" in shown
    events = await through_a_pipe(run_cli, "runs", "events", run_id)
    assert f'"idempotencyKey":"{run_id}:1:ship:1"' in events and "🚢" not in events + shown
    why = await through_a_pipe(run_cli, "why", run_id)
    assert why.startswith("needs attention") and "🚢" not in why
    started = await through_a_pipe(run_cli, "runs", "start", "hostile", "--business-key", ":ship:[/x]")
    assert fields(started)["businessKey"] == ":ship:[/x]"

    created = fields(
        await through_a_pipe(
            run_cli, "apps", "create", "long-one", "--handler-base-url", "http://127.0.0.1:1/" + "p" * 90,
            env={"FOLIOT_TOKEN": ADMIN},
        )
    )  # fmt: skip
    assert created["handlerBaseUrl"] == "http://127.0.0.1:1/" + "p" * 90
    key = created["apiKey"]
    answer = await api.call("GET", "/apps/long-one/workflows", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, (created, answer.text)  # the key printed whole works
    minted = fields(
        await through_a_pipe(run_cli, "apps", "keys", "create", "long-one", env={"FOLIOT_TOKEN": ADMIN})
    )
    answer = await api.call(
        "GET", "/apps/long-one/workflows", headers={"Authorization": f"Bearer {minted['apiKey']}"}
    )
    assert answer.status_code == 200
    rotated = fields(
        await through_a_pipe(run_cli, "apps", "rotate-secret", "long-one", env={"FOLIOT_TOKEN": ADMIN})
    )
    assert len(rotated["signingSecret"]) >= 32


HOSTILE = "k\x1b[8mhid\x1b]0;pwned\x07\x1b[1A\x1b[2K\x9b2J"
HOSTILE_SHOWN = "k\\x1b[8mhid\\x1b]0;pwned\\x07\\x1b[1A\\x1b[2K\\x9b2J"


async def test_control_codes_from_the_server_reach_the_terminal_escaped(api: Api, run_cli: Cli) -> None:
    """A business key and a handler's error message carrying ESC sequences (hidden text, a
    window title, cursor up + erase line) and a C1 CSI: `runs list`, `runs show`, `why` and an
    error show them escaped as `\\x1b`; `--json` gives them as the server sent them."""
    api.handler.route(
        "ship", lambda body, h: answer_json({"error": {"class": "boom", "message": f"bad {HOSTILE}",
                                                       "retryable": False}}, 500)
    )  # fmt: skip
    await api.register({"name": "hostile", "steps": [{"name": "ship", "type": "task"}]})
    run = await api.start("hostile", businessKey=HOSTILE)
    run_id = run["runId"]
    await api.until(run_id, "failed")

    def clean(text: str) -> str:
        assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)
        return text

    listed = clean(await through_a_pipe(run_cli, "runs", "list"))
    assert fields(listed)["businessKey"] == HOSTILE_SHOWN
    wide = clean((await run_cli("runs", "list")).stdout)  # a table, 200 columns
    assert HOSTILE_SHOWN in wide
    shown = clean(await through_a_pipe(run_cli, "runs", "show", run_id))
    assert fields(shown)["businessKey"] == HOSTILE_SHOWN
    assert '"message":"bad k\\u001b[8mhid' in shown and "\\u009b2J" in shown  # a JSON cell: JSON's escapes
    why = clean(await through_a_pipe(run_cli, "why", run_id))
    assert f"bad {HOSTILE_SHOWN}" in why, why
    as_json = await run_cli.json("runs", "list")
    assert as_json["runs"][0]["businessKey"] == HOSTILE
    assert f"bad {HOSTILE}" in (await run_cli.json("why", run_id))["summary"]
    named = ("--workflow", "hostile", "--business-key", HOSTILE)
    refused = await run_cli("runs", "signal", "go", *named, code=3)
    assert clean(refused.stderr).startswith("error: 404") and HOSTILE_SHOWN in refused.stderr


async def test_a_table_that_fits_stays_a_table_with_whole_values(api: Api, run_cli: Cli) -> None:
    await api.register({"name": "q", "steps": [{"name": "pick", "type": "task", "queue": "warehouse"}]})
    await api.start("q")
    with trio.fail_after(10):
        while not (await run_cli.json("queues", env={"FOLIOT_TOKEN": ADMIN}))["queues"]:
            await trio.sleep(0.01)
    table = (await through_a_pipe(run_cli, "queues", env={"FOLIOT_TOKEN": ADMIN})).splitlines()
    assert table[0].split() == ["app", "queue", "depth", "waitingPollers"]
    assert table[1].split() == [api.app, "warehouse", "1", "0"]


async def test_shared_options_go_before_or_after_the_command(api: Api, run_cli: Cli) -> None:
    await api.register(_flow())
    nothing = {"FOLIOT_URL": "http://127.0.0.1:9", "FOLIOT_TOKEN": "", "FOLIOT_APP": ""}
    where = ("--url", api.running.url, "--token", api.key, "--app", api.app)
    after = await run_cli("workflows", "list", *where, "--json", env=nothing)
    before = await run_cli("--json", *where, "workflows", "list", env=nothing)
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert json.loads(after.stdout)["workflows"][0]["name"] == "flow"
    # After the command wins over before it.
    await run_cli("--app", "nope", "runs", "list", "--app", api.app, "--json")
    await run_cli("--app", api.app, "runs", "list", "--app", "nope", code=1)  # a key for another app
    listed = await through_a_pipe(run_cli, "runs", "list", "--json")  # as the README shows it
    assert json.loads(listed) == {"runs": [], "nextCursor": None}


async def test_foliot_help_lists_the_operator_commands(run_cli: Cli) -> None:
    shown = await through_a_pipe(run_cli, "--help")
    assert "serve" in shown and "migrate" in shown
    for command in ("runs", "workflows", "apps", "tokens", "actors", "timers", "queues", "why"):
        assert f"\n  {command} " in shown, command
    assert "bulk, cancel" in shown


async def test_bulk_asks_first_and_dry_run_changes_nothing(api: Api, run_cli: Cli) -> None:
    await api.register(WAITER)
    runs = [(await api.start("waiter", businessKey=f"b-{i}"))["runId"] for i in range(3)]
    for run_id in runs:
        await api.until(run_id, "waiting")
    await run_cli("runs", "pause", runs[0])

    dry = await run_cli.json("runs", "bulk", "pause", "--workflow", "waiter", "--dry-run")
    assert (dry["matched"], dry["wouldAct"], dry["skipped"]) == (3, 2, 1)
    assert {r["runId"]: r["would"] for r in dry["runs"]} == {
        runs[0]: "skip",
        runs[1]: "pause",
        runs[2]: "pause",
    }
    text = await through_a_pipe(run_cli, "runs", "bulk", "pause", "--workflow", "waiter", "--dry-run")
    assert all(run_id in text for run_id in runs)
    assert "dry run: would pause 2 of 3 matching runs (1 skipped); nothing changed" in text
    assert [(await api.run(r))["status"] for r in runs] == ["paused", "waiting", "waiting"]

    runner = CliRunner()
    args = ["runs", "bulk", "pause", "--workflow", "waiter"]
    said_no = await trio.to_thread.run_sync(lambda: runner.invoke(cli, args, env=run_cli.env, input="n\n"))
    assert said_no.exit_code == 1 and "pause 2 of 3 matching runs" in said_no.stderr
    assert "not confirmed: nothing changed" in said_no.stderr
    no_input = await trio.to_thread.run_sync(lambda: runner.invoke(cli, args, env=run_cli.env))
    assert no_input.exit_code == 1
    assert [(await api.run(r))["status"] for r in runs] == ["paused", "waiting", "waiting"]
    said_yes = await trio.to_thread.run_sync(lambda: runner.invoke(cli, args, env=run_cli.env, input="y\n"))
    assert said_yes.exit_code == 0, said_yes.output
    assert "paused 2 of 3 matching runs (1 skipped)" in said_yes.stdout
    assert [(await api.run(r))["status"] for r in runs] == ["paused"] * 3


WAITER = {"name": "waiter", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


async def test_operator_tokens(api: Api, run_cli: Cli) -> None:
    admin = {"FOLIOT_TOKEN": ADMIN}
    made = fields(
        await through_a_pipe(run_cli, "tokens", "create", "--role", "viewer", "--name", "ana", env=admin)
    )
    assert (made["role"], made["name"]) == ("viewer", "ana") and made["token"].startswith("fo_")
    viewer = {"Authorization": f"Bearer {made['token']}"}
    assert (await api.call("GET", f"/apps/{api.app}/runs", headers=viewer)).status_code == 200
    listed = await run_cli.json("tokens", "list", env=admin)
    assert [(t["tokenId"], t["name"], t["role"]) for t in listed["tokens"]] == [
        (made["tokenId"], "ana", "viewer")
    ]
    assert "token" not in listed["tokens"][0]
    assert made["tokenId"] in (await through_a_pipe(run_cli, "tokens", "list", env=admin))
    await run_cli("tokens", "create", "--role", "root", env=admin, code=2)
    await run_cli("tokens", "list", code=1)  # an app key is no admin
    await run_cli("tokens", "list", env={"FOLIOT_TOKEN": made["token"]}, code=1)  # nor a viewer

    revoked = await run_cli.json("tokens", "revoke", made["tokenId"], env=admin)
    assert revoked == {"tokenId": made["tokenId"], "revoked": True}
    assert (await api.call("GET", f"/apps/{api.app}/runs", headers=viewer)).status_code == 401
    await run_cli("tokens", "revoke", made["tokenId"], env=admin, code=3)
    assert (await run_cli.json("tokens", "list", env=admin))["tokens"] == []


async def test_runs_list_shows_and_filters_attention(api: Api, run_cli: Cli) -> None:
    """Issue 26 point 9: a run whose status looks healthy but that needs a look says why."""
    await api.register(
        {"name": "pay", "steps": [{"name": "w", "type": "wait", "signal": "payment-confirmed"}]}
    )
    typo = await api.start("pay")
    healthy = await api.start("pay")
    for run in (typo, healthy):
        await api.until(run["runId"], "waiting")
    r = await api.call(
        "POST",
        f"/apps/{api.app}/signals",
        {"name": "payment-confrimed", "runId": typo["runId"], "allowUnknown": True},  # past the 422
    )
    assert r.status_code == 202
    flagged = await run_cli.json("runs", "list", "--attention")
    assert [row["runId"] for row in flagged["runs"]] == [typo["runId"]]
    assert flagged["runs"][0]["attention"] == ["unconsumed_signal"]
    by_reason = await run_cli.json("runs", "list", "--attention", "unconsumed_signal")
    assert [row["runId"] for row in by_reason["runs"]] == [typo["runId"]]
    assert (await run_cli.json("runs", "list", "--attention", "retrying"))["runs"] == []
    table = (await run_cli("runs", "list")).stdout
    assert "attention" in table and "unconsumed_signal" in table


async def test_a_debounced_start_from_the_cli(api: Api, run_cli: Cli) -> None:
    await api.register({"name": "sync", "steps": [{"name": "t", "type": "task"}]})
    args = ("runs", "start", "sync", "--debounce-key", "order-7", "--debounce-period", "1h")
    first = await run_cli.json(*args, "--input", '{"n": 1}')
    assert first["debounced"] is True and first["status"] == "pending" and first["startsAt"]
    text = (await run_cli(*args, "--input", '{"n": 2}')).stdout
    assert fields(text)["runId"] == first["runId"] and fields(text)["status"] == "pending"
    assert (await api.run(first["runId"]))["input"] == {"n": 2}
    lead = ("runs", "start", "sync", "--debounce-key", "k", "--debounce-period", "1h", "--leading")
    started = await run_cli.json(*lead)
    assert started["status"] == "running" and "debounced" not in started
    dropped = await run_cli.json(*lead)
    assert dropped == {"runId": started["runId"], "debounced": True, "dropped": True}
    # Usage errors (exit 2) before anything is sent; the server's 400 names the field.
    await run_cli("runs", "start", "sync", "--debounce-key", "k", code=2)
    await run_cli("runs", "start", "sync", "--debounce-period", "1s", code=2)
    await run_cli("runs", "start", "sync", "--leading", code=2)
    await run_cli(*lead, "--idempotency-key", "x", code=2)
    bad = await run_cli("runs", "start", "sync", "--debounce-key", "k3", "--debounce-period", "8d", code=1)
    assert "debounce.period" in bad.stderr


async def test_bulk_redrive_reports_a_compensated_run_as_refused(api: Api, run_cli: Cli) -> None:
    """A run whose compensation reached $fail is refused by a redrive: the CLI names it and exits
    4 (a pipeline sees a run left behind), never counting it as redriven."""
    saga = {
        "name": "saga",
        "steps": [
            {"name": "charge", "type": "task", "retry": {"maxAttempts": 1}, "onFailure": "refund"},
            {"name": "refund", "type": "task", "next": "$fail"},
        ],
    }
    api.handler.route("charge", lambda b, h: answer_json({"error": {"class": "card_declined"}}, 400))
    await api.register(saga)
    run = await api.start("saga")
    await api.until(run["runId"], "failed")
    args = ("runs", "bulk", "redrive", "--workflow", "saga", "--status", "failed", "--yes")
    done = await run_cli.json(*args, code=4)
    assert (done["acted"], done["matched"], done["skipped"]) == (0, 1, 0)
    assert [(r["runId"], r["code"]) for r in done["refused"]] == [(run["runId"], "compensated")]
    text = (await run_cli(*args, code=4)).stdout
    assert "redriven 0 of 1 matching runs (0 skipped, 1 refused)" in text
    assert f"refused {run['runId']}: step 'charge' failed" in text and "rewind" in text


async def test_migrate_exits_6_when_runs_are_left_behind(api: Api, run_cli: Cli) -> None:
    """Issue 38, item 7: refused runs are a failure a pipeline sees (exit 6, documented), with
    `--json` too; a migrate that moves everything exits 0."""
    from ..api.test_deploys import V2, setup

    open_ids, _ = await setup(api)
    assert await api.register(V2) == 2
    left = await run_cli("workflows", "migrate", "order", "--to", "2", code=6)
    assert "matched 3, migrated 1, skipped 0" in left.stdout
    assert all(f"refused {rid} (v1 at a)" in left.stdout for rid in open_ids[:2])
    as_json = await run_cli("--json", "workflows", "migrate", "order", "--to", "2", code=6)
    assert sorted(r["runId"] for r in json.loads(as_json.stdout)["refused"]) == sorted(open_ids[:2])
    done = await run_cli("workflows", "migrate", "order", "--to", "2", "--map", "a=a2")
    assert "migrated 2" in done.stdout and "refused" not in done.stdout


async def test_bulk_preview_counts_every_run_and_lists_the_first_page(
    api: Api, run_cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37, item 9: the preview reads the runs a page at a time and keeps only the first
    `PREVIEW_SHOWN` to list (memory bounded by a page), while counting them all."""
    import foliot_client.cli as cli_module

    monkeypatch.setattr(cli_module, "PREVIEW_PAGE", 2)
    monkeypatch.setattr(cli_module, "PREVIEW_SHOWN", 3)
    await api.register(WAITER)
    runs = [(await api.start("waiter", businessKey=f"b-{i}"))["runId"] for i in range(5)]
    for run_id in runs:
        await api.until(run_id, "waiting")
    await run_cli("runs", "pause", runs[0])
    dry = await run_cli.json("runs", "bulk", "pause", "--workflow", "waiter", "--dry-run")
    assert (dry["matched"], dry["wouldAct"], dry["skipped"]) == (5, 4, 1)
    assert len(dry["runs"]) == 3 and {r["runId"] for r in dry["runs"]} <= set(runs)
    text = (await run_cli("runs", "bulk", "pause", "--workflow", "waiter", "--dry-run")).stdout
    assert "(the first 3 of 5 matching runs)" in text
    assert "dry run: would pause 4 of 5 matching runs (1 skipped); nothing changed" in text
    runner = CliRunner()
    args = ["runs", "bulk", "pause", "--workflow", "waiter"]
    said_no = await trio.to_thread.run_sync(lambda: runner.invoke(cli, args, env=run_cli.env, input="n\n"))
    assert said_no.exit_code == 1 and "pause 4 of 5 matching runs" in said_no.stderr
