"""Safe deploys: dry-run a candidate version against the runs in flight and the runs recorded,
then migrate open runs to a registered version, a page at a time.

`POST /apps/{app}/workflows/{name}/dry-run` stores nothing: it validates the candidate as
registration would, counts the workflow's open runs by (version, step, status) in the database
with each group's 20 newest runIds (and, at a run, map or parallel step, what their fan-outs
hold, summed by the database: what a migration keeps), counts the runs lacking each key the
candidate reads where it matters in the database too (`deploy_sql.lacking_sql`; a path SQL
cannot name exactly reads those groups' input and state in keyset pages instead), so memory is
bounded by the number of groups, not of runs; and replays the last `replay` closed runs through
the candidate's pure machine (`core/workflow/deploy.py`), read in keyset pages, their events in
bounded batches, each batch replayed in a worker thread (`REPLAY_THREADS` at once on a node) so
a replay never holds the event loop. A request replays at most `FOLIOT_DRYRUN_MAX_EVENTS`
events, then answers with `recorded.cursor` to resume from (`?cursor=`); an app has at most
`FOLIOT_DRYRUN_CONCURRENCY` dry-runs under way (429 past it).

`POST /apps/{app}/workflows/{name}/migrate` follows the bulk interventions (`bulk.py`): one
keyset page of the workflow's runs (newest first), each open run that matches the filter sent
`Migrate` through its actor (through its owner's `/internal/migrate` when another node of the
cluster owns it), a `cursor` to resume with. A run already on `toVersion` is skipped,
so a page retried is safe; each move is one `run_migrated` event carrying the reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Final

import attrs
import trio
from quart import Blueprint, Response, request

from ..actors.placement import Elsewhere
from ..actors.threads import run_limiter
from ..core.errors import InvalidRequest, Overloaded, Refused
from ..core.workflow import deploy, machine
from ..core.workflow.definition import Definition, parse_definition
from ..core.workflow.jsonconv import ValidationError
from ..core.workflow.model import OPEN_STATUSES, Event, Run
from ..storage import deploy_sql
from ..storage.base import RunFilter, Store, decode_cursor, encode_cursor
from ..storage.deploy_sql import OpenGroup, OpenRunRow
from .app import (
    body,
    check_name,
    check_query,
    engine,
    json_response,
    query_int,
    raw_json,
    reads_query,
    require_app,
)
from .bulk import _first
from .runs import MAX_BUSINESS_KEY, MAX_CURSOR, _check_reason, _runs_cursor, run_key

blueprint = Blueprint("deploys", __name__)
log = logging.getLogger("foliot.http")

DEFAULT_REPLAY: Final = 100
MAX_REPLAY: Final = 1000
OPEN_PAGE: Final = 200  # open runs (with their input and state) held at once by a dry-run
MIN_GROUP_PAGE: Final = 20  # open runs of one group read per query, at least
REPLAY_BATCH: Final = 20  # recorded runs read in one query (and their events, at most:)
REPLAY_EVENTS: Final = 5_000  # events read in one query, replayed as one slice in a worker thread
MAX_REPLAY_EVENTS: Final = 10_000  # events of one recorded run replayed (then: truncated)
REPLAY_THREADS: Final = 2  # replay slices running at once on a node (the rest wait their turn)
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000
CONCURRENCY: Final = 16


# --------------------------------------------------------------------------- dry-run


def _candidate(raw: Any) -> tuple[Any, int | None]:
    """The candidate definition and a body `replay`: the body is the definition itself, or
    `{"definition": {...}, "replay": n}`."""
    if isinstance(raw, dict) and "definition" in raw and "steps" not in raw:
        extra = set(raw) - {"definition", "replay"}
        if extra:
            raise InvalidRequest("unknown field", field=sorted(extra)[0])
        replay = raw.get("replay")
        if replay is not None and (type(replay) is not int or not 0 <= replay <= MAX_REPLAY):
            raise InvalidRequest(f"must be a whole number 0..{MAX_REPLAY}", field="replay")
        return raw["definition"], replay
    return raw, None


def _dry_run_cursor(cursor: str | None) -> tuple[int, str, int] | None:
    """`(createdAt, runId, runs left to replay)` from `recorded.cursor`; 400 unless it could be
    one this API returned."""
    if cursor is None:
        return None
    parts = decode_cursor(cursor, 3) if len(cursor) <= MAX_CURSOR else None
    if parts is None or not run_key(parts) or type(parts[2]) is not int or not 1 <= parts[2] <= MAX_REPLAY:
        raise InvalidRequest("not a cursor this API returned", field="cursor")
    return parts[0], parts[1], parts[2]


@blueprint.post("/apps/<app_name>/workflows/<name>/dry-run")
@reads_query
async def dry_run(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    check_query({"replay", "cursor"})
    replay = query_int("replay", DEFAULT_REPLAY, 0, MAX_REPLAY)
    resume = _dry_run_cursor(request.args.get("cursor"))
    raw, body_replay = _candidate(await raw_json())
    if not isinstance(raw, dict):
        raise InvalidRequest("the candidate must be a workflow object", field="definition")
    return json_response(
        await dry_run_report(
            app_name, name, raw, body_replay if body_replay is not None else replay, resume=resume
        )
    )


# Dry-runs under way per (engine, app) in this Trio run.
_UNDER_WAY: trio.lowlevel.RunVar[dict[tuple[int, str], int]] = trio.lowlevel.RunVar("foliot_dry_runs")


@contextlib.contextmanager
def _dry_run_slot(eng: Any, app: str, limit: int, setting: str) -> Iterator[None]:
    """One of the app's `FOLIOT_DRYRUN_CONCURRENCY` dry-runs (or its `dryRunConcurrency`
    override: `limit`, named `setting`) under way on this node; past it a 429 `overloaded`
    (`reason: dry_run_concurrency`) naming the limit, at once."""
    try:
        under = _UNDER_WAY.get()
    except LookupError:
        under = {}
        _UNDER_WAY.set(under)
    key = (id(eng), app)
    if under.get(key, 0) >= limit:
        refusal = Overloaded(
            f"app {app!r} has {limit} dry-runs under way, the most {setting} allows:"
            " retry when one has answered",
            reason="dry_run_concurrency",
        )
        refusal.extra["limit"] = limit
        raise refusal
    under[key] = under.get(key, 0) + 1
    try:
        yield
    finally:
        under[key] -= 1
        if not under[key]:
            del under[key]


def _replay_threads() -> trio.CapacityLimiter:
    return run_limiter("dry-run replay", REPLAY_THREADS)


async def dry_run_report(
    app: str, name: str, raw: dict[str, Any], replay: int, *, resume: tuple[int, str, int] | None = None
) -> dict[str, Any]:
    """The dry-run's answer (the console's page calls this too); `resume`: from a cursor."""
    eng = engine()
    limits = await eng.directory.limits(app, eng.settings)
    with _dry_run_slot(eng, app, limits.dry_run_concurrency, limits.setting("dryRunConcurrency")):
        return await _dry_run_report(app, name, raw, replay, resume)


async def _dry_run_report(
    app: str, name: str, raw: dict[str, Any], replay: int, resume: tuple[int, str, int] | None
) -> dict[str, Any]:
    try:
        candidate = parse_definition(raw)
    except ValidationError as exc:
        return {
            "valid": False,
            "errors": [{"field": exc.field or None, "message": exc.message}],
            "openRuns": {"groups": [], "total": 0},
            "recorded": {"sampled": 0, "same": 0, "diverged": [], "events": 0, "cursor": None},
            "missingStateKeys": [],
        }
    if candidate.name != name:
        raise InvalidRequest(f"the candidate is workflow {candidate.name!r}, not {name!r}", field="name")
    eng = engine()

    async def lookup(number: int) -> Definition | None:
        return await eng.directory.maybe_definition(app, name, number)

    max_events = eng.settings.dryrun_max_events
    return await build_report(
        eng.store, lookup, app, name, candidate, replay, max_events=max_events, resume=resume
    )


async def build_report(
    store: Store,
    lookup: Callable[[int], Awaitable[Definition | None]],
    app: str,
    name: str,
    candidate: Definition,
    replay: int,
    *,
    max_events: int = 200_000,
    resume: tuple[int, str, int] | None = None,
) -> dict[str, Any]:
    """The report of a valid candidate: open runs counted by group, and the runs lacking the
    keys the candidate reads, in the database; the last `replay` closed runs replayed a page at
    a time, each slice in a worker thread (bench/dry_run.py times this on both stores). At most
    `max_events` events are replayed: past them `recorded.cursor` resumes the sample (`resume`:
    the run it stopped after and the runs left)."""
    definitions: dict[int, Definition | None] = {}

    async def version(number: int) -> Definition | None:
        if number not in definitions:
            definitions[number] = await lookup(number)
        return definitions[number]

    agg = deploy.OpenRuns(candidate)
    latest = await store.get_workflow(app, name, None)
    top = latest.version if latest is not None else 0
    groups = await store.open_run_groups(app, name, top) if top else []
    groups.sort(key=lambda g: (-g.version, g.step or "", g.step is not None, g.status))
    for group in groups:
        old = await version(group.version)
        first = await store.open_group_page(app, name, group, deploy.MAX_EXAMPLES, None, with_state=False)
        agg.add_group(group.version, group.step, group.status, old, group.count, (r.run_id for r in first))
        if agg.waits_for_children(group.version, group.step, group.status):  # what migrate keeps
            fans = await store.open_group_fans(app, name, group)
            agg.add_fans(group.version, group.step, group.status, fans)
    reading = [g for g in groups if agg.relevant(g.step)]
    in_sql = all(deploy_sql.expressible(path) for g in reading for path in agg.paths(g.step))
    for number in sorted({g.version for g in reading}, reverse=True):
        of_version = [g for g in reading if g.version == number]
        if in_sql:  # counted by the database: no run's input or state is read
            agg.add_lacking([item async for item in _lacking(store, app, name, of_version, agg)])
            continue
        async for row in _newest_first(store, app, name, of_version):
            state = json.loads(row.state) if row.state is not None else None
            given = json.loads(row.input) if row.input is not None else None
            agg.add_state(row.run_id, row.step, given, state)
            await trio.lowlevel.checkpoint()  # a large input or state decoded: others' turn
    left = replay if resume is None else resume[2]
    after: tuple[int, str] | None = None if resume is None else (resume[0], resume[1])
    cap = min(MAX_REPLAY_EVENTS, max_events)  # a run's events replayed (then: truncated)
    sampled, same, replayed = 0, 0, 0
    diverged: list[dict[str, Any]] = []
    cursor: str | None = None
    while sampled < left:  # keyset pages of the last closed runs, their events by budget
        asked = min(REPLAY_BATCH, left - sampled)
        page = await store.recent_closed_runs(app, name, asked, after)
        taken = _within(page, cap, max_events - replayed)
        for chunk in replay_chunks(taken, REPLAY_EVENTS):
            histories = await store.events_of([r.run_id for r in chunk], cap)
            results = await trio.to_thread.run_sync(
                _replay_slice, chunk, histories, candidate, limiter=_replay_threads()
            )
            for run, (result, count) in zip(chunk, results, strict=True):
                sampled += 1
                replayed += count
                if result.divergence is None:
                    same += 1
                else:
                    diverged.append(
                        {"runId": run.run_id, "version": run.version, "status": run.status}
                        | result.divergence.to_json()
                    )
            after = (chunk[-1].created_at, chunk[-1].run_id)
        if len(taken) < len(page):  # the budget is spent: the rest from a cursor
            if after is not None and sampled < left:
                cursor = encode_cursor(after[0], after[1], left - sampled)
            break
        if len(page) < asked:
            break
        after = (page[-1].created_at, page[-1].run_id)
    return {
        "valid": True,
        "openRuns": {"groups": agg.groups(), "total": agg.total},
        "recorded": {
            "sampled": sampled,
            "same": same,
            "diverged": diverged,
            "events": replayed,
            "cursor": cursor,
        },
        "missingStateKeys": agg.missing(),
    }


def _within(runs: Sequence[Run], cap: int, room: int) -> Sequence[Run]:
    """The first of `runs` whose events (`seq`, at most `cap` each) fit in `room`."""
    used = 0
    for i, run in enumerate(runs):
        used += min(max(run.seq, 1), cap)
        if used > room:
            return runs[:i]
    return runs


def _replay_slice(
    chunk: Sequence[Run], histories: dict[str, list[Event]], candidate: Definition
) -> list[tuple[deploy.Replayed, int]]:
    """In a worker thread: each run of `chunk` replayed through `candidate` (pure), with the
    number of its events replayed."""
    out = []
    for run in chunk:
        events = histories.get(run.run_id, [])
        out.append((deploy.replay(events, run, candidate, truncated=run.seq > len(events)), len(events)))
    return out


def replay_chunks(runs: Sequence[Run], budget: int) -> list[list[Run]]:
    """`runs` in order, cut where the events their histories hold (`seq`, at most
    MAX_REPLAY_EVENTS each) would pass `budget` (a run alone may): what one `events_of` reads."""
    chunks: list[list[Run]] = []
    held = budget
    for run in runs:
        size = min(max(run.seq, 1), MAX_REPLAY_EVENTS)
        if held + size > budget:
            chunks.append([])
            held = 0
        chunks[-1].append(run)
        held += size
    return chunks


async def _lacking(
    store: Store, app: str, name: str, groups: Sequence[OpenGroup], agg: deploy.OpenRuns
) -> AsyncIterator[deploy.Lacking]:
    """For each group and each path its step reads (`OpenRuns.paths`), the runs lacking it:
    counted in one pass over the group, the newest MAX_EXAMPLES of them read when any."""
    for group in groups:
        paths = agg.paths(group.step)
        counts = await store.open_group_lacking(app, name, group, paths)
        for path, count in zip(paths, counts, strict=True):
            newest: list[tuple[int, str]] = []
            if count:
                newest = await store.open_group_lacking_newest(app, name, group, path, deploy.MAX_EXAMPLES)
            yield deploy.Lacking(group.step, path, count, tuple(newest))


async def _newest_first(
    store: Store, app: str, name: str, groups: Sequence[OpenGroup]
) -> AsyncIterator[OpenRunRow]:
    """The open runs of `groups` (one version) with their input and state, newest first across
    the groups (the order a walk of the version's runs would give, so the missing-state-keys
    examples are the same): each group read in keyset pages, the pages merged; at most
    OPEN_PAGE rows held whatever the number of runs."""
    if not groups:
        return
    page = max(MIN_GROUP_PAGE, OPEN_PAGE // len(groups))
    buffers: list[list[OpenRunRow]] = []
    done: list[bool] = []
    for group in groups:
        rows = await store.open_group_page(app, name, group, page, None, with_state=True)
        rows.reverse()  # oldest first: the next one is popped from the end
        buffers.append(rows)
        done.append(len(rows) < page)
    while True:
        best = -1
        for i, rows in enumerate(buffers):
            if rows and (best < 0 or _newer(rows[-1], buffers[best][-1])):
                best = i
        if best < 0:
            return
        row = buffers[best].pop()
        yield row
        if not buffers[best] and not done[best]:
            rows = await store.open_group_page(
                app, name, groups[best], page, (row.created_at, row.run_id), with_state=True
            )
            rows.reverse()
            buffers[best] = rows
            done[best] = len(rows) < page
            await trio.lowlevel.checkpoint()


def _newer(a: OpenRunRow, b: OpenRunRow) -> bool:
    return (a.created_at, a.run_id) > (b.created_at, b.run_id)


# --------------------------------------------------------------------------- migrate


@attrs.frozen
class MigrateFilter:
    from_version: int | None = None
    step: str | None = None
    status: str | None = None
    business_key: str | None = None


@attrs.frozen
class MigrateBody:
    to_version: int
    filter: MigrateFilter | None = None
    step_map: dict[str, str] | None = None
    reason: str | None = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen
class Migration:
    """A validated migrate request."""

    target: Definition
    to_version: int
    flt: RunFilter
    from_version: int | None
    step: str | None
    step_map: tuple[tuple[str, str], ...]
    reason: str | None
    limit: int
    after: tuple[int, str] | None

    def matches(self, run: Run) -> bool:
        if not run.is_open:
            return False
        if self.step is not None and run.current_step != self.step:
            return False
        return self.from_version is None or run.version == self.from_version


async def migration(app: str, name: str, spec: MigrateBody) -> Migration:
    """Every field checked before anything moves: a bad one is a 400 naming it."""
    check_name(name, "name")
    if spec.to_version < 1:
        raise InvalidRequest("must be 1 or more", field="toVersion")
    flt = spec.filter or MigrateFilter()
    if flt.from_version is not None and flt.from_version < 1:
        raise InvalidRequest("must be 1 or more", field="filter.fromVersion")
    if flt.step is not None:
        check_name(flt.step, "filter.step")
    if flt.status is not None and flt.status not in OPEN_STATUSES:
        raise InvalidRequest(f"must be an open status, one of {sorted(OPEN_STATUSES)}", field="filter.status")
    if flt.business_key is not None and not 1 <= len(flt.business_key) <= MAX_BUSINESS_KEY:
        raise InvalidRequest(f"must be 1..{MAX_BUSINESS_KEY} characters", field="filter.businessKey")
    _check_reason(spec.reason)
    limit = DEFAULT_LIMIT if spec.limit is None else spec.limit
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"must be 1..{MAX_LIMIT}", field="limit")
    after = _runs_cursor(spec.cursor) if spec.cursor else None
    target = await engine().directory.maybe_definition(app, name, spec.to_version)
    if target is None:
        raise InvalidRequest(f"workflow {name!r} has no version {spec.to_version}", field="toVersion")
    pairs: list[tuple[str, str]] = []
    for old, new in sorted((spec.step_map or {}).items()):
        check_name(old, f"stepMap.{old[:100]}")
        if new not in target.index:
            raise InvalidRequest(f"{new!r} is no step of version {spec.to_version}", field=f"stepMap.{old}")
        pairs.append((old, new))
    return Migration(
        target,
        spec.to_version,
        RunFilter(app, name, flt.status, flt.business_key),
        flt.from_version,
        flt.step,
        tuple(pairs),
        spec.reason,
        limit,
        after,
    )


@blueprint.post("/apps/<app_name>/workflows/<name>/migrate")
async def migrate(app_name: str, name: str) -> Response:
    await require_app(app_name)
    spec = await body(MigrateBody)
    return json_response(await apply_migrate(app_name, name, spec))


async def apply_migrate(app: str, name: str, spec: MigrateBody) -> dict[str, Any]:
    """One page of a migration; the answer's body (the console's migrate button calls this)."""
    chosen = await migration(app, name, spec)
    eng = engine()
    rows = await eng.store.list_runs(chosen.flt, chosen.limit + 1, chosen.after)
    page = rows[: chosen.limit]
    cursor = encode_cursor(page[-1].created_at, page[-1].run_id) if len(rows) > chosen.limit else None
    targets = [run for run in page if chosen.matches(run)]
    counts = {"migrated": 0, "skipped": 0}
    refused: list[dict[str, Any]] = []
    message = machine.Migrate(chosen.target, chosen.to_version, chosen.step_map, chosen.reason)
    limiter = trio.CapacityLimiter(CONCURRENCY)

    def refuse(run: Run, code: str, why: str) -> None:
        refused.append(
            {
                "runId": run.run_id,
                "version": run.version,
                "step": run.current_step,
                "code": code,
                "reason": why,
            }
        )

    async def one(run: Run) -> None:
        if run.version == chosen.to_version:
            counts["skipped"] += 1
            return
        async with limiter:
            try:
                reply, _ = await eng.runs.ask(run.run_id, message, run)
            except Elsewhere as elsewhere:  # owned by another node: it migrates there
                await there(run, elsewhere)
                return
        if isinstance(reply, machine.Rejected):
            refuse(run, reply.code, reply.message)
        elif reply.value == "already":
            counts["skipped"] += 1
        else:
            counts["migrated"] += 1

    async def there(run: Run, elsewhere: Elsewhere) -> None:
        owner = elsewhere.owner.node_id
        if eng.forwarder is None:
            refuse(run, "elsewhere", f"owned by node {owner}, which this node cannot reach: retry")
            return
        request = {
            "app": app,
            "workflow": name,
            "runId": run.run_id,
            "toVersion": chosen.to_version,
            "stepMap": dict(chosen.step_map),
            "reason": chosen.reason,
        }
        try:
            answer = await eng.forwarder.internal(elsewhere.owner.address, "/internal/migrate", request)
        except Refused as exc:  # the owner did not answer, or moved on: the page may be retried
            refuse(
                run, "elsewhere", f"owned by node {owner}, which did not migrate it ({exc.message}): retry"
            )
            return
        refused_there = answer.get("refused")
        if isinstance(refused_there, dict):
            refuse(run, str(refused_there.get("code")), str(refused_there.get("message")))
        elif answer.get("outcome") == "already":
            counts["skipped"] += 1
        else:
            counts["migrated"] += 1

    try:
        async with trio.open_nursery() as nursery:
            for run in targets:
                nursery.start_soon(one, run)
    except BaseExceptionGroup as group:
        raise _first(group) from None  # one refusal answers for the page; retrying it is safe
    refused.sort(key=lambda r: str(r["runId"]))
    log.info(
        "migrate app=%s workflow=%s toVersion=%d matched=%d migrated=%d skipped=%d refused=%d reason=%r",
        app,
        name,
        chosen.to_version,
        len(targets),
        counts["migrated"],
        counts["skipped"],
        len(refused),
        chosen.reason,
    )
    return {
        "matched": len(targets),
        "migrated": counts["migrated"],
        "skipped": counts["skipped"],
        "refused": refused,
        "cursor": cursor,
    }
