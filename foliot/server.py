"""Compose and run one Foliot process: store, engine, HTTP server, in one `trio.run`."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from .actors.engine import Engine
from .config import Settings
from .credentials import Vault, file_secret
from .http.app import create_app
from .storage.factory import open_store

log = logging.getLogger("foliot")


def admin_token(settings: Settings) -> str:
    """FOLIOT_ADMIN_TOKEN, or a token generated once into the data directory (mode 0600)."""
    if settings.admin_token:
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
    engine: Engine

    @property
    def url(self) -> str:
        return self.binds[0]


async def serve(
    settings: Settings,
    *,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    token = admin_token(settings)
    vault = Vault.from_data_dir(settings.data_dir, settings.secret_key)
    async with open_store(settings.database_url) as store:
        engine = Engine(settings, store, vault=vault)
        app = create_app(engine, settings, token)
        config = HypercornConfig()
        config.bind = [f"{settings.host}:{settings.port}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.keep_alive_timeout = 75
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(hypercorn_serve, app, config)
            log.info("serving on %s", ", ".join(binds))
            await nursery.start(engine.serve)
            log.info("ready")
            task_status.started(Running(binds, engine))


async def migrate(settings: Settings) -> None:
    async with open_store(settings.database_url):
        log.info("migrations applied to %s", settings.database_url.split("@")[-1])
