"""A node's lifecycle transitions that more than one part of the reducer takes.

Failing a node (a retryable pause), interrupting it (a person stopped it, or its call came
back interrupted) and ending the subagent it runs as interrupted.
"""

from __future__ import annotations

from openflow.engine import prompts
from openflow.engine.conversation import Seat, add_result, close_open
from openflow.engine.events import NodeErrored, NodeInterrupted, SubagentFailed
from openflow.engine.state import CancelWork, Failed, Interrupted
from openflow.engine.step import Step


def fail_node(step: Step, node_id: str, error: str, budget: bool = False) -> None:
    """The node failed (or its budget held it); the run waits for a retry (`NodeErrored` once)."""
    ns = step.node(node_id)
    newly = ns.failed is None
    ns.phase = Failed(error=error, budget=budget)
    if newly:
        ns.errored_attempt = ns.model_attempt
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
    ns = step.node(node_id)
    ns.phase = Interrupted()
    ns.conversation.backoff_until_ms = None
    ns.pending_repair = None
    for batch in step.node_batches(node_id):
        step.s.batches.pop(batch.batch_id)
    close_open(step, Seat(node_id), prompts.INTERRUPTED_RESULT)
    step.emit(NodeInterrupted(node_id=node_id, label=step.label(node_id)))


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
    ns.child = None
    step.set_status(child.subagent_id, child.prior_status)
    step.emit(
        SubagentFailed(
            node_id=node_id, subagent_id=child.subagent_id, error=prompts.SUBAGENT_INTERRUPTED
        )
    )
    add_result(step, Seat(node_id), child.call, prompts.INTERRUPTED_RESULT, is_error=True)
    return ids


__all__ = ["abort_child", "fail_node", "interrupt"]
