"""The operator CLI: `foliot runs|schedules|workflows|apps|tokens|actors|timers|queues|why …`.

Installed as `foliot-cli` by `pip install 'foliot-client[cli]'`; the engine's `foliot` command
hands every command other than `serve` and `migrate` to it. Talks HTTP only.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import yaml

from .._base import BULK_ACTIONS, OPERATOR_ROLES, UNSET, BulkSelection, Call, _raw
from ..client import Client
from ..errors import FoliotError
from .config import ConfigError, config_path, load_profiles, resolve
from .render import CONFLICT, LEFT_BEHIND, REFUSED, USAGE, Output, echo, exit_code, one_line, printable

T = TypeVar("T")

RUN_COLUMNS = (
    "runId",
    "workflow",
    "version",
    "status",
    "attention",
    "currentStep",
    "businessKey",
    "updatedAt",
)
ATTENTION = ("true", "retrying", "no_poller", "overdue", "unconsumed_signal")
RUN_FIELDS = (
    "runId", "app", "workflow", "version", "status", "priority", "businessKey", "currentStep", "attempt",
    "generation", "waitSignal", "wakeAt", "deadline", "createdAt", "updatedAt", "closedAt",
    "error", "parent", "children", "input", "state", "output",
)  # fmt: skip
DEBOUNCED_FIELDS = ("runId", "debounced", "status", "startsAt", "dropped")


class Session:
    """What every command needs: a client for the resolved server, the app, the output."""

    def __init__(self, url: str, token: str | None, app: str | None, out: Output, timeout: float) -> None:
        self.url = url
        self.token = token
        self.app = app
        self.out = out
        self.timeout = timeout
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self.token is None:
            fail("no token: pass --token, set FOLIOT_TOKEN, or add token to a profile")
        if self._client is None:
            self._client = Client(self.url, self.token, app=self.app, timeout=self.timeout)
        return self._client

    def need_app(self, app: str | None = None) -> str:
        name = app or self.app
        if not name:
            fail("no app: pass --app, set FOLIOT_APP, or add app to a profile")
        return name

    def raw(self, call: Call[Any]) -> Any:
        """Send a call and return the server's JSON document as it is."""
        return self.call(dataclasses.replace(call, parse=_raw))

    def call(self, call: Call[T]) -> T:
        try:
            return self.client.send(call)
        except FoliotError as exc:
            echo(one_line(exc), err=True)
            raise SystemExit(exit_code(exc)) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def fail(message: str) -> NoReturn:
    echo(f"error: {message}", err=True)
    raise SystemExit(USAGE)


def parse_json(text: str | None, what: str) -> Any:
    """A JSON value from an option: literal JSON, `@file` (JSON or YAML), or `-` for stdin."""
    if text is None:
        return UNSET
    try:
        if text == "-":
            return yaml.safe_load(sys.stdin.read())
        if text.startswith("@"):
            return yaml.safe_load(Path(text[1:]).read_text())
        return json.loads(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        fail(f"{what}: not JSON ({exc})")


def read_definition(path: str) -> dict[str, Any]:
    """A workflow definition from a `.yaml`/`.yml`/`.json` file (YAML is a superset of JSON)."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{path}: {exc}")
    if not isinstance(document, dict):
        fail(f"{path}: a workflow definition is a mapping")
    return document


@dataclasses.dataclass
class Flags:
    """The connection and output options, given before the command or after it (the later
    one wins): `foliot --json runs list` and `foliot runs list --json` are the same."""

    url: str | None = None
    token: str | None = None
    app: str | None = None
    profile: str | None = None
    as_json: bool = False
    timeout: float = 30.0


def _set_flag(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, _: click.Parameter, value: Any) -> Any:
        if value is not None and value is not False:
            flags = ctx.find_object(Flags)
            if flags is not None:  # None only while --help is shown before the group ran
                setattr(flags, name, value)
        return value

    return callback


#: (declarations, attributes) of the options accepted before and after the subcommand.
SHARED_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--url", "url"), {"help": "Foliot's base URL [FOLIOT_URL; default http://127.0.0.1:8080]"}),
    (("--token", "token"), {"help": "admin token, operator token or app key [FOLIOT_TOKEN]"}),
    (("--app", "app"), {"help": "the app [FOLIOT_APP]"}),
    (("--profile", "profile"), {"help": "a [profiles.NAME] of the config file [FOLIOT_PROFILE]"}),
    (("--json", "as_json"), {"is_flag": True, "default": None, "help": "print JSON documents, not tables"}),
)


def shared_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The group's connection and output options, accepted after the subcommand too (under
    other parameter names, so that `apps show APP` keeps its argument)."""
    for (flag, name), attrs in reversed(SHARED_OPTIONS):
        option = click.option(flag, f"shared_{name}", expose_value=False, callback=_set_flag(name), **attrs)
        f = option(f)
    return f


def group_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for decls, attrs in reversed(SHARED_OPTIONS):
        f = click.option(*decls, **attrs)(f)
    return f


def session_of(ctx: click.Context) -> Session:
    """The session of this invocation, made once, when the first command needs it (after every
    option, before and after the subcommand, is parsed)."""
    root = ctx.find_root()
    session = root.meta.get("foliot.session")
    if isinstance(session, Session):
        return session
    flags = ctx.find_object(Flags) or Flags()
    env = dict(os.environ)
    try:
        target = resolve(
            url=flags.url, token=flags.token, app=flags.app, profile=flags.profile,
            profiles=load_profiles(config_path(env)), env=env,
        )  # fmt: skip
    except ConfigError as exc:
        fail(str(exc))
    session = Session(target.url, target.token, target.app, Output(flags.as_json), flags.timeout)
    root.meta["foliot.session"] = session
    root.call_on_close(session.close)
    return session


def pass_session(f: Callable[..., T]) -> Callable[..., T]:
    """Hand the command its `Session` first, and accept the shared options after it."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> T:
        return f(session_of(click.get_current_context()), *args, **kwargs)

    return shared_options(run)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="The engine's `foliot` also has `serve` and `migrate`. Options shown here are also "
    "accepted after the command (`foliot runs list --json`). Exit codes: 0 ok, 1 refused (or a "
    "bulk action not confirmed), 2 usage, 3 not found, 4 conflict, 5 server unreachable or failing.",
)
@group_options
@click.option("--timeout", type=float, default=30.0, show_default=True, help="seconds per HTTP call")
@click.pass_context
def cli(
    ctx: click.Context,
    url: str | None,
    token: str | None,
    app: str | None,
    profile: str | None,
    as_json: bool | None,
    timeout: float,
) -> None:
    """Operate a Foliot server over its HTTP API."""
    ctx.obj = Flags(url, token, app, profile, bool(as_json), timeout)


# --- runs -------------------------------------------------------------------------------------


@cli.group()
def runs() -> None:
    """List, inspect, start, signal and intervene on runs."""


@runs.command("list")
@click.option("--workflow")
@click.option("--status")
@click.option("--business-key")
@click.option("--parent", "parent_run_id", metavar="RUN_ID", help="only the child runs of this run")
@click.option("--limit", type=int, default=20, show_default=True, help="runs to show (newest first)")
@click.option(
    "--attention",
    type=click.Choice(ATTENTION),
    is_flag=False,
    flag_value="true",
    default=None,
    help="only runs blocked while their status looks healthy; give a reason to keep only that one",
)
@pass_session
def runs_list(
    s: Session,
    workflow: str | None,
    status: str | None,
    business_key: str | None,
    parent_run_id: str | None,
    limit: int,
    attention: str | None,
) -> None:
    """Runs, newest first (follows pages up to --limit), with why each needs a look (`attention`)."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while len(rows) < limit:
        call = s.client.b_list_runs(
            workflow,
            status,
            business_key,
            min(limit - len(rows), 1000),
            cursor,
            s.need_app(),
            parent_run_id,
            attention,
        )
        page = s.raw(call)
        rows.extend(page["runs"])
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    shown = [{**row, "attention": ", ".join(row.get("attention") or ()) or None} for row in rows]
    s.out.table(shown, RUN_COLUMNS, {"runs": rows, "nextCursor": cursor})


@runs.command("show")
@click.argument("run_id")
@pass_session
def runs_show(s: Session, run_id: str) -> None:
    """One run document."""
    s.out.record(s.raw(s.client.b_get_run(run_id, s.need_app())), RUN_FIELDS)


@runs.command("events")
@click.argument("run_id")
@click.option("--after", type=int, help="only events after this seq")
@click.option("--limit", type=int, default=1000, show_default=True)
@pass_session
def runs_events(s: Session, run_id: str, after: int | None, limit: int) -> None:
    """The run's history, oldest first."""
    rows: list[dict[str, Any]] = []
    while len(rows) < limit:
        page = s.raw(s.client.b_list_events(run_id, after, min(limit - len(rows), 1000), s.need_app()))
        rows.extend(page["events"])
        if page.get("nextCursor") is None or not page["events"]:
            break
        after = page["events"][-1]["seq"]
    s.out.table(rows, ("seq", "at", "generation", "type", "step", "attempt", "data"), {"events": rows})


@runs.command("start")
@click.argument("workflow")
@click.option("--input", "input_", help="JSON, @file.json|yaml, or - for stdin")
@click.option("--version", type=int)
@click.option("--business-key")
@click.option("--run-timeout", help="e.g. 14d")
@click.option("--idempotency-key", help="default: a fresh one (safe retries)")
@click.option("--priority", type=click.IntRange(1, 5), help="1 (highest)..5; default 3")
@click.option("--debounce-key", help="debounce: starts with this key within the period make one run")
@click.option("--debounce-period", help="with --debounce-key: the burst's quiet period, e.g. 10s")
@click.option(
    "--leading", is_flag=True, help="with --debounce-key: start at once, drop the rest of the burst"
)
@pass_session
def runs_start(
    s: Session,
    workflow: str,
    input_: str | None,
    version: int | None,
    business_key: str | None,
    run_timeout: str | None,
    idempotency_key: str | None,
    priority: int | None,
    debounce_key: str | None,
    debounce_period: str | None,
    leading: bool,
) -> None:
    """Start a run of WORKFLOW (debounced with --debounce-key and --debounce-period)."""
    value = parse_json(input_, "--input")
    if debounce_key is None:
        if debounce_period is not None or leading:
            raise click.UsageError("--debounce-period and --leading need --debounce-key")
        call = s.client.b_start_run(
            workflow, value, version, business_key, run_timeout, idempotency_key, s.need_app(), priority
        )
        s.out.record(s.raw(call), RUN_FIELDS)
        return
    if debounce_period is None:
        raise click.UsageError("--debounce-key needs --debounce-period")
    if idempotency_key is not None:
        raise click.UsageError("a debounced start takes no --idempotency-key (it is folded into its burst)")
    mode = "leading" if leading else "trailing"
    debounced = s.client.b_start_debounced(
        workflow,
        value,
        debounce_key,
        debounce_period,
        mode,
        version,
        business_key,
        run_timeout,
        s.need_app(),
        priority,
    )
    body = s.raw(debounced)
    if body.get("debounced"):
        s.out.record(body, DEBOUNCED_FIELDS)
    else:
        s.out.record(body, RUN_FIELDS)


@runs.command("signal")
@click.argument("name")
@click.option("--run", "run_id", help="the run's id (or name it with --workflow and --business-key)")
@click.option("--workflow")
@click.option("--business-key")
@click.option("--payload", help="JSON, @file.json|yaml, or - for stdin")
@click.option("--signal-id", help="deduplication id (default: a fresh one)")
@click.option("--start-if-missing", is_flag=True, help="no open run with the key: start one with the signal")
@click.option("--input", "input_", help="with --start-if-missing: the new run's input (JSON, @file, -)")
@click.option("--version", type=int, help="with --start-if-missing: the version to start")
@pass_session
def runs_signal(
    s: Session,
    name: str,
    run_id: str | None,
    workflow: str | None,
    business_key: str | None,
    payload: str | None,
    signal_id: str | None,
    start_if_missing: bool,
    input_: str | None,
    version: int | None,
) -> None:
    """Send signal NAME to a run (or signal-with-start with --start-if-missing)."""
    value = parse_json(payload, "--payload")
    app = s.need_app()
    if start_if_missing:
        if run_id is not None or workflow is None or business_key is None:
            fail("--start-if-missing needs --workflow and --business-key (not --run)")
        start = parse_json(input_, "--input")
        call = s.client.b_signal_with_start(
            name, workflow, business_key, value, start, version, signal_id, None, app
        )
    else:
        if run_id is None and (workflow is None or business_key is None):
            fail("name the run with --run, or with --workflow and --business-key")
        if input_ is not None or version is not None:
            fail("--input and --version go with --start-if-missing")
        call = s.client.b_send_signal(name, value, run_id, workflow, business_key, signal_id, app)
    document = s.raw(call)
    started = " (started it)" if document.get("started") else ""
    s.out.text(f"{document['status']}: signal {name!r} to run {document['runId']}{started}", document)


def _intervention(s: Session, call: Call[Any], verb: str) -> None:
    run = s.raw(call)
    s.out.text(f"{verb} run {run['runId']}: now {run['status']} at {run.get('currentStep') or '-'}", run)


@runs.command("cancel")
@click.argument("run_id")
@click.option("--reason")
@pass_session
def runs_cancel(s: Session, run_id: str, reason: str | None) -> None:
    """Cancel an open run (permanently)."""
    _intervention(s, s.client.b_cancel_run(run_id, reason, s.need_app()), "cancelled")


@runs.command("redrive")
@click.argument("run_id")
@click.option("--reason")
@pass_session
def runs_redrive(s: Session, run_id: str, reason: str | None) -> None:
    """Re-run the failed step of a failed, stuck or timed-out run."""
    _intervention(s, s.client.b_redrive_run(run_id, reason, s.need_app()), "redrove")


@runs.command("pause")
@click.argument("run_id")
@click.option("--reason")
@pass_session
def runs_pause(s: Session, run_id: str, reason: str | None) -> None:
    """Hold a run: it dispatches nothing and advances on nothing until unpaused."""
    _intervention(s, s.client.b_pause_run(run_id, reason, s.need_app()), "paused")


@runs.command("unpause")
@click.argument("run_id")
@click.option("--reason")
@pass_session
def runs_unpause(s: Session, run_id: str, reason: str | None) -> None:
    """Let a paused run go on from where it was held."""
    _intervention(s, s.client.b_unpause_run(run_id, reason, s.need_app()), "unpaused")


#: The statuses each bulk action applies to (the single-run rules, docs/api.md "Intervening").
OPEN_STATUSES = frozenset({"running", "waiting", "sleeping", "stuck", "paused"})
BULK_APPLIES: dict[str, frozenset[str]] = {
    "pause": OPEN_STATUSES - {"paused"},
    "unpause": frozenset({"paused"}),
    "cancel": OPEN_STATUSES,
    "redrive": frozenset({"failed", "stuck", "timed_out"}),
}
BULK_VERBS = {"pause": "paused", "unpause": "unpaused", "cancel": "cancelled", "redrive": "redriven"}
BULK_COLUMNS = ("runId", "status", "currentStep", "version", "businessKey", "would")


PREVIEW_PAGE = 1000  # runs read per listing call of a preview (the server's largest page)
PREVIEW_SHOWN = 100  # runs a preview lists (it counts them all)


@dataclasses.dataclass
class Preview:
    """What a bulk action would do: counted page by page over every matching run, and the
    first `PREVIEW_SHOWN` of them kept to list (memory bounded by one page, whatever matches)."""

    matched: int = 0
    acting: int = 0
    shown: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def skipped(self) -> int:
        return self.matched - self.acting


def _bulk_preview(s: Session, action: str, selection: BulkSelection) -> Preview:
    """The runs the bulk action would examine now (the listing's filters, then step and version,
    as the server applies them), each marked with what the action would do to it."""
    preview = Preview()
    cursor = None
    while True:
        call = s.client.b_list_runs(
            selection.workflow, selection.status, selection.business_key, PREVIEW_PAGE, cursor, s.need_app()
        )
        page = s.raw(call)
        for run in page["runs"]:
            if selection.step is not None and run.get("currentStep") != selection.step:
                continue
            if selection.version is not None and run.get("version") != selection.version:
                continue
            would = action if run.get("status") in BULK_APPLIES[action] else "skip"
            preview.matched += 1
            preview.acting += would != "skip"
            if len(preview.shown) < PREVIEW_SHOWN:
                preview.shown.append({**run, "would": would})
        cursor = page.get("nextCursor")
        if cursor is None:
            return preview


@runs.command("bulk")
@click.argument("action", type=click.Choice(BULK_ACTIONS))
@click.option("--workflow", required=True)
@click.option("--status")
@click.option("--business-key")
@click.option("--step", help="only runs at this step")
@click.option("--version", type=int, help="only runs pinned to this version")
@click.option("--reason")
@click.option("--page-size", type=int, default=100, show_default=True, help="runs examined per call")
@click.option("--dry-run", is_flag=True, help="list the runs it would touch; change nothing")
@click.option("--yes", "-y", "yes", is_flag=True, help="do not ask for confirmation")
@pass_session
def runs_bulk(
    s: Session,
    action: str,
    workflow: str,
    status: str | None,
    business_key: str | None,
    step: str | None,
    version: int | None,
    reason: str | None,
    page_size: int,
    dry_run: bool,
    yes: bool,
) -> None:
    """Pause, unpause, cancel or redrive every run the filter selects (all pages).

    Asks first, saying how many runs it would touch (--yes does not ask); --dry-run lists them
    and changes nothing."""
    selection = BulkSelection(workflow, status, business_key, step, version, reason, page_size)
    if dry_run or not yes:
        preview = _bulk_preview(s, action, selection)
        acting = preview.acting
        summary = f"{action} {acting} of {preview.matched} matching runs ({preview.skipped} skipped)"
        if dry_run:
            document = {"action": action, "dryRun": True, "matched": preview.matched, "wouldAct": acting,
                        "skipped": preview.skipped, "runs": preview.shown}  # fmt: skip
            if s.out.as_json:
                s.out.json(document)
            else:
                s.out.table(preview.shown, BULK_COLUMNS)
                if preview.matched > len(preview.shown):
                    s.out.text(f"(the first {len(preview.shown)} of {preview.matched} matching runs)")
                s.out.text(f"dry run: would {summary}; nothing changed")
            return
        if acting == 0:
            s.out.text(f"nothing to do: would {summary}", {"action": action, **_no_totals(preview)})
            return
        question = f"{summary} of workflow {workflow!r} in app {s.need_app()!r}: go ahead?"
        try:
            confirmed = click.confirm(printable(question), default=False, err=True)
        except click.exceptions.Abort:
            confirmed = False
        if not confirmed:
            echo("not confirmed: nothing changed (--yes skips the question)", err=True)
            raise SystemExit(REFUSED)
    totals = {"matched": 0, "acted": 0, "skipped": 0, "pages": 0}
    refused: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = s.call(s.client.b_bulk(action, selection, cursor, s.need_app()))
        totals = {"matched": totals["matched"] + page.matched, "acted": totals["acted"] + page.acted,
                  "skipped": totals["skipped"] + page.skipped, "pages": totals["pages"] + 1}  # fmt: skip
        refused.extend(page.refused)
        cursor = page.cursor
        if cursor is None:
            break
    verb = BULK_VERBS[action]
    line = f"{verb} {totals['acted']} of {totals['matched']} matching runs ({totals['skipped']} skipped"
    line += f", {len(refused)} refused)" if refused else ")"
    for r in refused:
        line += f"\nrefused {r.get('runId')}: {r.get('message')}"
    s.out.text(line, {"action": action, **totals, "refused": refused})
    if refused:
        raise SystemExit(CONFLICT)  # runs were left behind (each a 409 on its own): a pipeline sees it


def _no_totals(preview: Preview) -> dict[str, int]:
    return {"matched": preview.matched, "acted": 0, "skipped": preview.matched, "pages": 0}


@runs.command("rewind")
@click.argument("run_id")
@click.option("--to", "to_step", required=True, help="the step to continue at")
@click.option("--version", type=int, help="move the run to this workflow version")
@click.option("--reason")
@pass_session
def runs_rewind(s: Session, run_id: str, to_step: str, version: int | None, reason: str | None) -> None:
    """Continue a run at an earlier (or any) step."""
    _intervention(s, s.client.b_rewind_run(run_id, to_step, version, reason, s.need_app()), "rewound")


@runs.command("skip")
@click.argument("run_id")
@click.option("--output", help="the step's output: JSON, @file, or -")
@click.option("--reason")
@pass_session
def runs_skip(s: Session, run_id: str, output: str | None, reason: str | None) -> None:
    """Mark the current step done with OUTPUT and continue."""
    value = parse_json(output, "--output")
    _intervention(s, s.client.b_skip_step(run_id, value, reason, s.need_app()), "skipped a step of")


@runs.command("edit-state")
@click.argument("run_id")
@click.option("--set", "sets", multiple=True, metavar="KEY=JSON", help="set a top-level state key")
@click.option("--unset", "unsets", multiple=True, metavar="KEY", help="remove a top-level state key")
@click.option("--reason", required=True, help="recorded in the history (values never are)")
@pass_session
def runs_edit_state(s: Session, run_id: str, sets: Sequence[str], unsets: Sequence[str], reason: str) -> None:
    """Edit top-level keys of a run's state."""
    changes: dict[str, Any] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--set {item!r}: expected KEY=JSON")
        changes[key] = parse_json(value, f"--set {key}")
    if not changes and not unsets:
        fail("nothing to edit: give --set and/or --unset")
    call = s.client.b_edit_state(run_id, changes or None, list(unsets) or None, reason, s.need_app())
    _intervention(s, call, "edited the state of")


# --- schedules --------------------------------------------------------------------------------

SCHEDULE_COLUMNS = ("name", "workflow", "cron", "every", "timezone", "overlap", "paused", "nextFire")
SCHEDULE_FIELDS = (
    "name", "workflow", "version", "cron", "every", "timezone", "overlap", "catchupWindow", "jitter",
    "startAt", "endAt", "paused", "pauseReason", "nextFires", "fired", "skipped", "missed", "buffered",
    "lastError", "input", "createdAt", "updatedAt",
)  # fmt: skip


@cli.group()
def schedules() -> None:
    """Create, read, pause, trigger and backfill schedules."""


@schedules.command("list")
@pass_session
def schedules_list(s: Session) -> None:
    """The app's schedules, by name, with their next fire."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = s.raw(s.client.b_list_schedules(1000, cursor, s.need_app()))
        rows.extend(page["schedules"])
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    shown = [{**row, "nextFire": (row.get("nextFires") or [None])[0]} for row in rows]
    s.out.table(shown, SCHEDULE_COLUMNS, {"schedules": rows})


def _schedule_record(s: Session, document: dict[str, Any]) -> None:
    s.out.record(document, SCHEDULE_FIELDS)
    fires = document.get("lastFires")
    if fires and not s.out.as_json:
        s.out.console.print()
        s.out.table(fires, ("scheduledTime", "runId", "status", "firedAt"))


@schedules.command("show")
@click.argument("name")
@pass_session
def schedules_show(s: Session, name: str) -> None:
    """A schedule: its definition, next 5 fires, counters and last fires (runIds, statuses)."""
    _schedule_record(s, s.raw(s.client.b_get_schedule(name, s.need_app())))


@schedules.command("put")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--name", help="the schedule's name (default: the file's `name`)")
@pass_session
def schedules_put(s: Session, file: str, name: str | None) -> None:
    """Create or replace a schedule from FILE (YAML or JSON: workflow, cron or every, ...)."""
    document = read_definition(file)
    from_file = document.pop("name", None)
    chosen = name or from_file
    if not isinstance(chosen, str) or not chosen:
        fail(f"{file}: name the schedule with --name or a `name` key")
    _schedule_record(s, s.raw(s.client.b_put_schedule(chosen, document, s.need_app())))


def _schedule_state(s: Session, document: dict[str, Any], verb: str) -> None:
    reason = f" ({document['pauseReason']})" if document.get("pauseReason") else ""
    s.out.text(f"{verb} schedule {document['name']}{reason}", document)


@schedules.command("pause")
@click.argument("name")
@click.option("--reason")
@pass_session
def schedules_pause(s: Session, name: str, reason: str | None) -> None:
    """Stop firing until unpaused (fires in between are neither made nor counted)."""
    body = {} if reason is None else {"reason": reason}
    _schedule_state(s, s.raw(s.client.b_schedule_action(name, "pause", body, s.need_app())), "paused")


@schedules.command("unpause")
@click.argument("name")
@click.option("--reason")
@pass_session
def schedules_unpause(s: Session, name: str, reason: str | None) -> None:
    """Fire again from now on."""
    body = {} if reason is None else {"reason": reason}
    _schedule_state(s, s.raw(s.client.b_schedule_action(name, "unpause", body, s.need_app())), "unpaused")


@schedules.command("trigger")
@click.argument("name")
@click.option("--reason", help="recorded on the run and the fire")
@pass_session
def schedules_trigger(s: Session, name: str, reason: str | None) -> None:
    """Fire now, as the overlap policy allows."""
    body = {} if reason is None else {"reason": reason}
    out = s.raw(s.client.b_schedule_action(name, "trigger", body, s.need_app()))
    run = f": run {out['runId']}" if out.get("runId") else ""
    s.out.text(f"{out['outcome']} {out['scheduledTime']}{run}", out)


@schedules.command("backfill")
@click.argument("name")
@click.option("--from", "start", required=True, help="RFC 3339, e.g. 2026-01-01T00:00:00Z")
@click.option("--to", "end", required=True, help="RFC 3339 (not included)")
@pass_session
def schedules_backfill(s: Session, name: str, start: str, end: str) -> None:
    """A run for every scheduled time in [--from, --to); a time that fired keeps its run."""
    out = s.raw(s.client.b_schedule_action(name, "backfill", {"from": start, "to": end}, s.need_app()))
    s.out.table(out["fires"], ("scheduledTime", "runId", "new"), out)


@schedules.command("delete")
@click.argument("name")
@pass_session
def schedules_delete(s: Session, name: str) -> None:
    """Delete a schedule (the runs it started stay)."""
    out = s.raw(s.client.b_delete_schedule(name, s.need_app()))
    s.out.text(f"deleted schedule {out['name']}", out)


# --- workflows --------------------------------------------------------------------------------


@cli.group()
def workflows() -> None:
    """Register and read workflow definitions."""


@workflows.command("push")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@pass_session
def workflows_push(s: Session, files: Sequence[str]) -> None:
    """Register each FILE (YAML or JSON) as a new version (unchanged ones keep theirs)."""
    rows = []
    for path in files:
        ref = s.call(s.client.b_register_workflow(read_definition(path), s.need_app()))
        for warning in ref.warnings:
            echo(f"warning: {path}: {warning.get('message')}", err=True)
        rows.append({"file": path, "name": ref.name, "version": ref.version, "created": ref.created})
    s.out.table(rows, ("file", "name", "version", "created"), {"workflows": rows})


@workflows.command("list")
@pass_session
def workflows_list(s: Session) -> None:
    """Each workflow's latest version."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = s.raw(s.client.b_list_workflows(1000, cursor, s.need_app()))
        rows.extend(page["workflows"])
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    s.out.table(rows, ("name", "version", "createdAt"), {"workflows": rows})


@workflows.command("show")
@click.argument("name")
@click.option("--version", type=int, help="default: the latest")
@pass_session
def workflows_show(s: Session, name: str, version: int | None) -> None:
    """A version's definition (YAML; JSON with --json)."""
    document = s.raw(s.client.b_get_workflow(name, version, s.need_app()))
    if s.out.as_json:
        s.out.json(document)
    else:
        echo(f"# {document['name']} version {document['version']} ({document.get('createdAt')})")
        echo(yaml.safe_dump(document["definition"], sort_keys=False, allow_unicode=True), nl=False)


def _canonical(definition: Any) -> list[str]:
    return json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


@workflows.command("diff")
@click.argument("name")
@click.argument("old", required=False, type=int)
@click.argument("new", required=False, type=int)
@click.option("--file", "path", type=click.Path(dir_okay=False), help="compare this file with the latest")
@pass_session
def workflows_diff(s: Session, name: str, old: int | None, new: int | None, path: str | None) -> None:
    """Unified diff of two versions (default: the latest and the one before), or of --file
    against the latest. Exit code 0 either way; empty output when they are the same."""
    app = s.need_app()
    latest = s.call(s.client.b_get_workflow(name, None, app))
    if path is not None:
        before, after = latest.definition, read_definition(path)
        labels = (f"{name} v{latest.version}", path)
    else:
        new_version = new if new is not None else latest.version
        old_version = old if old is not None else new_version - 1
        if old_version < 1:
            fail(f"{name} has only version {latest.version}: nothing to compare")
        before = s.call(s.client.b_get_workflow(name, old_version, app)).definition
        after = s.call(s.client.b_get_workflow(name, new_version, app)).definition
        labels = (f"{name} v{old_version}", f"{name} v{new_version}")
    lines = list(difflib.unified_diff(_canonical(before), _canonical(after), *labels))
    if s.out.as_json:
        s.out.json({"from": labels[0], "to": labels[1], "same": not lines, "diff": "".join(lines)})
    else:
        echo("".join(lines), nl=False)


@workflows.command("dry-run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--replay", type=int, help="closed runs replayed (default 100, at most 1000)")
@pass_session
def workflows_dry_run(s: Session, file: str, replay: int | None) -> None:
    """What registering FILE would do to the runs in flight (grouped by version, step and
    status) and to the last closed runs replayed through it. Stores nothing."""
    report = s.raw(s.client.b_dry_run(read_definition(file), replay, s.need_app()))
    if s.out.as_json:
        s.out.json(report)
        return
    if not report["valid"]:
        for error in report.get("errors", []):
            echo(f"invalid: {error.get('field')}: {error.get('message')}")
        raise SystemExit(1)
    rows = [
        {
            "version": g["version"],
            "step": g["step"],
            "status": g["status"],
            "count": g["count"],
            "verdict": g["verdict"],
            "differences": ", ".join(d["field"] for d in g["differences"]),
            "migrate": "; ".join(f"{p['outcome']}: {p['message']}" for p in g.get("migrate", [])),
        }
        for g in report["openRuns"]["groups"]
    ]
    echo(f"open runs: {report['openRuns']['total']}")
    columns = ("version", "step", "status", "count", "verdict", "differences", "migrate")
    s.out.table(rows, columns, {"groups": rows})
    recorded = report["recorded"]
    echo(f"recorded runs replayed: {recorded['sampled']}, same: {recorded['same']}")
    for d in recorded["diverged"]:
        echo(f"  {d['runId']} v{d['version']} at seq {d['seq']}: {d['reason']}: {d['message']}")
    for m in report["missingStateKeys"]:
        echo(f"missing {m['path']} (read by {m['readBy']} {m['field']}) in {m['runs']} open runs")


@workflows.command("migrate")
@click.argument("name")
@click.option("--to", "to_version", type=int, required=True, help="the registered version to move to")
@click.option("--from-version", type=int)
@click.option("--step")
@click.option("--status")
@click.option("--business-key")
@click.option("--map", "step_map", multiple=True, help="OLD=NEW: where runs at a removed or renamed step go")
@click.option("--reason")
@click.option("--limit", type=int, help="runs per page (default 100)")
@pass_session
def workflows_migrate(
    s: Session,
    name: str,
    to_version: int,
    from_version: int | None,
    step: str | None,
    status: str | None,
    business_key: str | None,
    step_map: Sequence[str],
    reason: str | None,
    limit: int | None,
) -> None:
    """Move the open runs of NAME to version --to, page after page (resumable: run it again).

    Exits 6 when the server refused some runs (listed; they stay on their version)."""
    mapping: dict[str, str] = {}
    for entry in step_map:
        old, sep, new = entry.partition("=")
        if not sep or not old or not new:
            fail(f"--map takes OLD=NEW, not {entry!r}")
        mapping[old] = new
    flt = {
        k: v
        for k, v in {
            "fromVersion": from_version,
            "step": step,
            "status": status,
            "businessKey": business_key,
        }.items()
        if v is not None
    }
    app = s.need_app()
    cursor = None
    totals = {"matched": 0, "migrated": 0, "skipped": 0}
    refused: list[dict[str, Any]] = []
    while True:
        page = s.raw(
            s.client.b_migrate(
                name,
                to_version,
                filter=flt,
                step_map=mapping,
                reason=reason,
                limit=limit,
                cursor=cursor,
                app=app,
            )
        )
        for key in totals:
            totals[key] += int(page[key])
        refused.extend(page["refused"])
        cursor = page.get("cursor")
        if cursor is None:
            break
    if s.out.as_json:
        s.out.json({**totals, "refused": refused})
    else:
        echo(f"matched {totals['matched']}, migrated {totals['migrated']}, skipped {totals['skipped']}")
        for r in refused:
            echo(f"refused {r['runId']} (v{r['version']} at {r['step']}): {r['reason']}")
    if refused:  # runs left behind: a pipeline must not read this as done
        raise SystemExit(LEFT_BEHIND)


# --- apps (admin) -----------------------------------------------------------------------------


@cli.group()
def apps() -> None:
    """Create apps, mint and revoke keys, rotate signing secrets (admin)."""


@apps.command("create")
@click.argument("app")
@click.option("--handler-base-url", required=True)
@click.option("--description")
@click.option("--weight", type=click.IntRange(1, 100), help="its share between apps' pushes (default 1)")
@click.option("--rate-limit", metavar="N/PERIOD", help="space all its pushes, e.g. 100/1m")
@click.option("--no-rate-limit", is_flag=True, help="remove its rate limit")
@pass_session
def apps_create(
    s: Session,
    app: str,
    handler_base_url: str,
    description: str | None,
    weight: int | None,
    rate_limit: str | None,
    no_rate_limit: bool,
) -> None:
    """Create APP (or update it); a new app's key and secret are shown once. --weight and
    --rate-limit are its flow control, left as they are when omitted."""
    if rate_limit is not None and no_rate_limit:
        raise click.UsageError("--rate-limit and --no-rate-limit exclude each other")
    limit: Any = UNSET
    if no_rate_limit:
        limit = None
    elif rate_limit is not None:
        count, slash, period = rate_limit.partition("/")
        if not slash or not count.isdigit() or not period:
            raise click.UsageError("--rate-limit is N/PERIOD, e.g. 100/1m")
        limit = {"limit": int(count), "period": period}
    s.out.record(s.raw(s.client.b_put_app(app, handler_base_url, description, weight, limit)))


@apps.command("show")
@click.argument("app", required=False)
@pass_session
def apps_show(s: Session, app: str | None) -> None:
    """An app, its key ids and signing-secret ids (never their values)."""
    s.out.record(s.raw(s.client.b_get_app(s.need_app(app))))


LIMIT_COLUMNS = ("limit", "value", "source", "setting")


@apps.command("limits")
@click.argument("app", required=False)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="override a limit (e.g. maxOpenRuns=5000); VALUE `default` removes the override",
)
@pass_session
def apps_limits(s: Session, app: str | None, settings: tuple[str, ...]) -> None:
    """The app's effective limits, each with its value and where it comes from (its setting's
    default or the app's override); --set changes overrides first (admin)."""
    overrides: dict[str, Any] = {}
    for item in settings:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise click.UsageError(f"--set takes NAME=VALUE, got {item!r}")
        overrides[name] = _limit_value(value)
    name = s.need_app(app)
    if overrides:
        document = s.raw(s.client.b_put_app_limits(overrides, name))
    else:
        document = s.raw(s.client.b_get_app_limits(name))
    rows = [{"limit": key, **entry} for key, entry in document["limits"].items()]
    s.out.table(rows, LIMIT_COLUMNS, document)


def _limit_value(text: str) -> Any:
    """A `--set` value: `default` (or `null`) removes the override; a number is sent as one;
    anything else as given, for the server to refuse naming the limit."""
    if text in ("default", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


@apps.group("keys")
def apps_keys() -> None:
    """API keys of an app."""


@apps_keys.command("create")
@click.argument("app", required=False)
@pass_session
def apps_keys_create(s: Session, app: str | None) -> None:
    """Mint an API key (shown once)."""
    s.out.record(s.raw(s.client.b_create_api_key(s.need_app(app))))


@apps_keys.command("revoke")
@click.argument("key_id")
@pass_session
def apps_keys_revoke(s: Session, key_id: str) -> None:
    """Revoke an API key of --app by its id."""
    document = s.raw(s.client.b_revoke_api_key(key_id, s.need_app()))
    s.out.text(f"revoked key {key_id}", document)


@apps.command("rotate-secret")
@click.argument("app", required=False)
@click.option(
    "--grace", "grace_seconds", type=int, help="seconds the old secret keeps signing (default 86400)"
)
@pass_session
def apps_rotate_secret(s: Session, app: str | None, grace_seconds: int | None) -> None:
    """Rotate the signing secret (the new one is shown once)."""
    s.out.record(s.raw(s.client.b_rotate_signing_secret(grace_seconds, s.need_app(app))))


# --- operator tokens (admin) -----------------------------------------------------------------


TOKEN_COLUMNS = ("tokenId", "name", "role", "createdAt")


@cli.group()
def tokens() -> None:
    """Operator tokens for people: viewer, operator, admin (admin)."""


@tokens.command("create")
@click.option("--role", required=True, type=click.Choice(OPERATOR_ROLES), help="what the token may do")
@click.option("--name", help="who or what it is for")
@pass_session
def tokens_create(s: Session, role: str, name: str | None) -> None:
    """Mint an operator token (the token is shown once)."""
    s.out.record(s.raw(s.client.b_create_operator_token(role, name)), (*TOKEN_COLUMNS, "token"))


@tokens.command("list")
@pass_session
def tokens_list(s: Session) -> None:
    """Live operator tokens (never their values)."""
    document = s.raw(s.client.b_list_operator_tokens())
    s.out.table(document["tokens"], TOKEN_COLUMNS, document)


@tokens.command("revoke")
@click.argument("token_id")
@pass_session
def tokens_revoke(s: Session, token_id: str) -> None:
    """Revoke an operator token by its id (its console sessions end too)."""
    document = s.raw(s.client.b_revoke_operator_token(token_id))
    s.out.text(f"revoked operator token {token_id}", document)


# --- operators (admin) ------------------------------------------------------------------------


@cli.command()
@click.argument("run_id", required=False)
@click.option("--status")
@click.option("--limit", type=int, default=100, show_default=True)
@pass_session
def actors(s: Session, run_id: str | None, status: str | None, limit: int) -> None:
    """Live run actors on the node (admin); with RUN_ID, one actor and its timers."""
    if run_id is not None:
        s.out.record(s.raw(s.client.b_get_actor(run_id)))
        return
    document = s.raw(s.client.b_list_actors(status, limit))
    rows = [
        {**a, "inflight": (a["inflight"] or {}).get("step"), "queue": (a["inflight"] or {}).get("queue")}
        for a in document["actors"]
    ]
    s.out.table(
        rows,
        ("runId", "app", "workflow", "status", "currentStep", "mailboxDepth", "inflight", "queue"),
        document,
    )


@cli.command()
@pass_session
def timers(s: Session) -> None:
    """The timer wheel: timers in memory, next due, lag."""
    s.out.record(s.raw(s.client.b_timers()))


@cli.command()
@pass_session
def queues(s: Session) -> None:
    """Pull queues with tasks waiting or workers polling."""
    document = s.raw(s.client.b_queues())
    s.out.table(document["queues"], ("app", "queue", "depth", "waitingPollers"), document)


@cli.command()
@click.argument("run_id")
@pass_session
def why(s: Session, run_id: str) -> None:
    """Why a run is (not) moving: the server's diagnosis, as the console shows it."""
    document = s.raw(s.client.b_diagnosis(run_id, s.need_app()))
    if s.out.as_json:
        s.out.json(document)
        return
    flag = "needs attention: " if document.get("attention") else ""
    echo(f"{flag}{document.get('summary', '')}")
    for fact in document.get("facts") or []:
        echo(f"  - {_fact(fact)}")


def _fact(fact: Any) -> str:
    if isinstance(fact, dict):
        text = fact.get("text") or fact.get("message") or fact.get("summary")
        if isinstance(text, str):
            return text
        return ", ".join(f"{k}: {v}" for k, v in fact.items())
    return str(fact)


def command_summary() -> str:
    """The operator commands, for the engine's `foliot --help` (which lists serve and migrate)."""
    ctx = click.Context(cli, info_name="foliot")
    lines = ["operator commands (foliot-client[cli]; `foliot COMMAND --help` for one):"]
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        lines.append(f"  {name:<11} {command.get_short_help_str(limit=66)}")
        if isinstance(command, click.Group):
            names = ", ".join(command.list_commands(ctx))
            lines.extend(textwrap.wrap(names, 78, initial_indent=" " * 14, subsequent_indent=" " * 14))
    lines.append("--url, --token, --app, --profile and --json go before or after the command.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog_name: str = "foliot-cli") -> int:
    """Run the CLI; returns the exit code (see `render`)."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else USAGE
    return 0


__all__: list[str] = ["cli", "command_summary", "main"]
