"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl in a temp dir, on a free port.

Used unless FOLIOT_TEST_DATABASE_URL names a server. When the tests run as root (CI), the
cluster runs as `nobody`, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if not candidates:
        raise RuntimeError(f"{name} not found on PATH or under /usr/lib/postgresql/*/bin")
    return candidates[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable  # fast by default; durable when a test crashes the cluster
        self.dir = Path(tempfile.mkdtemp(prefix="foliot-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user: str | None = "nobody" if os.geteuid() == 0 else None
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._ready: queue.Queue[str | BaseException] | None = None
        self._template = ""
        self._stopping = False
        self._finished: queue.Queue[str] = queue.Queue()
        self._filler: threading.Thread | None = None

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if self.user is not None:
            shutil.chown(self.dir, self.user)
        return subprocess.run(
            args, check=check, capture_output=True, text=True, user=self.user, cwd=self.dir, timeout=120
        )

    def start(self) -> Cluster:
        self._run(
            _bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\n"
                "max_connections = 200\n"
                + ("" if self.durable else "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
            )
        self.pg_ctl("start", "-w", "-t", "60", "-l", str(self.dir / "log"))
        return self

    def pg_ctl(self, *args: str) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), *args)

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("stop", "-m", mode, "-w")

    def restart(self) -> None:
        self.pg_ctl("start", "-w", "-t", "60", "-l", str(self.dir / "log"))

    def new_database(self) -> str:
        """A fresh empty database on the cluster; returns its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def migrated_database(self) -> str:
        """A fresh database holding the current schema; returns its URL.

        Copied from a template migrated once per session (`createdb -T`), and kept a few ahead
        by a background thread: a test pays neither `createdb` nor the migrations' time.
        """
        if self._ready is None:
            template = self.new_database()
            env = {**os.environ, "FOLIOT_DATABASE_URL": template}
            subprocess.run(
                [sys.executable, "-m", "foliot.cli", "migrate"],
                check=True,
                capture_output=True,
                env=env,
                timeout=120,
            )
            self._template = template.rsplit("/", 1)[1]
            # No session may hold the template while it is copied (autovacuum skips it too).
            self._run(
                _bin("psql"), self.url, "-XAtc", f"ALTER DATABASE {self._template} ALLOW_CONNECTIONS false"
            )
            self._ready = queue.Queue(maxsize=3)
            self._filler = threading.Thread(target=self._fill, name="pg-databases", daemon=True)
            self._filler.start()
        url = self._ready.get(timeout=120)
        if isinstance(url, BaseException):
            raise url
        return url

    def _copy_template(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self._run(
            _bin("createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-T",
            self._template,
            name,
        )
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def finished(self, url: str) -> None:
        """The test holding `url` is over: its database is dropped in the background (hundreds
        of 8 MB databases would otherwise pile up until the session's end)."""
        self._finished.put(url.rsplit("/", 1)[1])

    def _drop_finished(self) -> None:
        while True:
            try:
                name = self._finished.get_nowait()
            except queue.Empty:
                return
            self._run(
                _bin("psql"), self.url, "-XAtc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", check=False
            )

    def _fill(self) -> None:
        assert self._ready is not None
        while not self._stopping:
            self._drop_finished()
            item: str | BaseException
            for _attempt in range(3):
                try:
                    item = self._copy_template()
                    break
                except BaseException as exc:  # after three tries, handed to the next test
                    item = exc
            while not self._stopping:
                try:
                    self._ready.put(item, timeout=0.5)
                    break
                except queue.Full:
                    self._drop_finished()

    def destroy(self) -> None:
        self._stopping = True
        if self._filler is not None:  # not while it copies or drops: the directory goes next
            self._filler.join(timeout=150)
        self._run(_bin("pg_ctl"), "-D", str(self.data), "stop", "-m", "immediate", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def terminate_connections(url: str) -> int:
    """`pg_terminate_backend` every other session of the database `url` names (as an outage
    of the connections would); returns how many were ended."""
    done = subprocess.run(
        [
            _bin("psql"),
            url,
            "-XAtc",
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return int(done.stdout.strip() or 0)
