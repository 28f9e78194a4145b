"""A node's lifecycle transitions that more than one part of the reducer takes.

Failing a node (a retryable pause), interrupting it (a person stopped it, or its call came
back interrupted) and ending the subagent it runs as interrupted.

A person may interrupt a node only while it works (spec 5.5: a model call or a subagent in
flight, tool batches queued or running, a backoff before its next call); its work in flight
is cancelled and every call it made without a result gets the interrupted result.
"""

from __future__ import annotations

from openflow.engine import prompts
from openflow.engine.conversation import Seat, add_result, close_open, update_conversation
from openflow.engine.events import NodeErrored, NodeInterrupted, SubagentFailed
from openflow.engine.state import CancelWork, Failed, Interrupted, NodeState, RunSnapshot
from openflow.engine.step import Step


def fail_node(step: Step, node_id: str, error: str, budget: bool = False) -> None:
    """The node failed (or its budget held it); the run waits for a retry (`NodeErrored` once)."""
    ns = step.node(node_id)
    newly = ns.failed is None
    ns = step.update_node(node_id, phase=Failed(error=error, budget=budget))
    if newly:
        ns = step.update_node(node_id, errored_attempt=ns.model_attempt)
        step.emit(
            NodeErrored(
                node_id=node_id,
                label=step.label(node_id),
                error=error,
                model_attempt=ns.model_attempt,
            )
        )


def interrupt(step: Step, node_id: str) -> None:
    """Interrupt the node: end its subagent, drop its queued batches, close its open calls."""
    ids = abort_child(step, node_id)
    if ids:
        step.intents.append(CancelWork(ids=tuple(sorted(ids))))
    step.update_node(node_id, phase=Interrupted(), pending_repair=None)
    update_conversation(step, Seat(node_id), backoff_until_ms=None)
    for batch in step.node_batches(node_id):
        step.s.batches.pop(batch.batch_id)
    close_open(step, Seat(node_id), prompts.INTERRUPTED_RESULT)
    step.emit(NodeInterrupted(node_id=node_id, label=step.label(node_id)))


def interrupt_problem(snapshot: RunSnapshot, node_id: str) -> str | None:
    """Why the node cannot be interrupted now, or None when it works."""
    ns = snapshot.nodes.get(node_id)
    if ns is None or snapshot.workflow.find_node(node_id) is None:
        return f"unknown node {node_id!r}"
    batches = [b for b in snapshot.batches.values() if b.node_id == node_id]
    if ns.child is not None or ns.conversation.in_flight is not None:
        return None
    if any(not b.requires_approval for b in batches):
        return None
    if ns.conversation.backoff_until_ms is not None and not ns.failed and not ns.interrupted:
        return None
    return f"node {node_id!r} is not running ({_idle_reason(ns, bool(batches))}), so it cannot be interrupted"


def _idle_reason(ns: NodeState, awaiting_approval: bool) -> str:
    if awaiting_approval:
        return "it waits for a tool approval"
    if ns.awaiting:
        return "it waits for input"
    if ns.failed is not None:
        return "it failed; retry it instead"
    if ns.interrupted:
        return "it is already interrupted"
    if ns.handoff_job is not None:
        return "it is storing its handoff"
    if ns.has_output:
        return "it has completed"
    if ns.calls_done:
        return "it is between two steps; try again"
    return "it has not started"


def interrupt_node(step: Step, node_id: str) -> None:
    """A person interrupts the node: cancel its call, batches and subagent in flight (and only
    its own backoff timers), then interrupt it."""
    ns = step.node(node_id)
    timers = [node_id]
    if ns.child is not None:
        timers.append(ns.child.timer_key)
    ids = abort_child(step, node_id)
    ids.extend(b.batch_id for b in step.node_batches(node_id) if b.in_flight)
    in_flight = ns.conversation.in_flight
    if in_flight is not None:
        ids.append(in_flight.call_id)
        update_conversation(step, Seat(node_id), in_flight=None)
        if in_flight.kind != "repair":
            # Counted as a call made, as when a call comes back interrupted.
            step.update_node(node_id, calls_done=step.node(node_id).calls_done + 1)
    step.intents.append(CancelWork(ids=tuple(sorted(ids)), timers=tuple(sorted(timers))))
    interrupt(step, node_id)


def abort_child(step: Step, node_id: str) -> list[str]:
    """End a running child as interrupted (callable again); the ids of its work to cancel."""
    ns = step.node(node_id)
    child = ns.child
    if child is None:
        return []
    in_flight = child.conversation.in_flight
    ids = [in_flight.call_id] if in_flight is not None else []
    for batch in step.node_batches(node_id):
        if batch.subagent_id == child.subagent_id:
            if batch.in_flight:
                ids.append(batch.batch_id)
            step.s.batches.pop(batch.batch_id)
    step.update_node(node_id, child=None)
    step.set_status(child.subagent_id, child.prior_status)
    step.emit(
        SubagentFailed(
            node_id=node_id, subagent_id=child.subagent_id, error=prompts.SUBAGENT_INTERRUPTED
        )
    )
    add_result(step, Seat(node_id), child.call, prompts.INTERRUPTED_RESULT, is_error=True)
    return ids


__all__ = ["abort_child", "fail_node", "interrupt", "interrupt_node", "interrupt_problem"]
