"""Where a process keeps run state: under `$OPENFLOW_HOME`, or in the cluster database.

`open_backends` reads `OPENFLOW_DATABASE_URL`: unset, the run store and the live channel are
files under `$OPENFLOW_HOME/runs` (the embedded default) and tool locks live in the worker's
memory; set, all three are in PostgreSQL (`openflow.database`), shared by every worker and API
process. One database handle is opened per URL and process.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from openflow.activities.store import FileRunStore, RunStore
from openflow.database import Database, database_url
from openflow.live import FileLiveChannel, LiveChannel

__all__ = ["Backends", "close_shared_database", "open_backends", "open_shared_database"]

_OPEN: dict[str, Database] = {}
_LOCK = threading.Lock()


@dataclass
class Backends:
    """A process's run store and live channel, and the database behind them if any."""

    store: RunStore
    live: LiveChannel
    db: Database | None = None


def open_shared_database(url: str) -> Database:
    """This process's open, migrated handle on `url` (DatabaseError: one line, what to fix)."""
    with _LOCK:
        db = _OPEN.get(url)
        if db is None:
            db = _OPEN[url] = Database(url).open()
        return db


def close_shared_database(url: str) -> None:
    """Close this process's handle on `url` (its pool, live sender and lock connections)."""
    with _LOCK:
        db = _OPEN.pop(url, None)
    if db is not None:
        db.close()


def open_backends(home: Path, env: Mapping[str, str] | None = None) -> Backends:
    """The run store and live channel `OPENFLOW_DATABASE_URL` asks for."""
    url = database_url(env)
    if url is None:
        runs = home / "runs"
        return Backends(store=FileRunStore(runs), live=FileLiveChannel(runs))
    from openflow.activities.pgstore import PostgresRunStore
    from openflow.live_pg import PostgresLiveChannel

    db = open_shared_database(url)
    if db.live is None:
        db.live = PostgresLiveChannel(db)
    return Backends(store=PostgresRunStore(db), live=db.live, db=db)
