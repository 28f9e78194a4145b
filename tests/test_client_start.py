"""Starting many runs of one workflow checks it once, and never lets a changed one through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from openflow import contracts as c
from openflow.activities.store import FileRunStore
from openflow.client import InvalidWorkflow, Runs
from openflow.engine.spec import Workflow


def _workflow(edges: list[dict[str, Any]]) -> Workflow:
    node = {
        "id": "only",
        "label": "only",
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": {
            "system_prompt": "s",
            "task_prompt": "t",
            "model": "m",
            "output_schema": {"type": "object", "properties": {"summary": {"type": "string"}}},
        },
    }
    return Workflow.model_validate({"id": "wf", "name": "wf", "nodes": [node], "edges": edges})


@pytest.mark.asyncio(loop_scope="session")
async def test_runs_of_one_workflow_store_it_and_a_broken_one_is_always_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = FileRunStore(tmp_path / "runs")
    runs = Runs(client, task_queue, store=store)
    workflow = _workflow([])
    started = [await runs.start(workflow, entrypoint="go") for _ in range(2)]
    data = workflow.model_dump_json().encode()
    for run_id in started:
        assert store.get_bytes(run_id, c.workflow_key(c.workflow_digest(data))) == data

    # The same workflow object, changed after its runs started: checked again, every time.
    workflow.edges.append(_workflow([{"id": "e", "from": "only", "to": "gone"}]).edges[0])
    for _ in range(2):
        with pytest.raises(InvalidWorkflow, match="gone"):
            await runs.start(workflow, entrypoint="go")
    for run_id in started:
        await client.get_workflow_handle(run_id).terminate("test over")
