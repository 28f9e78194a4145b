"""An approval action as the engine's `ApprovalDecided` fact, and a revoke as `GrantRevoked`.

The engine decides each call (`engine.approvals`) and `engine.check` says what a decision
cannot do against the run's state: an unknown or twice-decided call, a call left undecided,
an edit its node's policy refuses, a grant wider than the node's approval mode. What the
engine cannot know is checked here: an edit of a built-in tool must fit that tool's JSON
schema (the engine only has the tools' names; an MCP tool's edit is checked by the tool when
it runs). Such an edit becomes an `ActionMalformed` fact: the `act` validator rejects it with
the reason, and a signal's payload is recorded as ignored, so nothing else is recorded.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import jsonschema

    from openflow import contracts as c
    from openflow.engine.state import (
        ActionMalformed,
        ApprovalDecided,
        CallDecided,
        Grant,
        GrantRevoked,
        RunSnapshot,
    )
    from openflow.workflows.handlers import describe


@cache
def builtin_schemas() -> dict[str, dict[str, Any]]:
    """The JSON schema of each built-in tool's arguments (code, so the same on every worker)."""
    with workflow.unsafe.imports_passed_through():
        from openflow.activities.tools.registry import default_registry

    return {spec.name: spec.parameters for spec in default_registry().specs("execution")}


def edit_problem(name: str, arguments: dict[str, Any]) -> str | None:
    """Why edited arguments do not fit the built-in tool's schema, or None."""
    schema = builtin_schemas().get(name)
    if schema is None:
        return None
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: e.path
    )
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path)
    return f"{where + ': ' if where else ''}{first.message}"


def approval_fact(
    action: c.Action, snapshot: RunSnapshot | None, source: str
) -> ApprovalDecided | ActionMalformed:
    """The engine's fact for an approval action; `source` is the signal or update it came by."""
    approval_id = action.approval_id or ""
    decisions = tuple(
        CallDecided(call_id=d.call_id, allow=d.allow, reason=d.reason, arguments=d.arguments)
        for d in action.decisions
    )
    remember = action.remember
    fact = ApprovalDecided(
        approval_id=approval_id,
        # A whole-batch decision without `allow` has always been a denial.
        allow=action.allow if decisions else bool(action.allow),
        reason=action.reason,
        decisions=decisions,
        remember=Grant(tool=remember.tool, path_prefix=remember.path_prefix) if remember else None,
        by=action.by,
    )
    batch = snapshot.batches.get(approval_id) if snapshot is not None else None
    if batch is None:
        return fact
    names = {call.id: call.name for call in batch.calls}
    for i, decision in enumerate(decisions):
        name = names.get(decision.call_id)
        if decision.arguments is None or name is None:
            continue
        problem = edit_problem(name, decision.arguments)
        if problem is not None:
            payload = describe(action.model_dump(exclude_none=True, exclude_defaults=True))
            reason = (
                f"decisions[{i}].arguments: the edit of call {decision.call_id!r} does not fit "
                f"{name}'s schema: {problem}"
            )
            return ActionMalformed(signal=source, action="approval", reason=reason, payload=payload)
    return fact


def revoke_fact(action: c.Action) -> GrantRevoked:
    return GrantRevoked(tool=action.tool or "", path_prefix=action.path_prefix, by=action.by)


__all__ = ["approval_fact", "builtin_schemas", "edit_problem", "revoke_fact"]
