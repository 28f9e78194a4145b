"""The `write_handoff` activity: store a node's handoff (spec 7) and describe it.

A model turn that submits stores the handoff itself (`model_turn`); this activity stores it
when the turn did not (runs recorded before, or a submission the turn could not store).
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.run_files import RunFiles
from openflow.engine.handoff import HANDOFF_LIMIT, HandoffFile, handoff_file, handoff_segment


class WriteHandoffActivity:
    """Writes handoffs into the run store."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files

    @activity.defn(name=c.ACTIVITY_HANDOFF)
    async def write_handoff(self, inp: c.HandoffInput) -> c.HandoffResult:
        return await heartbeating(self._write(inp))

    async def _write(self, inp: c.HandoffInput) -> c.HandoffResult:
        file = handoff_file(inp.node_id, inp.format, inp.output)
        if not isinstance(file, HandoffFile):
            return c.HandoffResult(error=file)
        await asyncio.to_thread(store_handoff, self.files, inp.run_id, file)
        return c.HandoffResult(manifest=file.manifest)


def store_handoff(files: RunFiles, run_id: str, file: HandoffFile) -> None:
    """Write a handoff file; writing it again with the same bytes changes nothing. The
    worker keeps its bytes for the calls whose input is made of it (`RunFiles.stored_bytes`)."""
    files.store.put_bytes(run_id, file.key, file.data)
    files.keep_written(run_id, file.key, file.data)


__all__ = ["HANDOFF_LIMIT", "WriteHandoffActivity", "handoff_segment", "store_handoff"]
