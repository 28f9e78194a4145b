"""The run store in PostgreSQL, for workers and API processes that share no disk.

Whole objects are rows of `openflow_blobs`; a log is a row of `openflow_logs` (its length and a
generation bumped by every append) plus one row per line in `openflow_log_lines`. An append is
one call of `openflow_append`, one transaction: it checks the expected length (LogConflict when
the log holds fewer lines), drops what a failed attempt left past it and adds the new lines, so
a worker killed at any moment leaves the log as it was before or after, never between.

The interface is synchronous, like the file store's: activities call it through
`asyncio.to_thread`, so it uses psycopg's blocking pool (one round trip per call, no event loop
to share with the worker's).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any

import psycopg

from openflow.activities.store import (
    KeyNotFound,
    LogConflict,
    _encode_lines,
    validate_key,
    validate_run_id,
)
from openflow.database import Database

__all__ = ["PostgresRunStore"]


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class PostgresRunStore:
    """A run store in the cluster database; every method is one idempotent round trip."""

    #: Reads go over the network: callers keep them off the event loop.
    remote = True

    def __init__(self, db: Database) -> None:
        self.db = db
        self._appended: dict[tuple[str, str], tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"PostgresRunStore({self.db.where!r})"

    def run_dir(self, run_id: str) -> None:
        """Runs in the database have no local folder."""
        validate_run_id(run_id)
        return None

    def put_bytes(self, run_id: str, key: str, data: bytes, *, sync: bool = True) -> None:
        """Upsert the object; `sync=False` commits without waiting for the WAL flush."""
        args = (validate_run_id(run_id), validate_key(key), bytes(data), sync)
        self.db.run(
            lambda conn: conn.execute("SELECT openflow_put(%s, %s, %s, %s)", args),
            f"storing {key!r} of run {run_id!r}",
        )

    def _get(self, run_id: str, key: str) -> bytes | None:
        run, name = validate_run_id(run_id), validate_key(key)

        def op(conn: psycopg.Connection[Any]) -> bytes | None:
            row = conn.execute(
                "SELECT data FROM openflow_blobs WHERE run_id = %s AND key = %s", (run, name)
            ).fetchone()
            if row is not None:
                return bytes(row[0])
            lines = conn.execute(
                "SELECT l.line FROM openflow_logs g JOIN openflow_log_lines l "
                "ON l.run_id = g.run_id AND l.key = g.key "
                "WHERE g.run_id = %s AND g.key = %s ORDER BY l.idx",
                (run, name),
            ).fetchall()
            if not lines:
                found = conn.execute(
                    "SELECT 1 FROM openflow_logs WHERE run_id = %s AND key = %s", (run, name)
                ).fetchone()
                return b"" if found else None
            return "".join(f"{line}\n" for (line,) in lines).encode()

        return self.db.run(op, f"reading {key!r} of run {run_id!r}")

    def get_bytes(self, run_id: str, key: str) -> bytes:
        """The object stored under `key` (a log reads back as its lines)."""
        data = self._get(run_id, key)
        if data is None:
            raise KeyNotFound(f"run {run_id!r} has nothing stored at {key!r}")
        return data

    def exists(self, run_id: str, key: str) -> bool:
        """Whether an object or a log is stored under `key`."""
        args = (validate_run_id(run_id), validate_key(key)) * 2
        row = self.db.run(
            lambda conn: conn.execute(
                "SELECT EXISTS (SELECT 1 FROM openflow_blobs WHERE run_id = %s AND key = %s) "
                "OR EXISTS (SELECT 1 FROM openflow_logs WHERE run_id = %s AND key = %s)",
                args,
            ).fetchone(),
            f"looking up {key!r} of run {run_id!r}",
        )
        return bool(row and row[0])

    def append_lines(
        self, run_id: str, key: str, lines: Iterable[str | bytes], expected_len: int
    ) -> int:
        """Append after the first `expected_len` lines in one transaction (see the module)."""
        if expected_len < 0:
            raise ValueError(f"expected_len must be >= 0, got {expected_len}")
        run, name = validate_run_id(run_id), validate_key(key)
        encoded = _encode_lines(lines)
        texts = encoded.decode().split("\n")[:-1] if encoded else []

        def op(conn: psycopg.Connection[Any]) -> int:
            try:
                row = conn.execute(
                    "SELECT length, generation FROM openflow_append(%s, %s, %s::text[], %s)",
                    (run, name, texts, expected_len),
                ).fetchone()
            except psycopg.DatabaseError as exc:
                if exc.sqlstate == "OF001":
                    raise LogConflict(
                        f"{exc.diag.message_primary}; the run store lost data: resume the run "
                        "from a checkpoint whose files exist"
                    ) from None
                raise
            assert row is not None
            self._appended[(run, name)] = (int(row[0]), int(row[1]))
            while len(self._appended) > 1024:
                self._appended.pop(next(iter(self._appended)), None)
            return int(row[0])

        return self.db.run(op, f"appending to {key!r} of run {run_id!r}")

    def appended_stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's stamp as this store's last append to it left it (no round trip)."""
        return self._appended.get((run_id, key))

    def stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's length and generation, to tell whether it changed since it was read."""
        args = (validate_run_id(run_id), validate_key(key))
        row = self.db.run(
            lambda conn: conn.execute(
                "SELECT length, generation FROM openflow_logs WHERE run_id = %s AND key = %s",
                args,
            ).fetchone(),
            f"looking up {key!r} of run {run_id!r}",
        )
        return None if row is None else (int(row[0]), int(row[1]))

    def read_lines(self, run_id: str, key: str, start: int = 0) -> builtins.list[str]:
        """The log's lines from index `start` on (a missing log is empty)."""
        args = (validate_run_id(run_id), validate_key(key), max(start, 0))
        rows = self.db.run(
            lambda conn: conn.execute(
                "SELECT line FROM openflow_log_lines WHERE run_id = %s AND key = %s "
                "AND idx >= %s ORDER BY idx",
                args,
            ).fetchall(),
            f"reading {key!r} of run {run_id!r}",
        )
        return [line for (line,) in rows]

    def list(self, run_id: str, prefix: str = "") -> builtins.list[str]:
        """Every key of the run starting with `prefix` (a plain string prefix, as in S3)."""
        args = (validate_run_id(run_id), _like_prefix(prefix)) * 2
        rows = self.db.run(
            lambda conn: conn.execute(
                "SELECT key FROM openflow_blobs WHERE run_id = %s AND key LIKE %s "
                "UNION SELECT key FROM openflow_logs WHERE run_id = %s AND key LIKE %s "
                "ORDER BY 1",
                args,
            ).fetchall(),
            f"listing run {run_id!r}",
        )
        return sorted(key for (key,) in rows)

    def digests(self, run_id: str, prefix: str) -> dict[str, str]:
        """The md5 of every object under `prefix`, to copy only what changed."""
        args = (validate_run_id(run_id), _like_prefix(prefix))
        rows = self.db.run(
            lambda conn: conn.execute(
                "SELECT key, md5(data) FROM openflow_blobs WHERE run_id = %s AND key LIKE %s",
                args,
            ).fetchall(),
            f"listing run {run_id!r}",
        )
        return {key: digest for key, digest in rows}
