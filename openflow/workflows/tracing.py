"""The spans of a run, its nodes and its pauses, made from the run's events in workflow code.

Spans come from the contrib's replay-safe tracer provider: ids are drawn from the workflow's own
seeded random, and a span is ended only when the workflow is not replaying, so a worker that
restarts and replays neither repeats spans nor loses open ones. Start and end times are the
events' workflow times. Spans produce no commands: tracing on or off, histories replay alike.

Each execution has its own run span; continuing as new ends the open spans (marked
`openflow.continued`), and the next execution starts its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    from openflow import telemetry
    from openflow.engine.events import (
        NodeAwaitingInput,
        NodeCompleted,
        NodeErrored,
        NodeFailed,
        NodeInterrupted,
        NodeStarted,
        RunEvent,
        ToolApprovalRequested,
        ToolApproved,
        ToolDenied,
    )

__all__ = ["RunSpans"]

_ENDS_NODE = (NodeCompleted, NodeFailed, NodeErrored, NodeInterrupted)
_ENDS_PAUSE = (NodeStarted, ToolApproved, ToolDenied, NodeCompleted, NodeFailed)


_PAUSED = {
    "awaiting_input": "input",
    "awaiting_tool_approval": "approval",
    "failed": "retry",
    "interrupted": "retry",
}


def _ns(at_ms: int) -> int:
    return at_ms * 1_000_000


class RunSpans:
    """Open spans by node; `observe` folds new events into them."""

    def __init__(self) -> None:
        self._on = telemetry.enabled()
        self._run: Any = None
        self._nodes: dict[str, Any] = {}
        self._pauses: dict[str, tuple[Any, str, int]] = {}

    def _tracer(self) -> Any:
        return trace.get_tracer(telemetry.TRACER_NAME)

    def start(self, run_id: str, workflow_id: str, at_ms: int, continued: bool) -> None:
        if not self._on:
            return
        self._run = self._tracer().start_span(
            f"openflow.run {workflow_id}",
            start_time=_ns(at_ms),
            attributes={
                "openflow.run_id": run_id,
                "openflow.workflow_id": workflow_id,
                "openflow.continued_from_previous": continued,
            },
        )

    def carry_on(self, status_by_node: dict[str, str], at_ms: int) -> None:
        """In an execution continued from another, open again the spans of the nodes that were
        busy or waiting when it continued (their earlier spans ended with `openflow.continued`)."""
        if not self._on:
            return
        for node_id, status in sorted(status_by_node.items()):
            if status in ("queued", "started", "running_tool"):
                self._nodes[node_id] = self._child(
                    f"openflow.node {node_id}",
                    at_ms,
                    {"openflow.node_id": node_id, "openflow.continued_from_previous": True},
                )
            kind = _PAUSED.get(status)
            if kind is not None:
                self._start_pause(node_id, kind, at_ms)

    def _child(self, name: str, at_ms: int, attributes: dict[str, Any]) -> Any:
        context = trace.set_span_in_context(self._run) if self._run is not None else None
        return self._tracer().start_span(
            name, context=context, start_time=_ns(at_ms), attributes=attributes
        )

    def observe(self, events: Sequence[RunEvent]) -> None:
        if not self._on:
            return
        try:
            for event in events:
                self._on_event(event)
        except Exception:  # telemetry never fails a run
            workflow.logger.debug("span bookkeeping failed", exc_info=True)

    def _on_event(self, event: RunEvent) -> None:
        node_id = getattr(event, "node_id", None)
        if isinstance(event, ToolApprovalRequested):
            node_id = event.request.node_id
        if node_id is not None and isinstance(event, ToolApproved | ToolDenied):
            self._record_decision(event)
        if node_id is not None and isinstance(event, _ENDS_PAUSE):
            self._end_pause(node_id, event.at_ms)
        if isinstance(event, NodeStarted) and event.node_id not in self._nodes:
            self._nodes[event.node_id] = self._child(
                f"openflow.node {event.node_id}",
                event.at_ms,
                {"openflow.node_id": event.node_id, "openflow.node_label": event.label},
            )
        elif isinstance(event, _ENDS_NODE):
            outcome = {
                NodeCompleted: "completed",
                NodeFailed: "failed",
                NodeErrored: "errored",
                NodeInterrupted: "interrupted",
            }[type(event)]
            self._end_node(event.node_id, event.at_ms, outcome)
            if isinstance(event, NodeErrored | NodeInterrupted):
                self._start_pause(event.node_id, "retry", event.at_ms)
        elif isinstance(event, NodeAwaitingInput):
            self._start_pause(event.node_id, "input", event.at_ms)
        elif isinstance(event, ToolApprovalRequested):
            self._start_pause(event.request.node_id, "approval", event.at_ms)

    def _record_decision(self, event: ToolApproved | ToolDenied) -> None:
        """One span event per decided call, on the pause it ends (or the node's span): the
        decision, who made it, whether it was edited, the grant that made it."""
        pause = self._pauses.get(event.node_id)
        span = pause[0] if pause is not None else self._nodes.get(event.node_id)
        if span is None:
            return
        attributes: dict[str, Any] = {
            "openflow.tool_call_id": event.tool_call_id,
            "openflow.tool_name": event.tool_name,
            "openflow.decision": "allow" if isinstance(event, ToolApproved) else "deny",
        }
        if event.by is not None:
            attributes["openflow.decided_by"] = event.by
        if isinstance(event, ToolApproved):
            attributes["openflow.edited"] = event.arguments is not None
            if event.grant is not None:
                attributes["openflow.grant"] = event.grant
        span.add_event("openflow.tool.decision", attributes, timestamp=_ns(event.at_ms))

    def _start_pause(self, node_id: str, kind: str, at_ms: int) -> None:
        if node_id in self._pauses:
            return
        span = self._child(
            f"openflow.pause {kind} {node_id}",
            at_ms,
            {"openflow.node_id": node_id, "openflow.pause.kind": kind},
        )
        self._pauses[node_id] = (span, kind, at_ms)

    def _end_pause(self, node_id: str, at_ms: int, continued: bool = False) -> None:
        found = self._pauses.pop(node_id, None)
        if found is None:
            return
        span, kind, started = found
        waited = max(0, at_ms - started)
        span.set_attribute("openflow.pause.wait_ms", waited)
        if continued:
            span.set_attribute("openflow.continued", True)
        span.end(end_time=_ns(at_ms))
        _record_wait(kind, waited)  # a wait split by continue-as-new is recorded in parts

    def _end_node(self, node_id: str, at_ms: int, outcome: str, continued: bool = False) -> None:
        span = self._nodes.pop(node_id, None)
        if span is None:
            return
        span.set_attribute("openflow.node.outcome", outcome)
        if continued:
            span.set_attribute("openflow.continued", True)
        if outcome in ("failed", "errored"):
            span.set_status(Status(StatusCode.ERROR, f"node {outcome}"))
        span.end(end_time=_ns(at_ms))

    def end(self, status: str, at_ms: int) -> None:
        """End every open span: the run finished (`status`) or continues as new."""
        if not self._on:
            return
        continued = status == "continued"
        for node_id in sorted(self._pauses):
            self._end_pause(node_id, at_ms, continued=continued)
        for node_id in sorted(self._nodes):
            self._end_node(node_id, at_ms, status, continued=continued)
        if self._run is not None:
            self._run.set_attribute("openflow.status", status)
            if status == "failed":
                self._run.set_status(Status(StatusCode.ERROR, "run failed"))
            self._run.end(end_time=_ns(at_ms))
            self._run = None

    @contextmanager
    def within(self, node_id: str) -> Iterator[None]:
        """Make the node's span (else the run's) current, so an activity started here is its
        child."""
        span = self._nodes.get(node_id) or self._run
        if not self._on or span is None:
            yield
            return
        with trace.use_span(span, end_on_exit=False):
            yield


def _record_wait(kind: str, waited_ms: int) -> None:
    try:
        histogram = workflow.metric_meter().create_histogram(
            "openflow_pause_wait_ms", "time nodes waited on people, by pause kind", "ms"
        )
        histogram.record(waited_ms, {"kind": kind})
    except Exception:  # metrics never fail a run
        workflow.logger.debug("pause wait not recorded", exc_info=True)
