"""docker/docker-compose.yml runs what the cluster test runs: same variables, same commands.

There is no Docker engine here, so `docker compose config` cannot run; the file is parsed
(PyYAML) and held to the cluster test's environment and to what the image installs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import API_VARIABLES, WORKER_VARIABLES, api_healthcheck, compose_file

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def compose() -> dict[str, Any]:
    data = compose_file()
    if data is None:
        pytest.skip("PyYAML is not installed")
    return data


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def health_command() -> list[str]:
    command = api_healthcheck()
    assert command is not None
    return command


def test_the_worker_and_api_get_exactly_the_cluster_tests_variables() -> None:
    found = services()
    assert set(found["worker"]["environment"]) == set(WORKER_VARIABLES)
    assert set(found["api"]["environment"]) == set(API_VARIABLES)
    worker, api = found["worker"]["environment"], found["api"]["environment"]
    for name in set(WORKER_VARIABLES) & set(API_VARIABLES) - {"OPENFLOW_HOME"}:
        assert worker[name] == api[name], name
    assert found["worker"]["command"] == ["openflow", "worker"]
    assert found["api"]["command"][:2] == ["openflow", "api"]


def test_the_services_share_postgresql_temporal_and_the_workspace_volume_only() -> None:
    found = services()
    worker, api = found["worker"], found["api"]
    url = worker["environment"]["OPENFLOW_DATABASE_URL"]
    host = re.fullmatch(r"postgresql://[^@]+@([^:/]+):5432/(\w+)", url)
    assert host and host.group(1) == "postgresql" and host.group(2) == "openflow", url
    assert found["postgresql"]["environment"]["POSTGRES_DB"] == "openflow"
    temporal = found["temporal"]["environment"]
    assert temporal["DB"] == "postgres12" and temporal["POSTGRES_SEEDS"] == "postgresql"
    assert "openflow" not in (temporal["DBNAME"], temporal["VISIBILITY_DBNAME"])
    assert "temporal:7233" in worker["environment"]["TEMPORAL_ADDRESS"]
    assert found["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"

    workspaces = worker["environment"]["OPENFLOW_WORKSPACES"]
    assert worker["volumes"] == [f"workspaces:{workspaces}"]
    assert int(worker["deploy"]["replicas"]) >= 2
    # Each worker's home is its own container's; the API's is a volume of its own.
    assert api["volumes"] == [f"api-home:{api['environment']['OPENFLOW_HOME']}"]
    assert set(compose()["volumes"]) == {"postgres-data", "workspaces", "api-home"}


def test_the_api_has_a_healthcheck_on_health() -> None:
    command = health_command()
    assert command[0] == "python" and "/health" in command[-1]
    assert "'ok'" in command[-1]


def test_the_image_installs_what_workers_need() -> None:
    text = DOCKERFILE.read_text()
    assert "bubblewrap" in text and "bwrap --version" in text
    assert "pip install --no-cache-dir ." in text
    assert "/data/workspaces" in text
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[>=<]", d)[0] for d in dependencies}
    assert {"psycopg[binary]", "psycopg-pool", "ast-grep-cli", "uvicorn"} <= names
