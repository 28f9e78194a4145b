"""The corpus of captured histories replays under the sandbox: a change that breaks
determinism for a run in flight fails here, not for a user.

Capture it again with `python -m tests.workflows.corpus.capture [NAME ...]`.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from tests.workflows.conftest import history_replayer

#: Runs recorded before the patch epoch, and under its epochs (`corpus/epoch-1/`, ...).
CORPUS = sorted((Path(__file__).parent / "corpus").rglob("*.json.gz"))


@pytest.mark.asyncio(loop_scope="session")
async def test_every_captured_history_replays() -> None:
    replayer = history_replayer()
    failed = []
    for path in CORPUS:
        data = gzip.decompress(path.read_bytes()).decode()
        history = WorkflowHistory.from_json(path.name, data)
        # A run's children are named after its workflow id, which newer servers record.
        started = history.events[0].workflow_execution_started_event_attributes
        if started.workflow_id:
            history = WorkflowHistory(started.workflow_id, history.events)
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failed.append(f"{path.name}: {result.replay_failure}")
    assert not failed, "\n".join(failed)


def test_the_corpus_is_varied_and_small() -> None:
    scenarios = {path.name.split(".")[0] for path in CORPUS}
    assert len(CORPUS) >= 30 and len(scenarios) >= 30, "capture it: see corpus/capture.py"
    assert sum(path.stat().st_size for path in CORPUS) < 3 * 1024 * 1024
