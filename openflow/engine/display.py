"""What the shell shows of a plan: the nodes a run waits on, its current details line, and the
summary of each activity it starts (Temporal's UI and `describe` show them)."""

from __future__ import annotations

from openflow.engine.state import CallModel, Plan, RunTools

#: The longest activity summary.
SUMMARY_CHARS = 200


def awaiting_nodes(plan: Plan) -> tuple[str, ...]:
    """The nodes that wait for a person: an answer, an approval of their batch, a retry."""
    awaiting = plan.awaiting
    nodes: set[str] = set(awaiting.inputs) | set(awaiting.retryables)
    for batch_id in awaiting.approvals:
        batch = plan.snapshot.batches.get(batch_id)
        if batch is not None:
            nodes.add(batch.node_id)
    return tuple(sorted(nodes))


def run_details(plan: Plan) -> str:
    """One line on what the run is doing or waiting for."""
    awaiting = plan.awaiting
    if plan.done:
        return f"{plan.status}"
    if awaiting.any:
        parts = []
        if awaiting.inputs:
            parts.append("input from " + ", ".join(awaiting.inputs))
        if awaiting.approvals:
            parts.append("approval of " + ", ".join(awaiting.approvals))
        if awaiting.retryables:
            parts.append("a retry of " + ", ".join(awaiting.retryables))
        return "waiting for " + "; ".join(parts)
    if plan.snapshot.review_call is not None:
        return "reviewing the run"
    running = sorted(
        n for n, ns in plan.snapshot.nodes.items() if ns.conversation.in_flight is not None
    )
    return "running " + ", ".join(running) if running else "running tools"


def model_summary(intent: CallModel) -> str:
    """A model call's activity summary: its node, and its attempt past the first."""
    if intent.purpose == "review":
        return "post-run review"
    attempt = f" · attempt {intent.model_attempt}" if intent.model_attempt > 1 else ""
    return f"model turn · {intent.node_id}{attempt}"


def tools_summary(intent: RunTools) -> str:
    """A batch's activity summary: its tools, and the first path one of them names."""
    names = ", ".join(dict.fromkeys(call.name for call in intent.calls))
    path = next(
        (str(call.arguments.get("path")) for call in intent.calls if call.arguments.get("path")),
        "",
    )
    return (f"tools · {names}" + (f" {path}" if path else ""))[:SUMMARY_CHARS]


__all__ = ["SUMMARY_CHARS", "awaiting_nodes", "model_summary", "run_details", "tools_summary"]
