"""A user's scripted profile that does not say `exhausted` fails once its turns run out."""

from __future__ import annotations

import pytest

from openflow.settings import parse_settings
from tests.workflows.conftest import Harness, make_workflow, node


def test_a_user_profile_owns_exhausted_the_built_in_one_echoes() -> None:
    assert parse_settings({}).providers["scripted"].exhausted == "echo"
    own = parse_settings({"providers": {"scripted": {"kind": "scripted", "script": {}}}})
    assert own.providers["scripted"].exhausted is None
    said = parse_settings({"providers": {"scripted": {"script": {}, "exhausted": "echo"}}})
    assert said.providers["scripted"].exhausted == "echo"


@pytest.mark.asyncio(loop_scope="session")
async def test_a_run_whose_script_runs_out_fails_the_node_saying_so(harness: Harness) -> None:
    harness.script({"solo": [{"message": "Thinking it over."}]}, exhausted=None)
    run_id = await harness.start(make_workflow([node("solo")], []))
    state = await harness.wait_for(
        run_id, lambda s: "scripted model exhausted" in str(s.last_error or "")
    )
    assert state.status_by_node["solo"] == "failed"
    assert "solo" not in state.outputs
    await harness.handle(run_id).cancel()
