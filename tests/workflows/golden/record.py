"""Record the golden histories replayed by test_golden_replay.py:
`python -m tests.workflows.golden.record [name ...]` (all of them without names).

Re-record only when a change is meant to be incompatible with runs already in flight (and then
ship it under a new workflow name or behind `workflow.patched`). Histories recorded by earlier
versions are kept on purpose: they show that runs those versions started still replay.
`signal_without_text.json` is one: recorded before signals checked their fields, it answers a
question with `submit_user_input {"node_id": "ask"}`, which that version applied with an empty
text (today such a signal is ignored, behind `workflow.patched`); this script cannot record it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from openflow.server import EmbeddedServer, free_port
from openflow.testing import LocalRuns, drive, write_scripted_settings
from tests.workflows.conftest import make_workflow, node

HERE = Path(__file__).resolve().parent


async def record(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        server = EmbeddedServer(home, address=f"127.0.0.1:{free_port()}", ui_port=free_port())
        async with server:
            from temporalio.contrib.pydantic import pydantic_data_converter

            client = await server.connect(data_converter=pydantic_data_converter)
            async with LocalRuns(client=client, home=home) as local:
                write_scripted_settings(
                    home,
                    {
                        "idea": [{"submit": {"summary": "idea"}}],
                        "plan": [
                            {
                                "tools": [
                                    {"name": "write", "args": {"path": "p.md", "content": "# p"}}
                                ]
                            },
                            {"submit": {"summary": "plan"}},
                        ],
                        "risk": [{"error": "transient", "message": "busy"}, {"ask": "how risky?"}],
                    },
                )
                wf = make_workflow(
                    [node("idea"), node("plan"), node("risk", requestUserInput=True), node("join")],
                    [("idea", "plan"), ("idea", "risk"), ("plan", "join"), ("risk", "join")],
                    retry_policy={"max_attempts": 3, "backoff_ms": 10},
                )
                if not names or "branch_join_people" in names:
                    result = await local.run(
                        wf, inputs=[("risk", "low")], approvals=[("", True)], script=None
                    )
                    assert result.status == "completed", result.status
                    history = await client.get_workflow_handle(result.run_id).fetch_history()
                    (HERE / "branch_join_people.json").write_text(history.to_json())
                if not names or "reads_and_review" in names:
                    await _reads_and_review(client, home, local)
                if not names or "handoff_in_turn" in names:
                    await _handoff_in_turn(client, home, local)
                if not names or "prepare_local" in names:
                    await _prepare_local(client, home, local)

                if names and "stopped_mid_tool" not in names:
                    return
                write_scripted_settings(
                    home,
                    {"slow": [{"tools": [{"name": "bash", "args": {"command": "sleep 20"}}]}]},
                )
                wf = make_workflow([node("slow", tools={"approvalMode": "yolo"})], [])
                run_id = await local.runs.start(wf, entrypoint="stop me")
                handle = client.get_workflow_handle(run_id)
                for _ in range(400):
                    state = await local.runs.state(run_id)
                    if state.status_by_node["slow"] == "running_tool":
                        break
                    await asyncio.sleep(0.05)
                await handle.cancel()
                await handle.result()
                history = await handle.fetch_history()
                (HERE / "stopped_mid_tool.json").write_text(history.to_json())


async def _reads_and_review(client: object, home: Path, local: LocalRuns) -> None:
    """A node whose reads run inside its model turns, then the post-run review."""
    write_scripted_settings(
        home,
        {
            "look": [
                {"tools": [{"name": "write", "args": {"path": "n.txt", "content": "hi"}}]},
                {
                    "tools": [
                        {"name": "read", "args": {"path": "n.txt"}},
                        {"name": "ls", "args": {"path": "."}},
                    ]
                },
                {"submit": {"summary": "looked"}},
            ],
            "__post_run_review": [
                {
                    "submit": {
                        "suggestions": [
                            {
                                "category": "tools",
                                "targetNodeId": "look",
                                "title": "Read once",
                                "evidence": "look listed the folder after reading its file",
                                "recommendation": "List first, then read what you need.",
                            }
                        ]
                    }
                }
            ],
        },
    )
    wf = make_workflow([node("look", tools={"approvalMode": "yolo"})], [])
    result = await local.run(wf, script=None)
    assert result.status == "completed", result.status
    assert result.report is not None and result.report.suggestions, result.report
    history = await client.get_workflow_handle(result.run_id).fetch_history()  # type: ignore[attr-defined]
    (HERE / "reads_and_review.json").write_text(history.to_json())


async def _handoff_in_turn(client: object, home: Path, local: LocalRuns) -> None:
    """Handoffs stored by the turns that submit them (JSON, then Markdown); a malformed
    submission repaired, its handoff written by `write_handoff`."""
    fixed = {"output": {"summary": "fixed"}, "assistant_message": "fixed"}
    write_scripted_settings(
        home,
        {
            "first": [{"submit": {"summary": "first"}}],
            "brief": [{"submit": {"markdown": "# Handoff\n\n## Summary\nok\n"}, "say": "ok"}],
            "last": [{"submit": {"wrong": 1}}],
            "last__output_repair": [{"submit": {"repaired_arguments": fixed}}],
        },
    )
    template = "# Handoff\n\n## Summary\n"
    wf = make_workflow(
        [
            node("first"),
            node("brief", handoff={"format": "markdown", "template": template}),
            node("last"),
        ],
        [("first", "brief"), ("brief", "last")],
        outputRepairModel="repair-model",
    )
    result = await local.run(wf, script=None)
    assert result.status == "completed", result.status
    history = await client.get_workflow_handle(result.run_id).fetch_history()  # type: ignore[attr-defined]
    (HERE / "handoff_in_turn.json").write_text(history.to_json())


async def _prepare_local(client: Any, home: Path, local: LocalRuns) -> None:
    """A start prepared in local activities: asked again with the workflow (this client's
    store is not the worker's), its project folder missing on the worker until the start has
    moved on to an activity of its own; then a node asking and one after it."""
    write_scripted_settings(
        home,
        {"ask": [{"ask": "Which one?"}, {"submit": {"summary": "that one"}}]},
        exhausted="echo",
    )
    project = home / "mounted-later"
    wf = make_workflow([node("ask", requestUserInput=True), node("next")], [("ask", "next")])
    run_id = await local.runs.start(wf, entrypoint="go", project_dir=str(project))
    handle = client.get_workflow_handle(run_id)
    for _ in range(600):
        history = await handle.fetch_history()
        if any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events):
            break
        await asyncio.sleep(0.05)
    project.mkdir()
    result = await drive(local.runs, run_id, [("ask", "this")], [])
    assert result.status == "completed", result.status
    history = await handle.fetch_history()
    (HERE / "prepare_local.json").write_text(history.to_json())


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:]))
