"""Scheduling: after the facts of a step, what runs next and how the run ends.

Unlike OpenFlow, a node starts as soon as its own parents have outputs (the layer barrier of
spec 2.2 only with `strictLayers`), and pauses resolve one by one instead of as a barrier.
Queued tool batches go out first, then the subagents' next calls, then the nodes' next calls;
a run with nothing in flight and nothing to wait for completes (after the post-run review of
spec 12), pauses, or fails as stuck.
"""

from __future__ import annotations

from typing import Any

from openflow.engine import prompts, review
from openflow.engine.budget import REVIEW_SKIPPED, hold, reached
from openflow.engine.build import build_request
from openflow.engine.classify import classify_reply
from openflow.engine.conversation import (
    Seat,
    announce_attempt,
    append,
    close_open,
    report_usage,
    send,
    update_conversation,
)
from openflow.engine.events import Aborted, Finished, NodeFailed
from openflow.engine.lifecycle import abort_child
from openflow.engine.protocol import tool_started
from openflow.engine.request import ModelReply
from openflow.engine.state import (
    Awaiting,
    CallModel,
    CancelWork,
    Interrupted,
    PendingBatch,
    RunTools,
    TranscriptDelta,
)
from openflow.engine.step import Step
from openflow.engine.subagents import (
    announce_subagents,
    batch_waits,
    child_blocked,
    dispatch_child,
    runtime_batch,
    step_runtime_batch,
)
from openflow.engine.transcript import UserItem


def ready(step: Step, node_id: str) -> bool:
    nodes = step.s.nodes
    if not all(nodes[p].has_output for p in step.parents_of(node_id) if p in nodes):
        return False
    if not step.wf.settings.strict_layers:
        return True
    depths = step.depths()
    mine = depths.get(node_id)
    if mine is None:
        return False
    return all(ns.has_output for n, ns in nodes.items() if depths.get(n, mine) < mine)


def blocked(step: Step, node_id: str) -> bool:
    ns = step.s.nodes[node_id]
    conv = ns.conversation
    return (
        ns.has_output
        or ns.awaiting
        or conv.in_flight is not None
        or ns.handoff_job is not None
        or ns.interrupted
        or ns.failed is not None
        or conv.backoff_until_ms is not None
        or ns.child is not None
        or bool(step.node_batches(node_id))
    )


def dispatch_model(step: Step, node_id: str) -> None:
    """Send the node's next model call, with the messages people queued for it first."""
    seat = Seat(node_id)
    if hold(step, seat):
        return
    queued_messages = step.node(node_id).queued_messages
    if queued_messages:
        for queued in queued_messages:
            item = queued if isinstance(queued, UserItem) else UserItem(content=queued)
            append(step, seat, item)
        step.update_node(node_id, queued_messages=[])
    request = build_request(step, node_id)
    if request is None:
        return
    announce_attempt(step, seat, step.label(node_id))
    announce_subagents(step, node_id)
    step.update_node(node_id, turn_seq=step.node(node_id).turn_seq + 1)
    send(step, seat, request, "node")


def dispatch_batch(step: Step, batch: PendingBatch) -> None:
    if runtime_batch(batch):
        segment = step_runtime_batch(step, batch)
        if segment is None:
            return
        batch = segment
    batch.in_flight = True
    child = step.s.nodes[batch.node_id].child if batch.subagent_id is not None else None
    worker = batch.subagent_id or batch.node_id
    attempt = child.model_attempt if child is not None else None
    for call in batch.calls:
        step.emit(tool_started(worker, call))
    step.intents.append(
        RunTools(
            batch_id=batch.batch_id,
            node_id=worker,
            calls=tuple(batch.calls),
            side_effects=batch.side_effects,
            model_attempt=attempt or step.node(batch.node_id).model_attempt,
        )
    )


def schedule(step: Step) -> None:
    """Plan what runs next, or end the run."""
    s = step.s
    if s.finished:
        return
    if s.cancel_requested:
        if s.review_call is not None:
            # Every node is done: stopping only ends the review; the run still succeeded.
            step.intents.append(CancelWork(ids=(s.review_call,)))
            end_review(step, [], review.CANCELLED)
            complete(step)
            return
        stop(step)
        return
    if s.terminal_error is not None:
        fail_run(step)
        return
    for batch_id in sorted(s.batches):
        batch = s.batches.get(batch_id)
        if batch is None or batch.in_flight or batch.requires_approval:
            continue
        if not batch_waits(step, batch):
            dispatch_batch(step, batch)
    nodes = s.nodes
    for node_id in sorted(nodes):
        child_ready = nodes[node_id].child is not None and node_id in step.by_id
        if child_ready and not child_blocked(step, node_id):
            dispatch_child(step, node_id)
    for node_id in sorted(nodes):
        ns = nodes[node_id]
        if ns.has_output or node_id not in step.by_id:
            continue
        # Cheapest first: a node with a parent still at work cannot start.
        if not all(nodes[p].has_output for p in step.parents_of(node_id) if p in nodes):
            continue
        if not blocked(step, node_id) and ready(step, node_id):
            dispatch_model(step, node_id)
            if s.terminal_error is not None:
                fail_run(step)
                return
    if busy(step):
        s.status = "running"
        return
    if all(ns.has_output for ns in s.nodes.values()):
        if s.review_enabled and not s.review_done:
            start_review(step)
            if s.review_call is not None:
                s.status = "running"
                return
        complete(step)
        return
    if awaiting(step).any:
        s.status = "paused"
        return
    stuck = sorted(n for n, ns in s.nodes.items() if not ns.has_output)
    first = stuck[0] if stuck else ""
    step.terminal(first, f"no runnable nodes: {', '.join(stuck)} cannot start")
    fail_run(step)


def busy(step: Step) -> bool:
    return (
        step.s.review_call is not None
        or any(
            ns.conversation.in_flight is not None
            or ns.handoff_job is not None
            or ns.conversation.backoff_until_ms is not None
            # A subagent whose node its budget holds waits for a person.
            or (ns.child is not None and ns.failed is None)
            for ns in step.s.nodes.values()
        )
        or any(b.in_flight for b in step.s.batches.values())
    )


def awaiting(step: Step) -> Awaiting:
    nodes = sorted(step.s.nodes.items())
    return Awaiting(
        inputs=tuple(n for n, ns in nodes if ns.awaiting),
        approvals=tuple(sorted(b.batch_id for b in step.s.batches.values() if b.requires_approval)),
        retryables=tuple(n for n, ns in nodes if ns.failed is not None or ns.interrupted),
    )


# --- the post-run review (spec 12) ------------------------------------------------------


def start_review(step: Step) -> None:
    """Ask the last node's model for suggestions before the run finishes."""
    reviewer = review.reviewer_node(step.s)
    if reviewer is None:
        end_review(step, [], review.NO_REVIEWER)
        return
    if reached(step.s) is not None:
        end_review(step, [], REVIEW_SKIPPED)
        return
    request = review.review_request(step.s, reviewer)
    call_id = step.new_id(f"model:{review.REVIEW_NODE}")
    step.s.review_call = call_id
    step.intents.append(
        CallModel(
            call_id=call_id,
            node_id=review.REVIEW_NODE,
            model_attempt=1,
            request=request,
            delta=TranscriptDelta(base_len=0),
            purpose="review",
        )
    )


def on_review_reply(step: Step, reply: ModelReply) -> None:
    report_usage(step, review.REVIEW_NODE, reply)  # spent like any call
    outcome = classify_reply(reply, review.SUGGESTIONS_SCHEMA).outcome
    end_review(step, *review.parse_suggestions(outcome, set(step.by_id)))


def end_review(step: Step, suggestions: list[dict[str, Any]], error: str | None) -> None:
    step.s.review_call = None
    step.s.review_done = True
    step.s.suggestions = suggestions
    step.s.suggestions_error = error


# --- run endings ------------------------------------------------------------------------


def complete(step: Step) -> None:
    s = step.s
    outputs = [{"node_id": n, "output": ns.output} for n, ns in sorted(s.nodes.items())]
    report = {
        "workflow_id": step.wf.id,
        "outputs": outputs,
        "read_calls": s.read_calls,
        "redundant_reads": s.redundant_reads,
        "tokens_in": s.tokens_in,
        "tokens_out": s.tokens_out,
        "estimated_cost_usd": s.cost_usd,
        "suggestions": list(s.suggestions),
        "suggestions_error": s.suggestions_error,
    }
    s.report = report
    s.finished = True
    s.status = "completed"
    step.emit(Finished(report=report))


def fail_run(step: Step) -> None:
    s = step.s
    node_id = s.terminal_node or ""
    s.finished = True
    s.status = "failed"
    ids = [
        ns.conversation.in_flight.call_id
        for ns in s.nodes.values()
        if ns.conversation.in_flight is not None
    ]
    for node_id_ in sorted(s.nodes):
        if s.nodes[node_id_].child is not None:
            ids += abort_child(step, node_id_)
    for node_id_ in list(s.nodes):
        if step.node(node_id_).pending_repair is not None:
            step.update_node(node_id_, pending_repair=None)
        update_conversation(step, Seat(node_id_), in_flight=None, backoff_until_ms=None)
    ids += [b.batch_id for b in s.batches.values() if b.in_flight]
    if ids:
        step.intents.append(CancelWork(ids=tuple(sorted(ids))))
    step.emit(
        NodeFailed(
            node_id=node_id,
            label=step.label(node_id),
            error=s.terminal_error or "run failed",
        )
    )


def stop(step: Step) -> None:
    s = step.s
    ids: list[str] = []
    for node_id in sorted(s.nodes):
        if step.node(node_id).child is not None:
            ids += abort_child(step, node_id)
            step.update_node(node_id, phase=Interrupted())
        in_flight = step.node(node_id).conversation.in_flight
        if in_flight is not None:
            ids.append(in_flight.call_id)
            step.update_node(node_id, pending_repair=None, phase=Interrupted())
        update_conversation(step, Seat(node_id), in_flight=None, backoff_until_ms=None)
        if step.node(node_id).handoff_job is not None:
            step.update_node(node_id, phase=Interrupted())
    for batch_id, batch in sorted(s.batches.items()):
        if batch.in_flight:
            ids.append(batch_id)
            s.batches.pop(batch_id)
            step.update_node(batch.node_id, phase=Interrupted())
            close_open(step, Seat(batch.node_id), prompts.INTERRUPTED_RESULT)
    if ids:
        step.intents.append(CancelWork(ids=tuple(sorted(ids))))
    s.finished = True
    s.status = "stopped"
    step.emit(Aborted())


__all__ = [
    "awaiting",
    "blocked",
    "busy",
    "complete",
    "dispatch_batch",
    "dispatch_model",
    "end_review",
    "fail_run",
    "on_review_reply",
    "ready",
    "schedule",
    "start_review",
    "stop",
]
