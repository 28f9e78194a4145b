"""Recorded histories must keep replaying: a change that breaks them would break live runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from openflow.worker import sandbox_runner
from openflow.workflows.run import OpenFlowRun

GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.json"))


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
async def test_golden_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(
        workflows=[OpenFlowRun],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    await replayer.replay_workflow(history)


def test_golden_histories_are_recorded() -> None:
    assert len(GOLDEN) >= 2, "record them with `python -m tests.workflows.golden.record`"
