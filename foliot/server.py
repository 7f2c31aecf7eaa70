"""Compose and run one Foliot process: store, engine, HTTP server, in one `trio.run`."""

from __future__ import annotations

import contextlib
import hmac
import logging
import secrets
import signal
import sys
from pathlib import Path

import attrs
import trio
from hypercorn.config import Config as HypercornConfig

from .actors.messages import Envelope
from .actors.pull import Bus, Pull
from .cluster import hop, nodeid
from .cluster.tell import RemoteTell
from .console import views as console
from .core.config import Settings, describe_lifetime, redact_url
from .core.credentials import Vault, file_secret
from .core.logs import ACCESS_LOG_FORMAT, access_logger
from .http.app import create_app
from .http.edge import Shed
from .http.forward import Forwarder
from .http.hot import Hot
from .http.proxy import behind_proxies
from .http.sessions import key_check, session_key
from .http.swf import SwfEdge
from .node import Node
from .observe import gcwatch
from .shutdown import InFlight, serve_http, until_signalled
from .storage.cluster import node_session
from .storage.factory import open_store, sqlite_path
from .storage.keycheck import KeyCheckStore
from .storage.node_lock import sqlite_node_lock
from .storage.postgres import PostgresStore

log = logging.getLogger("foliot")
KEEP_ALIVE_TIMEOUT_S: float = 75
"""How long hypercorn keeps an idle connection open between requests."""


def admin_token(settings: Settings) -> str:
    """FOLIOT_ADMIN_TOKEN, or a token generated once into the data directory (mode 0600)."""
    if settings.admin_token:
        log.info("admin token: from FOLIOT_ADMIN_TOKEN")
        return settings.admin_token
    path = Path(settings.data_dir) / "admin-token"
    existed = path.exists()
    token = file_secret(path, lambda: "adm_" + secrets.token_urlsafe(32))
    if not existed:
        log.warning("generated an admin token; it is in %s", path.resolve())
    else:
        log.info("admin token read from %s", path.resolve())
    return token


@attrs.frozen
class Running:
    """What a started server hands back: where it listens, and its engine (for tests and tools)."""

    binds: list[str]
    engine: Node

    @property
    def url(self) -> str:
        return self.binds[0]


def log_data_locations(settings: Settings) -> None:
    """Say where the data lives (never a password), and how long it is kept."""
    url = settings.database_url
    where = redact_url(url)
    if url.startswith("sqlite:///") and ":memory:" not in url:
        where += f" (file {Path(sqlite_path(url)).resolve()}, mode 0600)"
    log.info("database: %s", where)
    log.info("data dir: %s", Path(settings.data_dir).resolve())
    log.info(
        "retention: closed runs %s, idempotency keys %s",
        describe_lifetime(settings.retention_ms),
        describe_lifetime(settings.idempotency_ttl_ms),
    )


async def serve(
    settings: Settings,
    *,
    stop: trio.Event | None = None,
    freeze: bool = False,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, or until `stop` is set: then drain (`foliot.shutdown`) and return.
    `freeze`: once ready, keep start-up's objects out of the garbage collector's walks
    (`foliot.observe.gcwatch`; for a process serving one node only)."""
    log_data_locations(settings)
    gcwatch.watch()
    token = admin_token(settings)
    vault = Vault.from_data_dir(settings.data_dir, settings.secret_key)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(settings.switch_interval_us / 1_000_000)
    try:
        with single_node(settings.database_url):
            await _serve_store(settings, token, vault, stop, freeze, task_status)
    finally:
        sys.setswitchinterval(switch)


class KeyMismatch(SystemExit):
    """This node's secret key is not the one the database's secrets were encrypted with."""


async def check_secret_key(store: KeyCheckStore, vault: Vault) -> None:
    """Refuse to start when FOLIOT_SECRET_KEY (or the data directory's key file) is not the key
    the database was first started with: its apps' signing secrets would not decrypt and its
    task tokens would not verify (every node of a cluster shares the key)."""
    mine = vault.key_check()
    stored = await store.secret_key_check(mine)
    if not hmac.compare_digest(stored, mine):
        raise KeyMismatch(
            "refusing to start: this node's secret key (FOLIOT_SECRET_KEY, or secret.key in its data"
            " directory) is not the key this database's secrets were encrypted with; every node"
            " sharing a database must be given the same FOLIOT_SECRET_KEY (the first node's key)"
        )


async def end_sessions_of_other_tokens(engine: Node, token: str) -> None:
    """A new admin token ends every console session made under the previous one (each would be
    refused anyway: `console.session.session_live`; this also takes them off the list)."""
    ended = await engine.store.end_console_sessions(
        engine.clock.now(), other_key=key_check(session_key(token))
    )
    if ended:
        log.info("the admin token changed: %d console sessions ended", ended)


async def join_edge(
    engine: Node,
    bus: Bus,
    vault: Vault,
    node_id: str,
    address: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Several nodes on one PostgreSQL: requests for actors owned elsewhere are forwarded
    (`foliot.http.forward`), long polls reach the other nodes' queues (`foliot.actors.pull`)."""
    forwarder = Forwarder(node_id, vault.derive_key(hop.PURPOSE), engine.clock.now)
    engine.forwarder = forwarder
    engine.pull = Pull(node_id, address, engine.queues, bus, forwarder.claim)

    def retell(kind: str, actor_id: str, message: object) -> None:
        engine.tell_or_retry(engine.kinds[kind], actor_id, Envelope(message))

    where = lambda actor_id: engine.placement.where(actor_id)  # noqa: E731 (read at each call)
    engine.remote_tell = RemoteTell(where, forwarder.internal, engine.spawn, retell)
    try:
        await engine.pull.serve(task_status=task_status)
    finally:
        engine.pull = engine.remote_tell = None
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await forwarder.aclose()


def single_node(database_url: str) -> contextlib.AbstractContextManager[None]:
    """The SQLite single-node lock (`foliot.storage.node_lock`); nothing for PostgreSQL."""
    if database_url.startswith("sqlite:"):
        return sqlite_node_lock(sqlite_path(database_url))
    return contextlib.nullcontext()


async def _serve_store(
    settings: Settings,
    token: str,
    vault: Vault,
    stop: trio.Event | None,
    freeze: bool,
    task_status: trio.TaskStatus[Running],
) -> None:
    with own_node_id(settings) as node_id:
        await _serve_node(settings, token, vault, stop, freeze, node_id, task_status)


def own_node_id(settings: Settings) -> contextlib.AbstractContextManager[str]:
    """This node's name: FOLIOT_NODE_ID, or on PostgreSQL the one kept in its data directory
    (`foliot.cluster.nodeid`: a restarted node takes its leases back at once); on SQLite, single-node,
    a name is only a label."""
    if settings.database_url.startswith("sqlite:"):
        return contextlib.nullcontext(settings.node_id or nodeid.fresh())
    return nodeid.node_id(settings.node_id, settings.data_dir)


async def _serve_node(
    settings: Settings,
    token: str,
    vault: Vault,
    stop: trio.Event | None,
    freeze: bool,
    node_id: str,
    task_status: trio.TaskStatus[Running],
) -> None:
    session = node_session(node_id, settings.lease_ttl_ms)
    async with open_store(settings.database_url, pg_session=session) as store:
        await check_secret_key(store, vault)
        engine = Node(settings, store, vault=vault)
        await end_sessions_of_other_tokens(engine, token)
        if isinstance(store, PostgresStore):
            engine.join_cluster(store, node_id, settings.advertised, ttl_ms=settings.lease_ttl_ms)
        quart_app = create_app(engine, settings, token, faces=[console.blueprint])
        swf_edge = SwfEdge(quart_app, engine, quart_app.config)
        app = InFlight(
            behind_proxies(
                Shed(Hot(swf_edge, engine, token), engine.admission, settings.peer_max_requests),
                settings.trusted_proxies,
                settings.public_url,
            )
        )
        config = HypercornConfig()
        config.bind = [f"{settings.host}:{settings.port}"]
        config.accesslog, config.access_log_format = access_logger(), ACCESS_LOG_FORMAT
        config.errorlog = logging.getLogger("hypercorn.error")
        config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT_S
        # Above capacity, callers open connections faster than one per scheduler pass: let them
        # wait in the kernel's accept queue (taken in bursts, foliot/http/listen.py), not in SYN
        # retries of one, then three seconds.
        config.backlog = 1024
        config.graceful_timeout = settings.shutdown_grace_ms / 1000
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dump_tasks_on_signal)

            async def http(task_status: trio.TaskStatus[list[str]]) -> None:
                await serve_http(
                    app, config, engine, trio.Event() if stop is None else stop, task_status=task_status
                )
                nursery.cancel_scope.cancel()  # drained: stop the engine (its commits finish first)

            binds = await nursery.start(http)
            log.info("serving on %s", ", ".join(binds))
            address = settings.advertise_url or binds[0]  # the port bound (FOLIOT_PORT may be 0)
            quart_app.config["FOLIOT_NODE"] = (node_id, address)
            if engine.ownership.keeper is not None:
                engine.ownership.keeper.address = address
                log.info("cluster node %s, reachable at %s", node_id, address)
            if isinstance(store, PostgresStore):
                await nursery.start(join_edge, engine, store, vault, node_id, address)
            await nursery.start(engine.serve)
            if freeze:
                frozen = gcwatch.freeze_startup()
                log.info("%d objects of start-up frozen out of the garbage collector's walks", frozen)
            log.info("ready")
            task_status.started(Running(binds, engine))
        if app.drain_began is not None:
            log.info(
                "shutdown done: %d commits drained; %.0f ms after the signal",
                engine.drained_commits,
                (trio.current_time() - app.drain_began) * 1000,
            )


async def serve_until_signalled(settings: Settings) -> None:
    """`foliot serve`: SIGTERM or SIGINT drains, then returns (exit 0)."""
    await until_signalled(lambda stop: serve(settings, stop=stop, freeze=settings.gc_freeze))


def task_tree(task: trio.lowlevel.Task, depth: int = 0) -> list[str]:
    """One line per Trio task under `task`, with the frames it is waiting in."""
    frames = [f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno}" for f, _ in task.iter_await_frames()]
    lines = [f"{'  ' * depth}{task.name} {' > '.join(frames[-6:])}"]
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            lines += task_tree(child, depth + 1)
    return lines


async def dump_tasks_on_signal() -> None:
    """`kill -USR2 <pid>` prints every Trio task and where it waits: for a server that seems stuck."""
    with trio.open_signal_receiver(signal.SIGUSR2) as signals:
        async for _ in signals:
            root = trio.lowlevel.current_root_task()
            tree = task_tree(root) if root is not None else []
            print("task tree:\n" + "\n".join(tree), file=sys.stderr, flush=True)


async def migrate(settings: Settings) -> None:
    async with open_store(settings.database_url):
        log.info("migrations applied to %s", redact_url(settings.database_url))
