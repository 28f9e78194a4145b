"""The `read_receipt` activity: what a side-effecting batch whose completion was lost reported."""

from __future__ import annotations

import asyncio

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.run_files import RunFiles


class ReadReceiptActivity:
    """Reads receipts from the run store; reads only."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files

    @activity.defn(name=c.ACTIVITY_RECEIPT)
    async def read_receipt(self, inp: c.ReceiptInput) -> c.ReceiptResult:
        """The receipt a lost batch left, if any."""
        run_id = inp.run_id or activity.info().workflow_id or ""
        store = self.files.store
        try:
            data = await heartbeating(
                asyncio.to_thread(store.get_bytes, run_id, c.receipt_key(inp.batch_id))
            )
        except FileNotFoundError:
            return c.ReceiptResult()
        return c.ReceiptResult(result=c.ToolBatchResult.model_validate_json(data))


__all__ = ["ReadReceiptActivity"]
