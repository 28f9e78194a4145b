"""Subagents (spec 6): saved and declared agents a node calls, run durably as child turns.

A node offered the runtime tools (execution, not read-only) may declare ad-hoc subagents with
`openflow_declare_subagents` and call them, or the saved agents it lists, with
`openflow_call_subagent`. The parent's call is approved like any write-tier call of its node;
that decision is the only one: the child never asks people anything.

A call starts a child conversation inside the snapshot (`NodeState.child`, a `Conversation`
like the node's own, driven by the same functions of `conversation`). Every child turn is a
normal `CallModel` whose request is the subagent's (`request.node_id` is the subagent id, so
the model-turn activity keeps its transcript apart) while `CallModel.node_id` is the parent;
the facts come back by call id. The child's executable calls run as `RunTools` batches without
approval, one batch at a time, under the subagent id; the runtime tools are refused to it
(nesting depth 1). Plain-text and input-request turns get the autonomous nudge and the tenth
in a row fails the subagent; transient errors back off with the workflow's retry policy (timer
key `subagent:{id}`), other errors fail it. When the child submits, the parent's call gets
`{"output": ..., "message": "Subagent '<name>' completed."}` and the parent continues.

A batch mixing runtime and executable calls runs in order: executable calls between runtime
calls go out as their own batches, and the rest waits until each one (or the child) is done.

Stop, an interrupt, a terminal failure and resume end a running child cleanly
(`lifecycle.abort_child`): it is reported as `SubagentFailed` ("interrupted by user") and the
parent's call gets the interrupted result, so nothing is left without a result. The subagent
keeps the status it had before the call, so the parent (retried when the run resumes) may call
it again; that call starts from scratch.
"""

from __future__ import annotations

from typing import Any, assert_never

from openflow.engine import prompts
from openflow.engine.budget import hold
from openflow.engine.build import (
    callable_records,
    child_config,
    child_request,
    child_tools,
    saved_agents_of,
    snapshot_agents,
    summary,
)
from openflow.engine.classify import (
    Completed,
    Message,
    NeedsUserInput,
    ToolCalls,
    TurnError,
    classify_reply,
)
from openflow.engine.conversation import (
    Seat,
    add_result,
    announce_attempt,
    append,
    conversation,
    count,
    hold_for_backoff,
    send,
    take_reply,
    update_conversation,
    wrote_recently,
)
from openflow.engine.errors import EngineError
from openflow.engine.events import (
    AiInvokeFailed,
    NodeCompleted,
    SubagentCompleted,
    SubagentFailed,
    SubagentsDeclared,
    SubagentStarted,
    SubagentStatus,
    ToolCallProposed,
)
from openflow.engine.lifecycle import interrupt
from openflow.engine.policy import (
    CALL_SUBAGENT,
    DECLARE_SUBAGENTS,
    RUNTIME_TOOLS,
    approval_decision,
    batch_has_side_effects,
    plan_verdict,
)
from openflow.engine.protocol import error_text, shown_call, tool_started
from openflow.engine.request import ModelReply
from openflow.engine.state import (
    ChildRun,
    Conversation,
    PendingBatch,
    StoredItemRef,
    SubagentRecord,
)
from openflow.engine.step import Step
from openflow.engine.transcript import AssistantItem, ReasoningItem, ToolCall, UserItem
from openflow.engine.turn import INVALID_ARGS, kept_call

SUBAGENT_TEXT_CAP = 10
CALLABLE: frozenset[SubagentStatus] = frozenset({"declared", "completed"})


def announce_subagents(step: Step, node_id: str) -> None:
    """Announce the node's saved agents once, on its first model call."""
    if step.node(node_id).subagents_announced:
        return
    step.update_node(node_id, subagents_announced=True)
    records = [step.s.subagents.get(a.id) for a in saved_agents_of(step, node_id)]
    summaries = [summary(r) for r in records if r is not None]
    if summaries:
        step.emit(SubagentsDeclared(node_id=node_id, summaries=summaries))


# --- runtime calls of the parent --------------------------------------------------------


def runtime_batch(batch: PendingBatch) -> bool:
    return batch.subagent_id is None and any(c.name in RUNTIME_TOOLS for c in batch.calls)


def batch_waits(step: Step, batch: PendingBatch) -> bool:
    """A parent's batch waits while its child runs or another of its batches is out."""
    if batch.subagent_id is not None:
        return False
    if step.s.nodes[batch.node_id].child is not None:
        return True
    return any(
        b.in_flight and b.node_id == batch.node_id and b.batch_id != batch.batch_id
        for b in step.s.batches.values()
    )


def step_runtime_batch(step: Step, batch: PendingBatch) -> PendingBatch | None:
    """Answer runtime calls in order; split off the next executable run as a batch to send."""
    node_id = batch.node_id
    segment: PendingBatch | None = None
    while batch.calls:
        first = batch.calls[0]
        if first.name not in RUNTIME_TOOLS:
            calls: list[ToolCall] = []
            while batch.calls and batch.calls[0].name not in RUNTIME_TOOLS:
                calls.append(batch.calls.pop(0))
            segment = PendingBatch(
                batch_id=step.new_id("batch"),
                node_id=node_id,
                calls=calls,
                requires_approval=False,
                side_effects=batch_has_side_effects(
                    [c.name for c in calls], [c.arguments for c in calls]
                ),
                edited={c.id: batch.edited[c.id] for c in calls if c.id in batch.edited},
            )
            step.s.batches[segment.batch_id] = segment
            break
        batch.calls.pop(0)
        step.emit(tool_started(node_id, first))
        if first.name == DECLARE_SUBAGENTS:
            declare(step, node_id, first)
        elif call_subagent(step, node_id, first):
            break
    if not batch.calls:
        step.s.batches.pop(batch.batch_id, None)
    return segment


def declare(step: Step, node_id: str, call: ToolCall) -> None:
    """`openflow_declare_subagents`: register ad-hoc subagents `{node_id}-subagent-{n}`."""
    seat = Seat(node_id)
    parsed = _declared_pairs(call.arguments)
    if isinstance(parsed, str):
        text = prompts.invalid_subagent_args(DECLARE_SUBAGENTS, parsed, prompts.DECLARE_SHAPE_HINT)
        add_result(step, seat, call, text, is_error=True)
        return
    count = sum(1 for r in step.s.subagents.values() if r.owner == node_id)
    declared: list[SubagentRecord] = []
    for name, purpose in parsed:
        count += 1
        while f"{node_id}-subagent-{count}" in step.s.subagents:
            count += 1
        record = SubagentRecord(
            id=f"{node_id}-subagent-{count}", name=name, purpose=purpose, owner=node_id
        )
        step.s.subagents[record.id] = record
        declared.append(record)
    step.emit(SubagentsDeclared(node_id=node_id, summaries=[summary(r) for r in declared]))
    content = prompts.subagents_declared(
        [{"id": r.id, "name": r.name, "purpose": r.purpose, "status": "declared"} for r in declared]
    )
    add_result(step, seat, call, content, is_error=False)


def call_subagent(step: Step, node_id: str, call: ToolCall) -> bool:
    """`openflow_call_subagent`: start the child, or answer why not; True when started."""
    seat = Seat(node_id)
    args = call.arguments
    subagent_id, task = args.get("subagent_id"), args.get("input")
    problem = None
    if set(args) - {"subagent_id", "input"}:
        problem = "unexpected keys " + ", ".join(sorted(set(args) - {"subagent_id", "input"}))
    elif not isinstance(subagent_id, str) or not subagent_id.strip():
        problem = "`subagent_id` must be the id of a subagent"
    elif not isinstance(task, str) or not task.strip():
        problem = "`input` must be the task text for the subagent"
    if problem is not None or not isinstance(subagent_id, str) or not isinstance(task, str):
        hint = 'send {"subagent_id": "<id>", "input": "<the whole task>"}'
        text = prompts.invalid_subagent_args(CALL_SUBAGENT, problem or "invalid", hint)
        add_result(step, seat, call, text, is_error=True)
        return False
    record = next((r for r in callable_records(step, node_id) if r.id == subagent_id), None)
    if record is None:
        add_result(step, seat, call, prompts.subagent_not_found(subagent_id), is_error=True)
        return False
    if record.status not in CALLABLE:
        text = prompts.subagent_not_callable(subagent_id, record.status)
        add_result(step, seat, call, text, is_error=True)
        return False
    if record.owner is None:
        first = prompts.saved_subagent_first_message(record.name, task)
    else:
        first = prompts.adhoc_subagent_first_message(record.name, record.purpose, task)
    child = ChildRun(
        subagent_id=subagent_id,
        call=call,
        task=task,
        prior_status=record.status,
        conversation=Conversation(transcript=[UserItem(content=first)], origins=[None]),
    )
    step.update_node(node_id, child=child)
    step.set_status(subagent_id, "active")
    step.emit(SubagentStarted(node_id=node_id, subagent_id=subagent_id))
    return True


# --- the child's model calls ------------------------------------------------------------


def running_child(step: Step, node_id: str) -> ChildRun:
    """The node's running child (callers know there is one)."""
    child = step.node(node_id).child
    if child is None:
        raise EngineError(f"node {node_id!r} has no running subagent to update")
    return child


def child_blocked(step: Step, node_id: str) -> bool:
    child = step.s.nodes[node_id].child
    if child is None:
        return True
    conv = child.conversation
    return (
        conv.in_flight is not None
        or conv.backoff_until_ms is not None
        or any(b.subagent_id == child.subagent_id for b in step.node_batches(node_id))
    )


def dispatch_child(step: Step, node_id: str) -> None:
    """Send the child's next model call."""
    child = running_child(step, node_id)
    seat = Seat(node_id, child.subagent_id)
    if hold(step, seat):
        return
    request = child_request(step, node_id, child)
    if request is None:
        fail_child(step, node_id, "no model is configured for the subagent or its parent node")
        return
    announce_attempt(step, seat, request.node_label)
    send(step, seat, request, "subagent")


def count_call(step: Step, seat: Seat) -> None:
    """A child call settled: the subagent's turn index moves on (it spans invocations)."""
    record = step.s.subagents.get(seat.key)
    if record is not None:
        step.s.subagents[record.id] = record.model_copy(
            update={"calls_done": record.calls_done + 1}
        )


def on_child_reply(
    step: Step, seat: Seat, reply: ModelReply, stored: list[StoredItemRef] | None
) -> None:
    """Apply a child's reply: submit, tool calls, text, or an error."""
    child = running_child(step, seat.node_id)
    _system, schema, mode, _model = child_config(step, seat.node_id, child)
    outcome = classify_reply(reply, schema).outcome
    keep = take_reply(step, seat, reply, stored)
    if reply.reasoning and not isinstance(outcome, Completed):
        keep(ReasoningItem(blocks=reply.reasoning))
    if isinstance(outcome, Completed):
        finish_child(step, seat.node_id, outcome.output)
    elif isinstance(outcome, ToolCalls):
        on_child_tool_calls(step, seat, outcome, mode, keep)
    elif isinstance(outcome, NeedsUserInput | Message):
        on_child_text(step, seat, outcome.assistant_message, keep)
    elif isinstance(outcome, TurnError):
        on_child_error(step, seat, outcome)
    else:
        assert_never(outcome)


def on_child_tool_calls(step: Step, seat: Seat, outcome: ToolCalls, mode: str, keep: Any) -> None:
    """Queue the child's calls without approval; refuse what a subagent may not run."""
    update_conversation(step, seat, transient_streak=0)
    count(step, seat, "auto_continue", 0)
    if outcome.assistant_message.strip():
        keep(AssistantItem(content=outcome.assistant_message.strip()))
    offered = set(child_tools(step, mode)) if step.s.tool_names is not None else None
    queued: list[ToolCall] = []
    nudges: list[str] = []
    shown = step.subagent_name(seat.key)
    for raw in outcome.calls:
        call = kept_call(step, seat, raw, keep)
        step.emit(ToolCallProposed(node_id=seat.key, label=shown, tool_call=shown_call(call)))
        refusal = child_refusal(step, call, raw.id in outcome.invalid_call_ids, mode, offered)
        if refusal is not None:
            if refusal == prompts.MISSING_CONTENT_RESULT:
                nudges.append(prompts.MISSING_CONTENT_NUDGE)
            add_result(step, seat, call, refusal, is_error=True)
            continue
        queued.append(call)
    for text in dict.fromkeys(nudges):
        append(step, seat, UserItem(content=text))
    if queued:
        batch = PendingBatch(
            batch_id=step.new_id("batch"),
            node_id=seat.node_id,
            calls=queued,
            requires_approval=False,
            side_effects=batch_has_side_effects(
                [c.name for c in queued], [c.arguments for c in queued]
            ),
            subagent_id=seat.key,
        )
        step.s.batches[batch.batch_id] = batch


def child_refusal(
    step: Step, call: ToolCall, invalid: bool, mode: str, offered: set[str] | None
) -> str | None:
    """The error result of a child's call that does not run, or None to run it."""
    if invalid:
        return INVALID_ARGS.format(name=call.name)
    if call.name in RUNTIME_TOOLS:
        return prompts.SUBAGENT_BUILTIN_REFUSED
    if call.name == "write" and call.arguments.get("content") is None:
        return prompts.MISSING_CONTENT_RESULT
    verdict, reason = plan_verdict(
        call.name,
        call.arguments,
        plan_mode=step.s.plan_source is not None,
        planning=step.s.planning,
        is_source=False,
        read_only=mode == "read_only",
    )
    if verdict == "deny":
        return prompts.denial_result(reason, by_user=False)
    if approval_decision(mode, step.tier_of(call.name, call.arguments)) == "deny":
        return prompts.denial_result(
            f"this subagent is read-only and {call.name!r} changes things", by_user=False
        )
    if offered is not None and call.name not in offered:
        return f"Tool unavailable: tool {call.name} is not offered to this subagent"
    return None


def on_child_text(step: Step, seat: Seat, text: str, keep: Any) -> None:
    """A text-only or input-request turn: the autonomous nudge, failing at the cap."""
    update_conversation(step, seat, transient_streak=0)
    if text.strip():
        keep(AssistantItem(content=text.strip()))
    if count(step, seat, "auto_continue") >= SUBAGENT_TEXT_CAP:
        failure = prompts.SUBAGENT_NARRATION_FAILURE.format(cap=SUBAGENT_TEXT_CAP)
        fail_child(step, seat.node_id, failure)
        return
    nudge = prompts.text_only_nudge(
        conversational=False,
        narrated_write=prompts.narrates_write(text),
        wrote_before=wrote_recently(conversation(step, seat)),
        plan_source=False,
        free_text_only=False,
    )
    append(step, seat, UserItem(content=nudge))


def on_child_error(step: Step, seat: Seat, err: TurnError) -> None:
    """Transient errors back off; an interrupt ends the child; anything else fails it."""
    display = error_text(err)
    shown = step.subagent_name(seat.key)
    step.emit(AiInvokeFailed(node_id=seat.key, label=shown, error=display))
    if err.error == "interrupted":
        interrupt(step, seat.node_id)
        return
    if err.error == "transient" and hold_for_backoff(step, seat, err, display):
        return
    fail_child(step, seat.node_id, display)


# --- the child's end --------------------------------------------------------------------


def finish_child(step: Step, node_id: str, output: Any) -> None:
    """The child submitted: its output becomes the result of the parent's call."""
    child = running_child(step, node_id)
    name = step.subagent_name(child.subagent_id)
    step.update_node(node_id, child=None)
    step.set_status(child.subagent_id, "completed")
    step.emit(NodeCompleted(node_id=child.subagent_id, label=name, output=output, handoff=None))
    step.emit(SubagentCompleted(node_id=node_id, subagent_id=child.subagent_id))
    content = prompts.subagent_completed(name, output)
    add_result(step, Seat(node_id), child.call, content, is_error=False)


def fail_child(step: Step, node_id: str, error: str) -> None:
    """The child failed for good: the parent's call gets the error and the parent goes on."""
    child = running_child(step, node_id)
    name = step.subagent_name(child.subagent_id)
    for batch in step.node_batches(node_id):
        if batch.subagent_id == child.subagent_id:
            step.s.batches.pop(batch.batch_id)
    step.update_node(node_id, child=None)
    step.set_status(child.subagent_id, "failed")
    step.emit(SubagentFailed(node_id=node_id, subagent_id=child.subagent_id, error=error))
    content = prompts.subagent_failed(name, error)
    add_result(step, Seat(node_id), child.call, content, is_error=True)


def _declared_pairs(args: dict[str, Any]) -> list[tuple[str, str]] | str:
    """The `(name, purpose)` pairs of a declare call, or what is wrong with its arguments."""
    if set(args) - {"subagents"}:
        return "unexpected keys " + ", ".join(sorted(set(args) - {"subagents"}))
    items = args.get("subagents")
    if not isinstance(items, list) or not items:
        return "`subagents` must be a non-empty list"
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return f"subagents[{i}] must be an object"
        extra = set(item) - {"name", "purpose"}
        if extra:
            return f"subagents[{i}] has unexpected keys " + ", ".join(sorted(extra))
        name, purpose = item.get("name"), item.get("purpose")
        if not isinstance(name, str) or not name.strip():
            return f"subagents[{i}].name must be a non-empty string"
        if not isinstance(purpose, str):
            return f"subagents[{i}].purpose must be a string"
        pairs.append((name.strip(), purpose.strip()))
    return pairs


__all__ = [
    "CALLABLE",
    "SUBAGENT_TEXT_CAP",
    "announce_subagents",
    "batch_waits",
    "call_subagent",
    "child_blocked",
    "count_call",
    "declare",
    "dispatch_child",
    "fail_child",
    "finish_child",
    "on_child_reply",
    "runtime_batch",
    "snapshot_agents",
    "step_runtime_batch",
]
