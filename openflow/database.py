"""The cluster database: PostgreSQL for run state shared by every worker and API process.

`OPENFLOW_DATABASE_URL=postgresql://...` turns it on. `Database.open` checks the URL, connects
once, creates or migrates the schema (versioned, under an advisory lock so workers starting at
once take turns) and opens a connection pool. The run store, the live channel and the tool
locks all use one `Database` per process.

Errors::

    DatabaseError           base of every database error (one line, never the password)
    ├── DatabaseUnavailable the URL is wrong, the server is unreachable or refuses us
    └── SchemaTooNew        the database was migrated by a newer OpenFlow; left untouched
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from openflow.settings import runtime_settings

if TYPE_CHECKING:  # psycopg loads in ~0.2 s: only processes that use a database pay for it
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = [
    "SCHEMA_VERSION",
    "Database",
    "DatabaseError",
    "DatabaseUnavailable",
    "SchemaTooNew",
    "database_url",
    "describe_url",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA_VERSION = 1
#: The advisory lock key migrations hold (any constant shared by every OpenFlow process).
MIGRATION_LOCK = 0x0F10_5C4E_3A00_0001
CONNECT_TIMEOUT_S = 5
#: How long a store call waits for the database to come back before it fails.
RETRY_WINDOW_S = 30.0
#: After a lost connection, calls connect directly while the pool has nothing idle this long.
RECOVERY_S = 30.0


class DatabaseError(Exception):
    """Base of every database error."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be used: a wrong URL, an unreachable server, refused credentials."""


class SchemaTooNew(DatabaseError):
    """The database's schema is newer than this code understands."""


def database_url(env: Mapping[str, str] | None = None) -> str | None:
    """`OPENFLOW_DATABASE_URL` when set (None: run state stays under `$OPENFLOW_HOME`)."""
    url = runtime_settings(env, only=("database_url",)).database_url
    return url.get_secret_value() if url is not None else None


def describe_url(url: str) -> str:
    """`host:port/dbname` of a URL, never its user's password."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "the database in OPENFLOW_DATABASE_URL"
    name = parts.path.lstrip("/") or "postgres"
    return f"{host}:{port}/{name}"


def _check_url(url: str) -> None:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        raise DatabaseUnavailable(
            "OPENFLOW_DATABASE_URL must start with postgresql:// "
            "(for example postgresql://openflow:PASSWORD@db:5432/openflow)"
        )
    try:
        urlsplit(url).port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise DatabaseUnavailable(
            "OPENFLOW_DATABASE_URL has an invalid port; use postgresql://USER:PASSWORD@HOST:PORT/DB"
        ) from None


def _reason(exc: BaseException, url: str) -> str:
    """What went wrong, on one line and without the password."""
    text = " ".join(str(exc).split())
    parts = urlsplit(url)
    if parts.password:
        text = text.replace(parts.password, "***")
    lowered = text.lower()
    if "password authentication failed" in lowered or "authentication" in lowered:
        return "the user or password is refused; fix them in OPENFLOW_DATABASE_URL"
    if "does not exist" in lowered and "database" in lowered:
        return "the database does not exist; create it or fix its name in OPENFLOW_DATABASE_URL"
    if "connection refused" in lowered or "timeout" in lowered or "could not" in lowered:
        return "nothing answers there; start PostgreSQL or fix the host and port"
    return text[:300] or type(exc).__name__


# Each migration takes the schema from the version before it to its own.
MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE openflow_blobs (
    run_id text NOT NULL,
    key text NOT NULL,
    data bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);
CREATE TABLE openflow_logs (
    run_id text NOT NULL,
    key text NOT NULL,
    length integer NOT NULL DEFAULT 0,
    generation bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE openflow_log_lines (
    run_id text NOT NULL,
    key text NOT NULL,
    idx integer NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (run_id, key, idx)
);
CREATE FUNCTION openflow_put(p_run text, p_key text, p_data bytea, p_sync boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT p_sync THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO openflow_blobs (run_id, key, data) VALUES (p_run, p_key, p_data)
    ON CONFLICT (run_id, key) DO UPDATE SET data = excluded.data, updated_at = now();
END $$;
CREATE FUNCTION openflow_append(
    p_run text, p_key text, p_lines text[], p_expected integer, OUT length integer,
    OUT generation bigint
) LANGUAGE plpgsql AS $$
DECLARE
    have integer;
    gen bigint;
    added integer := coalesce(array_length(p_lines, 1), 0);
BEGIN
    IF added = 0 THEN
        -- Nothing to add to a log already as expected: read only, so nothing to flush.
        SELECT g.length, g.generation INTO have, gen FROM openflow_logs AS g
        WHERE g.run_id = p_run AND g.key = p_key;
        IF (NOT FOUND AND p_expected = 0) OR have = p_expected THEN
            length := coalesce(have, 0);
            generation := coalesce(gen, 0);
            RETURN;
        END IF;
    END IF;
    INSERT INTO openflow_logs (run_id, key) VALUES (p_run, p_key) ON CONFLICT DO NOTHING;
    SELECT g.length INTO have FROM openflow_logs AS g
    WHERE g.run_id = p_run AND g.key = p_key FOR UPDATE;
    IF have < p_expected THEN
        RAISE EXCEPTION 'log %/% holds % lines but the caller expected %',
            p_run, p_key, have, p_expected USING ERRCODE = 'OF001';
    END IF;
    IF have > p_expected THEN
        DELETE FROM openflow_log_lines
        WHERE run_id = p_run AND key = p_key AND idx >= p_expected;
    END IF;
    INSERT INTO openflow_log_lines (run_id, key, idx, line)
    SELECT p_run, p_key, p_expected + t.o - 1, t.l
    FROM unnest(p_lines) WITH ORDINALITY AS t(l, o);
    UPDATE openflow_logs AS g SET length = p_expected + added, generation = g.generation + 1
    WHERE g.run_id = p_run AND g.key = p_key
    RETURNING g.length, g.generation INTO length, generation;
END $$;
CREATE TABLE openflow_live_runs (
    run_id text PRIMARY KEY,
    last_seq bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE openflow_live (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    event text NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE FUNCTION openflow_live_publish(p_run text, p_events text[], p_keep integer)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(array_length(p_events, 1), 0);
    last bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO openflow_live_runs AS r (run_id, last_seq) VALUES (p_run, n)
    ON CONFLICT (run_id) DO UPDATE SET last_seq = r.last_seq + n, updated_at = now()
    RETURNING last_seq INTO last;
    INSERT INTO openflow_live (run_id, seq, event)
    SELECT p_run, last - n + t.o, t.e FROM unnest(p_events) WITH ORDINALITY AS t(e, o);
    IF last > p_keep THEN
        DELETE FROM openflow_live WHERE run_id = p_run AND seq <= last - p_keep;
    END IF;
    PERFORM pg_notify('openflow_live', p_run);
    RETURN last;
END $$;
""",
}


def migrate(conn: psycopg.Connection[Any], url: str) -> int:
    """Bring the schema to SCHEMA_VERSION under the migration lock; return the version found."""
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        row = conn.execute("SELECT to_regclass('openflow_schema') IS NOT NULL").fetchone()
        if not (row and row[0]):
            conn.execute("CREATE TABLE IF NOT EXISTS openflow_schema (version integer NOT NULL)")
        found = conn.execute("SELECT coalesce(max(version), 0) FROM openflow_schema").fetchone()
        current = int(found[0]) if found else 0
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"the database at {describe_url(url)} has OpenFlow schema version {current}, "
                f"newer than this version understands ({SCHEMA_VERSION}); upgrade OpenFlow on "
                "this machine (the database was left untouched)"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with conn.transaction():
                conn.execute(MIGRATIONS[version])
                conn.execute("INSERT INTO openflow_schema (version) VALUES (%s)", (version,))
            log.info("migrated %s to OpenFlow schema version %d", describe_url(url), version)
        return current
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


class Database:
    """One process's handle on the cluster database: a checked URL and a connection pool."""

    def __init__(self, url: str, *, max_size: int = 16, retry_window_s: float = RETRY_WINDOW_S):
        _check_url(url)
        self.url = url
        self.where = describe_url(url)
        self.retry_window_s = retry_window_s
        self._max_size = max_size
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._lock = threading.Lock()
        self._closers: list[Callable[[], None]] = []
        #: The process's live channel on this database (one sender thread per process).
        self.live: Any = None
        self._direct_until = 0.0

    def __repr__(self) -> str:
        return f"Database({self.where!r})"

    def open(self) -> Database:
        """Connect once, migrate the schema and open the pool; raise DatabaseError on failure."""
        import psycopg
        from psycopg_pool import ConnectionPool

        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as c:
                migrate(c, self.url)
        except psycopg.Error as exc:
            raise DatabaseUnavailable(
                f"cannot use the database at {self.where} (OPENFLOW_DATABASE_URL): "
                f"{_reason(exc, self.url)}"
            ) from None
        with self._lock:
            if self._pool is None:
                self._pool = ConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self._max_size,
                    kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
                    timeout=CONNECT_TIMEOUT_S,
                    name="openflow",
                    open=True,
                )
        return self

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        if self._pool is None:
            self.open()
        assert self._pool is not None
        return self._pool

    def _pool_ready(self) -> bool:
        """Whether the pool holds an idle connection (so taking one does not wait)."""
        try:
            return int(self.pool.get_stats().get("pool_available", 0)) > 0
        except Exception:  # a closed or broken pool: connect directly
            return False

    def on_close(self, closer: Callable[[], None]) -> None:
        """Run `closer` when the database handle closes (live publishers, lock pools)."""
        self._closers.append(closer)

    def close(self) -> None:
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer()
        self._closers.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn:
            yield conn

    def run(self, op: Callable[[psycopg.Connection[Any]], T], what: str) -> T:
        """Run an idempotent `op` on a pooled connection, riding out a database restart.

        A lost connection or an unreachable server is tried again with backoff for up to
        `retry_window_s`; then DatabaseUnavailable says what could not be done.
        """
        import psycopg
        from psycopg_pool import PoolTimeout

        deadline = time.monotonic() + self.retry_window_s
        delay = 0.1
        failed = time.monotonic() < self._direct_until and not self._pool_ready()
        while True:
            try:
                if not failed:
                    with self.connection() as conn:
                        return op(conn)
                # After a failure the pool heals in the background, with its own backoff: a
                # direct connection goes on as soon as the server is back.
                with psycopg.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                ) as direct:
                    return op(direct)
            except (psycopg.OperationalError, PoolTimeout) as exc:
                failed = True
                self._direct_until = time.monotonic() + RECOVERY_S
                if isinstance(exc, psycopg.errors.QueryCanceled):
                    raise
                if time.monotonic() + delay > deadline:
                    raise DatabaseUnavailable(
                        f"the database at {self.where} is unavailable ({what}): "
                        f"{_reason(exc, self.url)}"
                    ) from None
                with contextlib.suppress(Exception):
                    self.pool.check()
                time.sleep(delay)
                delay = min(delay * 2, 2.0)


def open_database(url: str) -> Database:
    """A migrated, open Database for `url`; DatabaseError says in one line what to fix."""
    return Database(url).open()
