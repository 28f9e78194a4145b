"""Shared fixtures: one embedded Temporal server per test session, a fresh task queue per test.

The server is the same tuned `temporal server start-dev` users run (`openflow.server`), on a free
port with its SQLite file in a temporary `OPENFLOW_HOME`. It starts the first time a test asks
for `temporal_server`, `client` or `openflow_env`, and stops when the session ends. PostgreSQL
(`tests/pg.py`) likewise starts on the first test that asks for `pg_url` or `database`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from temporalio.client import Client

from openflow.payloads import data_converter as pydantic_data_converter
from openflow.server import EmbeddedServer, free_port

if TYPE_CHECKING:
    from openflow.database import Database
    from tests.pg import PgServer


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[EmbeddedServer]:
    """The session's embedded Temporal server (tuned, Web UI on, search attributes registered)."""
    home = tmp_path_factory.mktemp("temporal-home")
    server = EmbeddedServer(home, address=f"127.0.0.1:{free_port()}", ui_port=free_port())
    async with server:
        yield server


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def client(temporal_server: EmbeddedServer) -> Client:
    """A client of the session server using the pydantic data converter, like every OpenFlow client."""
    return await temporal_server.connect(data_converter=pydantic_data_converter)


@pytest.fixture
def task_queue() -> str:
    """A task queue no other test polls."""
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def openflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty `OPENFLOW_HOME` for this test."""
    home = tmp_path / "openflow-home"
    home.mkdir()
    monkeypatch.setenv("OPENFLOW_HOME", str(home))
    return home


@pytest.fixture
def openflow_env(
    openflow_home: Path,
    temporal_server: EmbeddedServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    """Point `OPENFLOW_*` at the session server and this test's queue (for CLI and API tests)."""
    env = {
        "OPENFLOW_HOME": str(openflow_home),
        "OPENFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "OPENFLOW_NAMESPACE": temporal_server.namespace,
        "OPENFLOW_TASK_QUEUE": task_queue,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL (started the first time a test asks for it)."""
    from tests.pg import PgServer

    server = PgServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of a new, empty database of the session's PostgreSQL."""
    return pg_server.database()


@pytest.fixture
def database(pg_url: str) -> Iterator[Database]:
    """An open, migrated handle on a new database."""
    from openflow.database import Database

    db = Database(pg_url).open()
    yield db
    db.close()
