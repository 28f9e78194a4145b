"""Tool locks across workers: PostgreSQL advisory locks on top of a run's in-process locks.

Two calls that write the same path never run at once, whichever workers run them: a path key
becomes the resolved path itself (so runs sharing a project folder exclude each other), and
every other key (`file-mutation`, a node's bash) is scoped to its run. Keys are hashed to the
64-bit ids advisory locks take, sorted, and taken in one statement on a connection held for the
call; a worker that dies loses its session, and PostgreSQL releases its locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from openflow.activities.tools.executor import LockTable
from openflow.database import CONNECT_TIMEOUT_S, Database, DatabaseUnavailable

__all__ = ["ClusterLocks", "SharedLockTable", "lock_id"]


def lock_id(key: str) -> int:
    """The signed 64-bit advisory lock id of a lock key."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class ClusterLocks:
    """One worker's advisory locks: a small async pool of connections that hold them."""

    def __init__(self, db: Database, *, max_size: int = 32) -> None:
        self.db = db
        self.max_size = max_size
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._opening = asyncio.Lock()
        self._releasing: set[asyncio.Task[None]] = set()

    async def _connections(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        async with self._opening:
            if self._pool is None:
                pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                    self.db.url,
                    min_size=0,
                    max_size=self.max_size,
                    kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
                    timeout=CONNECT_TIMEOUT_S,
                    name="openflow-locks",
                    open=False,
                )
                await pool.open()
                self._pool = pool
            return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @contextlib.asynccontextmanager
    async def hold(self, keys: Sequence[str]) -> AsyncIterator[None]:
        """Hold every key's advisory lock until the block ends (sorted: no deadlocks)."""
        ids = sorted({lock_id(key) for key in keys})
        if not ids:
            yield
            return
        pool = await self._connections()
        conn = await self._locked(pool, ids)
        try:
            yield
        finally:
            # Released off the caller's path: the next holder waits for it, the batch does not.
            task = asyncio.create_task(self._release(pool, conn))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    async def _locked(
        self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]], ids: list[int]
    ) -> psycopg.AsyncConnection[Any]:
        """A pooled connection holding every lock in `ids`, riding out a database restart."""
        deadline = time.monotonic() + self.db.retry_window_s
        delay = 0.1
        while True:
            conn = None
            try:
                conn = await pool.getconn()
                await conn.execute(
                    "SELECT pg_advisory_lock(k) FROM unnest(%s::bigint[]) WITH ORDINALITY "
                    "AS t(k, o) ORDER BY o",
                    (ids,),
                )
                return conn
            except BaseException as exc:
                if conn is not None:
                    await pool.putconn(conn)  # a broken or busy one is discarded
                if not isinstance(exc, psycopg.OperationalError | PoolTimeout):
                    raise
                if time.monotonic() + delay > deadline:
                    raise DatabaseUnavailable(
                        f"the database at {self.db.where} is unavailable (taking tool locks): "
                        f"{type(exc).__name__}"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    @staticmethod
    async def _release(
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]], conn: psycopg.AsyncConnection[Any]
    ) -> None:
        try:
            await conn.execute("SELECT pg_advisory_unlock_all()")
        except psycopg.Error:
            await conn.close()  # its session ends, and with it every lock it held
        finally:
            await pool.putconn(conn)


class SharedLockTable:
    """A run's lock table whose keys are also held across the cluster."""

    def __init__(self, cluster: ClusterLocks, run_id: str, execution_dir: Path) -> None:
        self.local = LockTable()
        self.cluster = cluster
        self.run_id = run_id
        self.root = os.path.realpath(execution_dir)

    def is_locked(self, key: str) -> bool:
        return self.local.is_locked(key)

    def scoped(self, key: str) -> str:
        """A path key as the resolved path; any other key within its run."""
        if key.startswith("path:") and not key.startswith("path:run://"):
            return "path:" + os.path.normpath(os.path.join(self.root, key[len("path:") :]))
        return f"run:{self.run_id}\x1f{key}"

    @contextlib.asynccontextmanager
    async def hold(self, keys: Sequence[str]) -> AsyncIterator[None]:
        async with self.local.hold(keys), self.cluster.hold([self.scoped(k) for k in keys]):
            yield
