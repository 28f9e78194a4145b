"""The plan seal tool `openflow_write_plan_artifact` (spec 11): freeze run://PLAN.md into an artifact."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any, ClassVar

from openflow.activities.tools.base import (
    FILE_MUTATION_KEY,
    InvalidArgs,
    NotFound,
    ThreadTool,
    ToolContext,
    ToolOutput,
)
from openflow.activities.tools.fs import PLAN_URI, plan_path
from openflow.engine.policy import SEAL_TOOL

PLAN_LIMIT = 256 * 1024
SEALED_MARKER = "PLAN.sealed.json"


def sealed_artifact(ctx: ToolContext) -> dict[str, Any] | None:
    """The sealed plan's record, once the draft has been sealed."""
    marker = ctx.artifacts_dir / SEALED_MARKER
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class SealPlanTool(ThreadTool):
    """Seal the plan draft: rename it to an immutable artifact and report its hash."""

    name: ClassVar[str] = SEAL_TOOL
    description: ClassVar[str] = (
        "Seal the plan draft run://PLAN.md into an immutable artifact (a person approves this "
        "first). Returns the artifact id, its sha256 and size; after sealing, the draft can no "
        "longer be changed."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    tier = "write"
    concurrency = "exclusive"
    mutates = True

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        return sorted([f"path:{PLAN_URI}", FILE_MUTATION_KEY])

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        done = sealed_artifact(ctx)
        if done is not None:
            return _output(done)
        draft = plan_path(ctx)
        try:
            data = draft.read_bytes()
        except FileNotFoundError:
            raise NotFound(
                PLAN_URI, "write the plan draft to run://PLAN.md before sealing it"
            ) from None
        if not data.strip():
            raise InvalidArgs(self.name, "the plan draft is empty", "write the plan first")
        if len(data) > PLAN_LIMIT:
            raise InvalidArgs(
                self.name,
                f"the plan draft is {len(data)} bytes; the limit is {PLAN_LIMIT}",
                "shorten the plan",
            )
        artifact_id = str(uuid.uuid4())
        target = ctx.artifacts_dir / f"{artifact_id}-plan.md"
        os.replace(draft, target)
        record = {
            "artifact_id": artifact_id,
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "path": str(target.relative_to(ctx.run_dir)),
        }
        marker = ctx.artifacts_dir / SEALED_MARKER
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, marker)
        ctx.emit(
            {
                "type": "ToolArtifactCreated",
                "node_id": ctx.node_id,
                "artifact_id": artifact_id,
                "tool_name": self.name,
                "path": record["path"],
                "size_bytes": len(data),
            }
        )
        return _output(record)


def _output(record: dict[str, Any]) -> ToolOutput:
    artifact_id = str(record["artifact_id"])
    return ToolOutput(
        content=f"artifact:{artifact_id}\nsha256:{record['sha256']}\nbytes:{record['bytes']}",
        artifact_ids=(artifact_id,),
    )


__all__ = ["PLAN_LIMIT", "SealPlanTool", "sealed_artifact"]
