"""The `write_handoff` activity: store a node's handoff (spec 7) and describe it."""

from __future__ import annotations

import asyncio
import hashlib
import json
from urllib.parse import quote

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.run_files import RunFiles

HANDOFF_LIMIT = 1024 * 1024


def handoff_segment(node_id: str) -> str:
    """A node id as one safe path segment (spec 7)."""
    return quote(node_id, safe="-_.")


class WriteHandoffActivity:
    """Writes handoffs into the run store."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files

    @activity.defn(name=c.ACTIVITY_HANDOFF)
    async def write_handoff(self, inp: c.HandoffInput) -> c.HandoffResult:
        return await heartbeating(self._write(inp))

    async def _write(self, inp: c.HandoffInput) -> c.HandoffResult:
        segment = handoff_segment(inp.node_id)
        if inp.format == "markdown":
            markdown = inp.output.get("markdown") if isinstance(inp.output, dict) else None
            if not isinstance(markdown, str):
                return c.HandoffResult(error="the Markdown handoff has no `markdown` text")
            data = markdown.encode()
            name, media = "HANDOFF.md", "text/markdown"
        else:
            data = (json.dumps(inp.output, indent=2, ensure_ascii=False) + "\n").encode()
            name, media = "HANDOFF.json", "application/json"
        if len(data) > HANDOFF_LIMIT:
            return c.HandoffResult(error=f"the handoff is {len(data)} bytes; the limit is 1 MiB")
        key = f"handoffs/{segment}/{name}"
        await asyncio.to_thread(self.files.store.put_bytes, inp.run_id, key, data)
        return c.HandoffResult(
            manifest={
                "format": inp.format,
                "uri": f"run://{key}",
                "mediaType": media,
                "sha256": hashlib.sha256(data).hexdigest(),
                "sizeBytes": len(data),
            }
        )


__all__ = ["HANDOFF_LIMIT", "WriteHandoffActivity", "handoff_segment"]
