"""The live channel through PostgreSQL, for followers on other machines than the worker.

`publish` puts the event on an in-memory queue and returns; one background thread per process
sends what is queued, run by run, as one call of `openflow_live_publish`: it takes the run's
next `live_seq` values, keeps the last `keep` events of the run in `openflow_live` (for a
follower that catches up with `after`) and wakes followers with `NOTIFY openflow_live`. A run
never waits on it: when the database is down, queued events beyond `max_queue` are dropped and
a failed send is logged once, while durable run events still reach followers through Temporal.

`subscribe` holds one connection that LISTENs: it reads the rows after its cursor, then waits
for a notification (or `poll_interval`, which bounds the delay of an event committed between
the read and the wait) and reads again; a lost connection is opened again with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from openflow.database import CONNECT_TIMEOUT_S, Database, DatabaseError
from openflow.live import SEQ_FIELD

__all__ = ["PostgresLiveChannel"]

logger = logging.getLogger(__name__)

CHANNEL = "openflow_live"
_STOP = object()


class PostgresLiveChannel:
    """A live channel whose events travel through the cluster database."""

    def __init__(
        self,
        db: Database,
        *,
        keep: int = 10_000,
        max_queue: int = 10_000,
        poll_interval: float = 0.25,
        batch: int = 500,
    ) -> None:
        self.db = db
        self.keep = keep
        self.max_queue = max_queue
        self.poll_interval = poll_interval
        self.batch = batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._failed = False
        self._dropped = 0
        db.on_close(self.close)

    def __repr__(self) -> str:
        return f"PostgresLiveChannel({self.db.where!r})"

    # --- publishing ---------------------------------------------------------------------

    def publish(self, run_id: str, event: dict[str, Any]) -> None:
        """Queue the event for the sender thread; never blocks, never raises."""
        try:
            if self._queue.qsize() >= self.max_queue:
                self._dropped += 1
                return
            line = json.dumps(event, default=str, ensure_ascii=False)
            self._idle.clear()
            self._queue.put((run_id, line))
            if self._thread is None:
                self._start()
        # A run must never fail because its followers cannot be fed.
        except Exception as exc:
            self._warn(run_id, exc)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._send_forever, name="openflow-live", daemon=True
                )
                self._thread.start()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far was sent (or dropped); for tests and shutdown."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Send what is queued, then stop the sender thread."""
        thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(5)
            self._thread = None

    def _send_forever(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._idle.set()
                return
            pending: dict[str, list[str]] = {item[0]: [item[1]]}
            stop = False
            count = 1
            while count < self.batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                pending.setdefault(more[0], []).append(more[1])
                count += 1
            for run_id, lines in pending.items():
                self._send(run_id, lines)
            if self._queue.empty():
                self._idle.set()
            if stop:
                self._idle.set()
                return

    def _send(self, run_id: str, lines: list[str]) -> None:
        try:
            with self.db.connection() as conn:
                conn.execute(
                    "SELECT openflow_live_publish(%s, %s::text[], %s)", (run_id, lines, self.keep)
                )
            if self._failed:
                self._failed = False
                logger.info("live events are delivered again")
        except (psycopg.Error, PoolTimeout, DatabaseError) as exc:
            self._warn(run_id, exc)

    def _warn(self, run_id: str, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            logger.warning(
                "live events for run %r (and later ones) are not delivered: %s; "
                "check the database at %s",
                run_id,
                type(exc).__name__,
                self.db.where,
            )

    # --- following ----------------------------------------------------------------------

    async def subscribe(
        self, run_id: str, after: int = 0, *, poll_interval: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the run's events with `live_seq` above `after`, then new ones as they come."""
        interval = self.poll_interval if poll_interval is None else poll_interval
        cursor = after
        conn: psycopg.AsyncConnection[Any] | None = None
        backoff = 0.1
        try:
            while True:
                if conn is None:
                    try:
                        conn = await psycopg.AsyncConnection.connect(
                            self.db.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                        )
                        await conn.execute(f"LISTEN {CHANNEL}")
                        backoff = 0.1
                    except psycopg.Error:
                        await _close(conn)
                        conn = None
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, 5.0)
                        continue
                try:
                    cur = await conn.execute(
                        "SELECT seq, event FROM openflow_live WHERE run_id = %s AND seq > %s "
                        "ORDER BY seq LIMIT %s",
                        (run_id, cursor, self.batch),
                    )
                    rows = await cur.fetchall()
                except psycopg.Error:
                    await _close(conn)
                    conn = None
                    continue
                for seq, text in rows:
                    cursor = int(seq)
                    with contextlib.suppress(ValueError):
                        event = json.loads(text)
                        if isinstance(event, dict):
                            event[SEQ_FIELD] = cursor
                            yield event
                if len(rows) >= self.batch:
                    continue
                try:
                    async for _ in conn.notifies(timeout=interval, stop_after=1):
                        pass
                except psycopg.Error:
                    await _close(conn)
                    conn = None
        finally:
            await _close(conn)


async def _close(conn: psycopg.AsyncConnection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()
