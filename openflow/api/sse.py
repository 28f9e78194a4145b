"""A run's events as Server-Sent Events: durable events with their `seq` as id, live deltas between.

Durable events come from polling the run's `events` query, so a follower that reconnects with
`Last-Event-ID: N` gets exactly the events after N. Live token deltas and streaming tool output
come from the live channel as `event: delta` messages without an id, so they never move the
resumption point; each carries its `live_seq`, which a follower may pass back as `live_after`
to skip the deltas it has seen. New events are sent only when no workflow task of the run is
in flight or being retried (a query can answer from a task whose worker died while reporting
it), so a stream resumed anywhere continues the sequence history holds. While Temporal does not answer (the run's worker died and another has not
taken it over yet), the stream waits with keep-alives rather than ending. Comments keep idle
connections open; the stream ends after the run's final event (Finished, NodeFailed, Aborted or
a fatal Error), or when the run's execution has closed and every event was sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Protocol

from sse_starlette import EventSourceResponse, ServerSentEvent
from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from openflow.api.errors import as_http_error, error_body
from openflow.client import event_json, events_after, parse_events
from openflow.engine import RunEvent
from openflow.engine.events import Error

logger = logging.getLogger(__name__)

MEDIA_TYPE = "text/event-stream"
SEPARATOR = "\n"
RECONNECT_MS = 2000
QUERY_TIMEOUT = timedelta(seconds=10)
CLOSED_CHECK_SECONDS = 1.0
_FINAL_TYPES = frozenset({"Finished", "NodeFailed", "Aborted"})
_TRANSIENT = frozenset(
    {
        RPCStatusCode.CANCELLED,  # the client's own rpc_timeout ("Timeout expired")
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)


class LiveSource(Protocol):
    """Where live deltas come from (`openflow.live.FileLiveChannel` by default)."""

    def subscribe(self, run_id: str, after: int = 0) -> AsyncIterator[dict[str, Any]]: ...


def wants_stream(accept: str | None) -> bool:
    """Whether an Accept header asks for Server-Sent Events."""
    return bool(accept) and MEDIA_TYPE in (accept or "").lower()


def is_final(event: RunEvent) -> bool:
    """Whether a durable event ends the run."""
    if event.type in _FINAL_TYPES:
        return True
    return isinstance(event, Error) and not event.message.startswith("ignored ")


def public_event(event: RunEvent) -> dict[str, Any]:
    """An event as the API shows it: the RunEvent model's JSON."""
    return event_json(event, by_alias=True)


def frame(
    data: dict[str, Any], *, event_id: int | None = None, event: str | None = None
) -> ServerSentEvent:
    """One SSE message: compact JSON data, `\\n` line ends (what the run page splits on)."""
    return ServerSentEvent(
        json.dumps(data, ensure_ascii=False, separators=(",", ":")),
        id=None if event_id is None else str(event_id),
        event=event,
        sep=SEPARATOR,
    )


def _comment(text: str) -> ServerSentEvent:
    return ServerSentEvent(comment=text, sep=SEPARATOR)


async def _query_events(
    client: Client, handle: WorkflowHandle[Any, Any], after: int
) -> list[RunEvent]:
    return parse_events(await events_after(client, handle, after, rpc_timeout=QUERY_TIMEOUT))


async def _in_history(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether what a query just answered is in the run's history: no workflow task is in flight
    or being run again.

    A query can be answered from a workflow task whose completion never reached the server (its
    worker was killed while sending it); that task times out and runs again, on another worker,
    possibly with other events under the same seqs. Events are sent once no task is started and
    none is being retried. (A worker killed at the very moment it reports a task can still let an
    event go out with an earlier `at_ms` than history's; its seq and content are the same.)
    """
    desc = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    raw = desc.raw_description
    if not raw.HasField("pending_workflow_task"):
        return True
    task = raw.pending_workflow_task
    return task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED and (
        task.attempt <= 1
    )


async def _is_closed(handle: WorkflowHandle[Any, Any]) -> bool:
    desc = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    return desc.status != WorkflowExecutionStatus.RUNNING


class _Follower:
    """One follower's view of one run: a queue both producers feed and the response drains."""

    def __init__(
        self,
        client: Client,
        handle: WorkflowHandle[Any, Any],
        run_id: str,
        after: int,
        live: LiveSource | None,
        live_after: int,
        poll_interval: float,
    ) -> None:
        self.client = client
        self.handle = handle
        self.run_id = run_id
        self.last = after
        self.live = live
        self.live_after = live_after
        self.poll_interval = poll_interval
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=1024)

    async def durable(self) -> None:
        try:
            await self._poll()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a stream cannot answer with a status any more; it says why
            mapped = as_http_error(exc)
            if mapped is None:
                logger.error("event stream of %s broke off", self.run_id, exc_info=exc)
                body = error_body("internal_error", "the event stream broke off; reconnect")
            else:
                body = error_body(mapped.code, mapped.message)
            await self.queue.put(("error", body))

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        next_check = loop.time()
        while True:
            try:
                batch = await _query_events(self.client, self.handle, self.last)
                fresh = any(e.seq > self.last for e in batch)
                if fresh and not await _in_history(self.handle):
                    await asyncio.sleep(self.poll_interval)
                    continue
                if await self._emit(batch):
                    return
                if not batch and loop.time() >= next_check:
                    next_check = loop.time() + CLOSED_CHECK_SECONDS
                    if await _is_closed(self.handle):
                        with contextlib.suppress(Exception):
                            await self._emit(
                                await _query_events(self.client, self.handle, self.last)
                            )
                        await self.queue.put(("end", None))
                        return
            except RPCError as exc:
                # A run whose worker died answers once another worker took it over; the
                # follower waits (keep-alives go on) instead of ending the stream.
                if exc.status not in _TRANSIENT:
                    raise
                logger.info("event stream of %s: Temporal did not answer (%s)", self.run_id, exc)
            await asyncio.sleep(self.poll_interval)

    async def _emit(self, batch: list[RunEvent]) -> bool:
        """Queue new events; True once the run's final event went out."""
        fresh = [e for e in batch if e.seq > self.last]
        for event in fresh:
            self.last = event.seq
            await self.queue.put(("event", event))
        if fresh and is_final(fresh[-1]):
            await self.queue.put(("end", None))
            return True
        return False

    async def deltas(self) -> None:
        if self.live is None:
            return
        try:
            async for delta in self.live.subscribe(self.run_id, self.live_after):
                await self.queue.put(("delta", delta))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # live deltas are a courtesy: the durable stream goes on
            logger.warning("live deltas of %s stopped: %s", self.run_id, exc)


async def event_stream(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    run_id: str,
    *,
    after: int,
    live: LiveSource | None,
    live_after: int = 0,
    poll_interval: float,
    keepalive_interval: float,
) -> AsyncIterator[ServerSentEvent]:
    """The SSE messages of one run from `after` on, until the run ends or the follower leaves."""
    follower = _Follower(client, handle, run_id, after, live, live_after, poll_interval)
    tasks = [
        asyncio.create_task(follower.durable(), name=f"sse-events-{run_id}"),
        asyncio.create_task(follower.deltas(), name=f"sse-live-{run_id}"),
    ]
    try:
        yield ServerSentEvent(retry=RECONNECT_MS, sep=SEPARATOR)
        while True:
            try:
                kind, payload = await asyncio.wait_for(follower.queue.get(), keepalive_interval)
            except TimeoutError:
                yield _comment("keep-alive")
                continue
            if kind == "event":
                yield frame(public_event(payload), event_id=payload.seq)
            elif kind == "delta":
                yield frame(payload, event="delta")
            elif kind == "error":
                yield frame(payload, event="error")
                return
            else:
                yield _comment("end of run")
                return
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def stream_response(messages: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    """The HTTP response of a stream: keep-alives come from `event_stream` when it is idle."""
    return EventSourceResponse(
        messages,
        headers={"Cache-Control": "no-cache"},
        ping=0,
        sep=SEPARATOR,
    )


__all__ = [
    "MEDIA_TYPE",
    "LiveSource",
    "event_stream",
    "frame",
    "is_final",
    "public_event",
    "stream_response",
    "wants_stream",
]
