"""A worker's pools and cache come from its flags or OPENFLOW_* variables; bad sizes stop it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openflow.pools import WorkerPools
from openflow.server import free_port
from openflow.settings import SettingsError
from tests.cli.conftest import assert_one_line_error, openflow


@pytest.mark.asyncio(loop_scope="session")
async def test_a_worker_with_a_size_that_makes_no_sense_refuses_to_start(tmp_path: Path) -> None:
    # Nothing listens there: a worker that got past its sizes would say it cannot reach Temporal.
    nowhere = {
        "OPENFLOW_HOME": str(tmp_path),
        "OPENFLOW_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    cases = [
        (nowhere, ["--model-pool", "0"], "--model-pool '0'"),
        (nowhere, ["--tool-pool", "-2"], "--tool-pool '-2'"),
        (nowhere, ["--workflow-cache", "many"], "--workflow-cache 'many'"),
        (nowhere, ["--sticky-timeout", "0"], "--sticky-timeout '0'"),
        (nowhere, ["--workflow-pollers", "1"], "--workflow-pollers '1'"),
        ({**nowhere, "OPENFLOW_MODEL_POOL": "0"}, [], "OPENFLOW_MODEL_POOL='0'"),
        ({**nowhere, "OPENFLOW_TOOL_POOL": "-1"}, [], "OPENFLOW_TOOL_POOL='-1'"),
        ({**nowhere, "OPENFLOW_STICKY_TIMEOUT": "-5"}, [], "OPENFLOW_STICKY_TIMEOUT='-5'"),
        ({**nowhere, "OPENFLOW_WORKFLOW_POLLERS": "500"}, [], "OPENFLOW_WORKFLOW_POLLERS='500'"),
    ]
    results = await asyncio.gather(*(openflow(env, "worker", *args) for env, args, _ in cases))
    for (_, _, expected), result in zip(cases, results, strict=True):
        assert_one_line_error(result, expected, "give")


def test_pools_made_in_code_are_checked_too() -> None:
    assert WorkerPools().model >= 256
    with pytest.raises(SettingsError, match="tool pool 0"):
        WorkerPools(tool=0)
    with pytest.raises(SettingsError, match="sticky timeout"):
        WorkerPools(sticky_timeout_s=float("nan"))
    with pytest.raises(SettingsError, match="workflow pollers 1"):
        WorkerPools(workflow_pollers=1)
