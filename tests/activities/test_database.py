"""The cluster database at start: migrations, a newer schema, bad URLs; tool locks across workers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from openflow.activities.tools.cluster_locks import ClusterLocks, SharedLockTable
from openflow.database import SCHEMA_VERSION, Database, SchemaTooNew
from openflow.server import free_port

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def test_workers_starting_at_once_migrate_the_schema_once(pg_url: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        handles = list(pool.map(lambda _: Database(pg_url).open(), range(4)))
    for db in handles:
        db.close()
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM openflow_schema").fetchall()
    assert versions == [(SCHEMA_VERSION,)]


def test_a_schema_newer_than_the_code_is_refused_and_left_untouched(pg_url: str) -> None:
    Database(pg_url).open().close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO openflow_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
        conn.execute("CREATE TABLE openflow_future (x int)")
    with pytest.raises(SchemaTooNew, match="newer than this version understands"):
        Database(pg_url).open()
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM openflow_schema ORDER BY 1").fetchall()
        assert versions == [(SCHEMA_VERSION,), (SCHEMA_VERSION + 1,)]
        assert conn.execute("SELECT to_regclass('openflow_future')").fetchone() != (None,)


def test_a_worker_whose_database_is_unreachable_stops_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://openflow:s3cretpw@127.0.0.1:{free_port()}/runs"
    done = subprocess.run(
        [sys.executable, "-m", "openflow.cli", "worker"],
        env=_env(
            OPENFLOW_DATABASE_URL=url,
            OPENFLOW_HOME=str(tmp_path),
            OPENFLOW_TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing answers there" in lines[0], done.stderr
    assert "s3cretpw" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("command", "url", "says"),
    [
        (["api"], "mysql://openflow:s3cretpw@db/runs", "must start with postgresql://"),
        (["run", "wf.json"], "postgresql://openflow:s3cretpw@db:notaport/x", "invalid port"),
    ],
)
def test_commands_refuse_a_misconfigured_database_in_one_line(
    command: list[str],
    url: str,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from openflow.cli import main

    (tmp_path / "wf.json").write_text(WORKFLOW)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_DATABASE_URL", url)
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    code = main([*command, "--port", str(free_port())] if command == ["api"] else command)
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], err
    assert "s3cretpw" not in out + err


WORKFLOW = """{"id": "wf", "name": "wf", "edges": [], "nodes": [{"id": "a", "label": "a",
 "kind": "agent", "position": {"x": 0, "y": 0}, "agent": {"system_prompt": "s",
 "task_prompt": "t", "model": "m", "output_schema": {"type": "object"}}}]}"""


def test_a_wrong_password_is_named_without_the_password(pg_server: object) -> None:
    # The test server trusts every local user, so a missing database stands in for refusal.
    url = pg_server.url_of("no_such_db").replace("postgres@", "postgres:s3cretpw@")  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="the database does not exist") as caught:
        Database(url).open()
    assert "s3cretpw" not in str(caught.value)


HOLDER = """
import asyncio, sys
from pathlib import Path
from openflow.database import Database
from openflow.activities.tools.cluster_locks import ClusterLocks, SharedLockTable

async def main():
    db = Database(sys.argv[1]).open()
    table = SharedLockTable(ClusterLocks(db), "run-1", Path(sys.argv[2]))
    async with table.hold(["path:shared.txt", "file-mutation"]):
        print("held", flush=True)
        await asyncio.sleep(1.5)
    db.close()

asyncio.run(main())
"""


async def test_two_workers_never_hold_the_same_path_at_once(pg_url: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_url, str(project)],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        assert await asyncio.to_thread(other.stdout.readline) == "held\n"
        db = Database(pg_url).open()
        locks = ClusterLocks(db)
        # Another run over the same project folder, on this "worker".
        mine = SharedLockTable(locks, "run-2", project)
        started = time.monotonic()
        async with mine.hold(["path:other.txt", "file-mutation"]):
            assert time.monotonic() - started < 1.0, "a different path waited"
        async with mine.hold(["path:sub/../shared.txt"]):
            waited = time.monotonic() - started
        assert waited >= 1.0, "the same path was written by two workers at once"
        assert await asyncio.to_thread(other.wait, 20) == 0
        await locks.close()
        db.close()
    finally:
        if other.poll() is None:
            other.kill()


def test_a_store_call_fails_retryably_while_the_database_is_down_then_works_again() -> None:
    from openflow.activities.pgstore import PostgresRunStore
    from openflow.database import DatabaseUnavailable
    from tests.pg import PgServer

    server = PgServer()
    server.start()
    try:
        db = Database(server.url, retry_window_s=1.0).open()
        store = PostgresRunStore(db)
        store.append_lines("run-1", "transcripts/a.jsonl", ["one"], 0)
        server.stop()
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match=r"127\.0\.0\.1:\d+/postgres is unavailable"):
            store.append_lines("run-1", "transcripts/a.jsonl", ["two"], 1)
        assert time.monotonic() - started < 10
        server.start()
        assert store.append_lines("run-1", "transcripts/a.jsonl", ["two"], 1) == 2
        assert store.read_lines("run-1", "transcripts/a.jsonl") == ["one", "two"]
        db.close()
    finally:
        server.close()
