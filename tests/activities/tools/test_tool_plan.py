"""The plan seal tool: run://PLAN.md becomes an immutable artifact, once."""

from __future__ import annotations

import hashlib

from tests.activities.tools.conftest import Harness

SEAL = "openflow_write_plan_artifact"


async def test_seal_turns_the_draft_into_an_artifact_once(harness: Harness) -> None:
    wrote = await harness.one("write", {"path": "run://PLAN.md", "content": "# Plan\n\n- one\n"})
    assert not wrote.is_error, wrote.content
    sealed = await harness.one(SEAL, {})
    assert not sealed.is_error, sealed.content
    artifact_id = sealed.artifact_ids[0]
    digest = hashlib.sha256(b"# Plan\n\n- one\n").hexdigest()
    size = len(b"# Plan\n\n- one\n")
    assert sealed.content == f"artifact:{artifact_id}\nsha256:{digest}\nbytes:{size}"
    stored = harness.run_dir / "artifacts" / f"{artifact_id}-plan.md"
    assert stored.read_text() == "# Plan\n\n- one\n"
    assert [e["artifact_id"] for e in harness.of_type("ToolArtifactCreated")] == [artifact_id]

    again = await harness.one(SEAL, {})
    assert again.content == sealed.content, "a repeated seal returns the same artifact"
    edit = await harness.one("write", {"path": "run://PLAN.md", "content": "changed"})
    assert edit.is_error and edit.content.startswith("[permission_denied]")
    read = await harness.one("read", {"path": f"artifact:{artifact_id}"})
    assert "- one" in read.content


async def test_sealing_without_a_draft_is_not_found(harness: Harness) -> None:
    result = await harness.one(SEAL, {})
    assert result.is_error
    assert result.content.startswith("[not_found] run://PLAN.md")


async def test_an_empty_draft_cannot_be_sealed(harness: Harness) -> None:
    await harness.one("write", {"path": "run://PLAN.md", "content": "  \n"})
    result = await harness.one(SEAL, {})
    assert result.is_error and "empty" in result.content
