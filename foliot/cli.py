"""`foliot serve` and `foliot migrate`; every other command is the operator CLI of the
`foliot-client[cli]` distribution (`foliot runs list`, `foliot why RUN_ID`, ...)."""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import trio

from . import startup
from .core import logs
from .core.config import Settings

ENGINE_COMMANDS = ("serve", "migrate")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in and args_in[0] not in ENGINE_COMMANDS and args_in[0] not in ("-h", "--help"):
        return _operator(args_in)
    parser = argparse.ArgumentParser(
        prog="foliot",
        description="A durable workflow engine.",
        epilog=_operator_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="serve the HTTP API (FOLIOT_HOST, FOLIOT_PORT, FOLIOT_DATABASE_URL)")
    sub.add_parser("migrate", help="apply storage migrations and exit")
    args = parser.parse_args(argv)
    settings: Settings | None = None
    try:
        settings = Settings.from_env()
        log_format = os.environ.get("FOLIOT_LOG_FORMAT") or "json"
        if log_format not in ("json", "text"):
            raise SystemExit(f"FOLIOT_LOG_FORMAT must be json or text, got {log_format!r}")
        logs.configure(log_format, settings.log_level, access_log=os.environ.get("FOLIOT_ACCESS_LOG") == "1")
        from . import server

        # `kill -USR1 <pid>` dumps every thread's stack to stderr: for a server that seems stuck.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        if args.command == "serve":
            _run(server.serve_until_signalled, settings)
        else:
            _run(server.migrate, settings)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        known = startup.explain(exc, settings)
        if known is None or os.environ.get("FOLIOT_DEBUG") == "1":
            raise
        status, message = known
        print(startup.line(message), file=sys.stderr, flush=True)
        return status
    return 0


def _operator_help() -> str:
    try:
        from foliot_client.cli import command_summary
    except ImportError:
        return "Operator commands (runs, workflows, apps, ...) come with foliot-client[cli]."
    return command_summary()


def _operator(argv: list[str]) -> int:
    """Hand an operator command to `foliot_client.cli` (installed with `foliot-client[cli]`)."""
    try:
        from foliot_client.cli import main as operator_main
    except ImportError:
        print(
            f"foliot: {argv[0]!r} is an operator command: pip install 'foliot-client[cli]' "
            "(clients/python) for it; the engine itself has serve and migrate",
            file=sys.stderr,
        )
        return 2
    return operator_main(argv, prog_name="foliot")


def _run(fn: Callable[[Settings], Awaitable[None]], settings: Settings) -> None:
    # With PostgreSQL, the store runs its own asyncio loop in a thread (storage/postgres/bridge.py).
    trio.run(fn, settings)


if __name__ == "__main__":
    raise SystemExit(main())
