"""Start-up failures as one line on stderr: what is wrong and how to fix it.

`foliot serve` and `foliot migrate` turn the failures an operator causes and can fix into a
single line, `foliot: <problem>; <fix>`, and exit 2 (a configuration error: a bad setting, an
invalid FOLIOT_SECRET_KEY, a port in use, a SQLite data directory another `foliot serve`
holds) or 1 (the database could not be reached). Anything else is a defect of Foliot and keeps
its traceback. FOLIOT_DEBUG=1 keeps the traceback for every failure.

Configuration errors are raised as `SystemExit(<message>)` where they are found (`config.py`,
`credentials.Vault`, `storage.node_lock`, `server.check_secret_key`); inside `trio.run` they
may arrive wrapped in exception groups, which `explain` looks through.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Final

import trio

from .core.config import Settings
from .core.errors import StorageUnavailable

CONFIG: Final = 2  # the exit status of a configuration error
UNREACHABLE: Final = 1  # the database could not be reached


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside `exc`'s groups (`exc` itself when it is not a group)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def _one(exc: BaseException, settings: Settings | None) -> tuple[int, str] | None:
    if isinstance(exc, SystemExit) and isinstance(exc.code, str):
        return CONFIG, exc.code
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        where = f"{settings.host}:{settings.port}" if settings is not None else "the configured address"
        if exc.errno == errno.EADDRINUSE:
            problem = f"cannot listen on {where}: the address is already in use (by another process)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            problem = f"cannot listen on {where}: no interface of this machine has that address"
        elif exc.filename is None:  # a bind refused (a port below 1024 without the privilege)
            problem = f"cannot listen on {where}: permission denied"
        else:
            return CONFIG, f"permission denied on {exc.filename}; check FOLIOT_DATA_DIR and its owner"
        return CONFIG, f"{problem}; set FOLIOT_PORT (or FOLIOT_HOST) to a free address, or stop that process"
    if isinstance(exc, StorageUnavailable):
        return UNREACHABLE, (
            f"the database cannot be reached ({exc}); check FOLIOT_DATABASE_URL and that the database is up"
        )
    return None


def explain(exc: BaseException, settings: Settings | None = None) -> tuple[int, str] | None:
    """`(exit status, one line)` for a start-up failure an operator can fix; None for anything
    else (a defect: let its traceback show). Cancellations beside the cause are ignored."""
    found: tuple[int, str] | None = None
    for leaf in leaves(exc):
        if isinstance(leaf, (trio.Cancelled, KeyboardInterrupt)):
            continue
        known = _one(leaf, settings)
        if known is None:
            return None  # something unexpected came with it: show everything
        found = found or known
    return found


def line(message: str) -> str:
    """The message as one line (a message never spans lines, whatever raised it)."""
    return "foliot: " + " ".join(message.split())
