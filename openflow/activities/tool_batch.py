"""The `tool_batch` activity: run one batch of tool calls and store its full results."""

from __future__ import annotations

import asyncio

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.tools_runner import ITEMS, BatchDeps, run_tools


class ToolBatchActivity:
    """Tool batches on this worker, with the dependencies every batch shares."""

    def __init__(self, deps: BatchDeps) -> None:
        self.deps = deps

    @activity.defn(name=c.ACTIVITY_TOOL_BATCH)
    async def tool_batch(self, inp: c.ToolBatchInput) -> c.ToolBatchResult:
        if not inp.run_id:
            inp = inp.model_copy(update={"run_id": activity.info().workflow_id})
        return await heartbeating(self._run(inp))

    async def _run(self, inp: c.ToolBatchInput) -> c.ToolBatchResult:
        """Run one batch, store its full results and return what history keeps.

        A side-effecting batch then stores its receipt, what it is about to report, so a run
        whose completion gets lost (a server restart, a network cut, this worker killed now)
        settles it with these results instead of as outcome unknown (`read_receipt`).
        """
        files = self.deps.files
        result, full = await run_tools(self.deps, inp)
        # Synced: this is the only full copy of the tools' output (history keeps previews).
        data = ITEMS.dump_json(full)
        key = c.batch_key(inp.batch_id)
        await heartbeating(asyncio.to_thread(files.store.put_bytes, inp.run_id, key, data))
        if inp.side_effects:
            await asyncio.to_thread(
                files.store.put_bytes,
                inp.run_id,
                c.receipt_key(inp.batch_id),
                result.model_dump_json().encode(),
            )
        # The next turn of the node usually runs here and refers to these results: keep them.
        files.keep_batch(inp.run_id, key, data)
        return result


__all__ = ["ToolBatchActivity"]
