"""A node's turn policy: what one model answer does to its node (spec 3, 4.3, 11, 3.9).

Replies are classified and applied: completions (with Plan Mode's freeze gate), tool calls
(with the approval and Plan Mode policy), questions, text-only turns, errors and their nudges,
and output repair. The conversation bookkeeping they share with subagents is in
`conversation`; a subagent's own policy is in `subagents`.
"""

from __future__ import annotations

import json
from typing import Any, assert_never

from pydantic import ValidationError

from openflow.engine import prompts
from openflow.engine.budget import reached
from openflow.engine.build import build_repair_request, node_input, offered_tools
from openflow.engine.classify import (
    Completed,
    Message,
    NeedsUserInput,
    ToolCalls,
    TurnError,
    classify_failure,
    classify_reply,
    complete_submit,
)
from openflow.engine.conversation import (
    Seat,
    add_result,
    append,
    conversation,
    count,
    hold_for_backoff,
    keep_all,
    report_usage,
    reset_protocol,
    take_reply,
    update_conversation,
    wrote_recently,
)
from openflow.engine.events import (
    AiInvokeFailed,
    ChatMessage,
    NodeAwaitingInput,
    NodeCompleted,
    OutputRepairFailed,
    OutputRepairStarted,
    OutputRepairSucceeded,
    ToolApprovalRequested,
    ToolApproved,
    ToolCallProposed,
)
from openflow.engine.grants import grant_for
from openflow.engine.handoff import HandoffFile, handoff_file, handoff_output, written_as
from openflow.engine.lifecycle import fail_node, interrupt
from openflow.engine.policy import (
    HARNESS_ASK_QUESTION,
    HARNESS_REQUEST_INPUT,
    HARNESS_SUBMIT,
    SEAL_TOOL,
    SEALED_FROM,
    approval_decision,
    batch_has_side_effects,
    plan_verdict,
)
from openflow.engine.protocol import (
    AUTO_CONTINUE_CAP,
    PROTOCOL_CAP,
    Keep,
    error_text,
    shown_call,
    structured_problem,
)
from openflow.engine.request import ModelReply, ProviderFailure
from openflow.engine.spec import read_submission_schema, submission_schema, template_headings
from openflow.engine.state import (
    AwaitingInput,
    CallModel,
    ChangeEvidencePacket,
    Done,
    InFlightCall,
    PendingBatch,
    StoredItemRef,
    StoringHandoff,
    TranscriptDelta,
    WriteHandoff,
)
from openflow.engine.step import Step
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningItem,
    ToolCall,
    ToolCallItem,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)

INVALID_ARGS = (
    "[invalid_args] {name}: arguments are not valid JSON — send one JSON object with the "
    "tool's fields"
)


# --- model replies ----------------------------------------------------------------------


def on_reply(
    step: Step,
    node_id: str,
    reply: ModelReply,
    stored: list[StoredItemRef] | None = None,
    handoff: dict[str, Any] | None = None,
    handoff_stored: bool = False,
) -> None:
    """Apply a node's classified reply (spec 3.4); `stored` says where the run store holds
    each of `reply_items(reply)`, so the items the node keeps are sent by reference;
    `handoff` is the manifest of the handoff the model turn stored for its submission, or
    `handoff_stored` says it stored one and left the manifest out."""
    seat = Seat(node_id)
    agent = step.by_id[node_id].agent
    result = classify_reply(reply, read_submission_schema(agent), markdown_headings(step, node_id))
    keep = take_reply(step, seat, reply, stored)
    reasoning: list[TranscriptItem] = (
        [ReasoningItem(blocks=reply.reasoning)] if reply.reasoning else []
    )
    outcome = result.outcome
    if isinstance(outcome, Completed):
        on_completed(step, node_id, outcome, reasoning, keep, handoff, handoff_stored)
    elif isinstance(outcome, ToolCalls):
        on_tool_calls(step, node_id, outcome, reasoning, keep)
    elif isinstance(outcome, NeedsUserInput):
        if not step.conversational(node_id):
            text_only(step, node_id, outcome.assistant_message, reasoning, keep)
        else:
            on_input_request(step, node_id, outcome, reasoning, keep)
    elif isinstance(outcome, Message):
        if agent.conversation_mode:
            reset_protocol(step, seat)
            keep_all(keep, reasoning)
            keep(AssistantItem(content=outcome.assistant_message))
            pause_for_input(step, node_id, None)
        else:
            text_only(step, node_id, outcome.assistant_message, reasoning, keep)
    elif isinstance(outcome, TurnError):
        on_error(step, node_id, outcome)
    else:
        assert_never(outcome)


def markdown_headings(step: Step, node_id: str) -> list[str] | None:
    agent = step.by_id[node_id].agent
    if agent.handoff.format != "markdown":
        return None
    return template_headings(getattr(agent.handoff, "template", "") or "")


def sealed(step: Step, node_id: str) -> bool:
    """Whether the node's transcript holds a successful seal result with an artifact id."""
    return any(
        isinstance(item, ToolResultItem)
        and item.result.tool_name == SEAL_TOOL
        and not item.result.is_error
        and bool(item.result.artifact_ids)
        for item in step.node(node_id).conversation.transcript
    )


def on_completed(
    step: Step,
    node_id: str,
    outcome: Completed,
    reasoning: list[TranscriptItem],
    keep: Keep,
    stored: dict[str, Any] | None = None,
    stored_unnamed: bool = False,
) -> None:
    """A node's submission: done, or its handoff written first. `stored` is the manifest of
    the handoff the model turn stored; `stored_unnamed` says it stored the submission's
    handoff without naming its manifest (made again here)."""
    ns = step.node(node_id)
    agent = step.by_id[node_id].agent
    seat = Seat(node_id)
    reset_protocol(step, seat)
    keep_all(keep, reasoning)
    if outcome.assistant_message.strip():
        append(step, seat, AssistantItem(content=outcome.assistant_message.strip()))
    if step.is_plan_source(node_id) and not sealed(step, node_id):
        append(step, seat, UserItem(content=prompts.PLAN_GATE_NUDGE))
        return
    ns = step.node(node_id)
    if ns.queued_messages and ns.late_messages:
        # People wrote while this turn was in flight: the node reads their messages (its next
        # call carries them) before it is done, so none is lost.
        append(step, seat, UserItem(content=prompts.LATE_MESSAGE_NUDGE))
        return
    fmt = agent.handoff.format
    if fmt not in ("json", "markdown"):
        store_output(step, node_id, outcome.output, None)
        return
    if stored is None and stored_unnamed:
        made = handoff_file(node_id, fmt, outcome.output)
        stored = made.manifest if isinstance(made, HandoffFile) else None
        written = stored is not None
    else:
        written = written_as(node_id, fmt, outcome.output, stored)
    if written:
        # The model turn stored this very submission's handoff: done in this step.
        output = handoff_output(fmt, outcome.output, outcome.assistant_message)
        store_output(step, node_id, output, stored)
    else:
        job = {"output": outcome.output, "message": outcome.assistant_message}
        step.update_node(node_id, phase=StoringHandoff(job=job))
        step.intents.append(WriteHandoff(node_id=node_id, format=fmt, output=outcome.output))


def store_output(step: Step, node_id: str, output: Any, handoff: dict[str, Any] | None) -> None:
    step.update_node(node_id, phase=Done(output=output, handoff=handoff))
    if step.is_plan_source(node_id):
        step.s.packet = ChangeEvidencePacket.freeze(node_id, output)
    step.emit(
        NodeCompleted(node_id=node_id, label=step.label(node_id), output=output, handoff=handoff)
    )


# --- tool calls -------------------------------------------------------------------------


def relativize(step: Step, args: dict[str, Any]) -> dict[str, Any]:
    """Path arguments under the project or execution root, made relative to it."""
    roots = [r.rstrip("/") for r in (step.s.project_root, step.s.execution_dir) if r]
    if not roots:
        return args

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            for root in roots:
                if value == root:
                    return "."
                if value.startswith(root + "/"):
                    return value[len(root) + 1 :]
            return value
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    return {k: fix(v) if k in ("path", "paths", "cwd") else v for k, v in args.items()}


def kept_call(step: Step, seat: Seat, raw: ToolCall, keep: Keep) -> ToolCall:
    """Keep a call the model made, its paths relative (then kept as changed, not by reference)."""
    args = relativize(step, raw.arguments)
    call = raw.model_copy(update={"arguments": args})
    if args == raw.arguments:
        keep(ToolCallItem(call=call))
    else:
        append(step, seat, ToolCallItem(call=call))
    return call


def call_decision(step: Step, node_id: str, call: ToolCall, offered: set[str] | None) -> str:
    """`allow`, `prompt`, or the error result content of a call refused here (spec 4.3)."""
    args = call.arguments
    if call.name == "write" and args.get("content") is None:
        return prompts.MISSING_CONTENT_RESULT
    mode = step.approval_mode(node_id)
    verdict, reason = plan_verdict(
        call.name,
        args,
        plan_mode=step.s.plan_source is not None,
        planning=step.s.planning,
        is_source=node_id == step.s.plan_source,
        read_only=mode == "read_only",
    )
    if verdict == "deny":
        return prompts.denial_result(reason, by_user=False)
    decision = approval_decision(mode, step.tier_of(call.name, args))
    if decision == "deny" and verdict == "normal":
        return prompts.denial_result(
            f"node {node_id!r} is read-only and {call.name!r} changes things", by_user=False
        )
    if offered is not None and call.name not in offered:
        return f"Tool unavailable: tool {call.name} is not offered to this node in this run"
    return verdict if verdict in ("allow", "prompt") else decision


def on_tool_calls(
    step: Step, node_id: str, outcome: ToolCalls, reasoning: list[TranscriptItem], keep: Keep
) -> None:
    seat = Seat(node_id)
    reset_protocol(step, seat)
    keep_all(keep, reasoning)
    if outcome.assistant_message.strip():
        keep(AssistantItem(content=outcome.assistant_message.strip()))
    offered = set(offered_tools(step, node_id)) if step.s.tool_names is not None else None
    surviving: list[tuple[ToolCall, str]] = []
    nudges: list[str] = []
    for raw in outcome.calls:
        call = kept_call(step, seat, raw, keep)
        if raw.id in outcome.invalid_call_ids:
            add_result(step, seat, call, INVALID_ARGS.format(name=call.name), is_error=True)
            continue
        decision = call_decision(step, node_id, call, offered)
        if decision not in ("allow", "prompt"):
            if decision == prompts.MISSING_CONTENT_RESULT:
                nudges.append(prompts.MISSING_CONTENT_NUDGE)
            add_result(step, seat, call, decision, is_error=True)
            continue
        if decision == "prompt" and grant_for(step.s, call) is not None:
            decision = "granted"
        surviving.append((call, decision))
    for text in dict.fromkeys(nudges):
        append(step, seat, UserItem(content=text))
    if surviving:
        queue_batch(step, node_id, surviving)


def queue_batch(step: Step, node_id: str, surviving: list[tuple[ToolCall, str]]) -> None:
    """Queue the calls that may run; `granted` ones a remembered grant approved, and the batch
    asks people only when a call still says `prompt`."""
    calls = [c for c, _ in surviving]
    requires = any(d == "prompt" for _, d in surviving)
    batch_id = step.new_id("approval" if requires else "batch")
    batch = step.s.batches[batch_id] = PendingBatch(
        batch_id=batch_id,
        node_id=node_id,
        calls=calls,
        requires_approval=requires,
        side_effects=batch_has_side_effects([c.name for c in calls], [c.arguments for c in calls]),
        granted=[c.id for c, d in surviving if d == "granted"],
    )
    label = step.label(node_id)
    for call in calls:
        step.emit(ToolCallProposed(node_id=node_id, label=label, tool_call=shown_call(call)))
    if requires:
        announce_approval(step, batch_id)
    elif batch.granted:
        approve_granted(step, batch)


def approve_granted(step: Step, batch: PendingBatch) -> None:
    """Tell followers which calls of a queued batch a remembered grant approved."""
    for call in batch.calls:
        grant = grant_for(step.s, call) if call.id in batch.granted else None
        if grant is not None:
            step.emit(
                ToolApproved(
                    approval_id=batch.batch_id,
                    node_id=batch.node_id,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    by=grant.by,
                    grant=grant.label,
                )
            )


def announce_approval(step: Step, batch_id: str) -> None:
    """Tell people a batch waits for their decision (one ToolApprovalRequested a batch)."""
    batch = step.s.batches[batch_id]
    calls = batch.calls
    first = calls[0]
    step.emit(
        ToolApprovalRequested(
            request={
                "approvalId": batch_id,
                "nodeId": batch.node_id,
                "nodeLabel": step.label(batch.node_id),
                "toolCall": shown_call(first),
                "tier": step.tier_of(first.name, first.arguments),
                "toolCalls": [shown_call(c) for c in calls],
            }
        )
    )


def record_seal(step: Step, node_id: str, call: ToolCall, artifact_ids: tuple[str, ...]) -> None:
    """Point a successful seal call at its artifact instead of the plan text (spec 11)."""
    seat = Seat(node_id)
    conv = conversation(step, seat)
    transcript, origins = list(conv.transcript), list(conv.origins)
    for i, item in enumerate(transcript):
        if isinstance(item, ToolCallItem) and item.call.id == call.id:
            args = {"artifact_id": artifact_ids[0], **SEALED_FROM}
            transcript[i] = ToolCallItem(call=item.call.model_copy(update={"arguments": args}))
            origins[i] = None
    if transcript != conv.transcript:
        update_conversation(step, seat, transcript=transcript, origins=origins)


# --- text-only turns and questions ------------------------------------------------------


def text_only(
    step: Step, node_id: str, text: str, reasoning: list[TranscriptItem], keep: Keep
) -> None:
    seat = Seat(node_id)
    reset_protocol(step, seat, keep_auto_continue=True)
    keep_all(keep, reasoning)
    if text.strip():
        keep(AssistantItem(content=text.strip()))
    conversational = step.conversational(node_id)
    if conversation(step, seat).counters.auto_continue >= AUTO_CONTINUE_CAP:
        if conversational:
            append(step, seat, AssistantItem(content=prompts.NARRATION_HANDOFF))
            step.emit(
                ChatMessage(node_id=node_id, role="assistant", content=prompts.NARRATION_HANDOFF)
            )
            pause_for_input(step, node_id, None)
        else:
            fail_node(
                step,
                node_id,
                f"node produced {AUTO_CONTINUE_CAP} consecutive turns without a tool call "
                "while user input is disabled",
            )
        return
    count(step, seat, "auto_continue")
    tools_cfg = step.by_id[node_id].agent.tools
    nudge = prompts.text_only_nudge(
        conversational=conversational,
        narrated_write=prompts.narrates_write(text),
        wrote_before=wrote_recently(conversation(step, seat)),
        plan_source=step.is_plan_source(node_id),
        free_text_only=not tools_cfg.allow_structured_user_input,
    )
    append(step, seat, UserItem(content=nudge))


def on_input_request(
    step: Step,
    node_id: str,
    outcome: NeedsUserInput,
    reasoning: list[TranscriptItem],
    keep: Keep,
) -> None:
    conv = step.node(node_id).conversation
    tools_cfg = step.by_id[node_id].agent.tools
    structured = outcome.structured_input
    structured_disabled = not tools_cfg.allow_structured_user_input
    if structured is not None and structured_disabled:
        structured = None
    problem: str | None
    if structured is not None:
        problem = structured_problem(structured)
    elif not outcome.assistant_message.strip():
        problem = "the question is empty"
    else:
        problem = None
    if problem is not None:
        if conv.counters.request_input >= PROTOCOL_CAP:
            fail_node(
                step,
                node_id,
                f"model made {PROTOCOL_CAP + 1} consecutive invalid human-input requests "
                f"({problem})",
            )
            return
        count(step, Seat(node_id), "request_input")
        nudge = prompts.invalid_input_request_nudge(problem, structured_disabled)
        append(step, Seat(node_id), UserItem(content=nudge))
        return
    reset_protocol(step, Seat(node_id))
    keep_all(keep, reasoning)
    keep(AssistantItem(content=outcome.assistant_message.strip()))
    if outcome.assistant_message.strip():
        step.emit(ChatMessage(node_id=node_id, role="assistant", content=outcome.assistant_message))
    pause_for_input(step, node_id, structured)


def pause_for_input(step: Step, node_id: str, structured: dict[str, Any] | None) -> None:
    step.update_node(node_id, phase=AwaitingInput(structured_input=structured))
    context_parts = []
    for entry in node_input(step, node_id).get("upstream", []):
        pretty = json.dumps(entry["output"], indent=2, sort_keys=True)
        context_parts.append(f"{entry['node_id']}:\n{pretty}\n")
    if not context_parts:
        context_parts.append(f"Entrypoint: {step.s.entrypoint_text}\n")
    context = "".join(context_parts) + f"\nTask: {step.by_id[node_id].agent.task_prompt}"
    step.emit(
        NodeAwaitingInput(
            node_id=node_id,
            label=step.label(node_id),
            context=context,
            is_initial=False,
            structured_input=structured,
        )
    )


# --- errors -----------------------------------------------------------------------------


def on_failure(step: Step, node_id: str, failure: ProviderFailure) -> None:
    on_error(step, node_id, classify_failure(failure))


def on_error(step: Step, node_id: str, err: TurnError, allow_repair: bool = True) -> None:
    """Route an AgentError through the handlers of spec 3.5, first claim wins."""
    conv = step.node(node_id).conversation
    seat = Seat(node_id)
    if allow_repair and start_repair(step, node_id, err):
        return
    display = error_text(err)
    step.emit(AiInvokeFailed(node_id=node_id, label=step.label(node_id), error=display))
    agent = step.by_id[node_id].agent
    counters = conv.counters
    if err.error == "interrupted":
        interrupt(step, node_id)
        return
    if err.error == "malformed" and counters.submit < PROTOCOL_CAP:
        count(step, seat, "submit")
        nudge = prompts.malformed_nudge(err.message, submission_schema(agent))
        append(step, seat, UserItem(content=nudge))
        return
    if err.error == "mixed" and counters.mixed < PROTOCOL_CAP:
        count(step, seat, "mixed")
        enabled = [HARNESS_SUBMIT]
        if step.conversational(node_id):
            if agent.tools.allow_free_text_user_input:
                enabled.append(HARNESS_REQUEST_INPUT)
            if agent.tools.allow_structured_user_input:
                enabled.append(HARNESS_ASK_QUESTION)
        append(step, seat, UserItem(content=prompts.mixed_nudge(enabled)))
        return
    if err.error == "truncated" and counters.truncation < PROTOCOL_CAP:
        count(step, seat, "truncation")
        append(step, seat, UserItem(content=prompts.truncation_nudge(err.tool_names)))
        return
    if err.error == "empty" and on_empty(step, node_id):
        return
    if err.error == "transient" and hold_for_backoff(step, seat, err, display):
        return
    fail_node(step, node_id, display)


def on_empty(step: Step, node_id: str) -> bool:
    """Nudge after an empty turn, or hand a conversational node to its person at the cap."""
    conv = step.node(node_id).conversation
    seat = Seat(node_id)
    conversational = step.conversational(node_id)
    if conv.counters.empty < PROTOCOL_CAP:
        count(step, seat, "empty")
        narrated = any(
            isinstance(i, AssistantItem) and prompts.narrates_write(i.content)
            for i in conversation(step, seat).transcript[-3:]
        )
        nudge = prompts.empty_nudge(conversational, narrated, step.is_plan_source(node_id))
        append(step, seat, UserItem(content=nudge))
        return True
    if not conversational:
        return False
    append(step, seat, AssistantItem(content=prompts.EMPTY_TURNS_HANDOFF))
    step.emit(ChatMessage(node_id=node_id, role="assistant", content=prompts.EMPTY_TURNS_HANDOFF))
    pause_for_input(step, node_id, None)
    return True


# --- output repair (spec 3.9) -----------------------------------------------------------


def start_repair(step: Step, node_id: str, err: TurnError) -> bool:
    """Ask the repair model to fix a malformed submit before nudging the node."""
    ns = step.node(node_id)
    if err.error != "malformed" or err.candidate is None or ns.pending_repair is not None:
        return False
    if reached(step.s) is not None:
        return False  # no repair call past the budget: the node's own next call pauses
    request = build_repair_request(step, node_id, err)
    if request is None:
        return False
    call_id = step.new_id(f"repair:{node_id}")
    attempt = ns.model_attempt
    step.update_node(
        node_id, pending_repair={"error": err.model_dump(mode="json"), "model": request.model}
    )
    update_conversation(
        step,
        Seat(node_id),
        in_flight=InFlightCall(call_id=call_id, model_attempt=attempt, kind="repair"),
    )
    step.emit(OutputRepairStarted(node_id=node_id, model=request.model))
    step.intents.append(
        CallModel(
            call_id=call_id,
            node_id=node_id,
            model_attempt=attempt,
            request=request,
            delta=TranscriptDelta(base_len=0),
            purpose="repair",
        )
    )
    return True


def take_repair(step: Step, node_id: str) -> TurnError | None:
    ns = step.node(node_id)
    job = ns.pending_repair
    step.update_node(node_id, pending_repair=None, repairs_done=ns.repairs_done + 1)
    if job is None:
        return None
    try:
        return TurnError.model_validate(job.get("error"))
    except ValidationError:
        return None


def on_repair_reply(step: Step, node_id: str, reply: ModelReply) -> None:
    original = take_repair(step, node_id)
    if original is None:
        return
    report_usage(step, node_id, reply)
    outcome = classify_reply(reply, prompts.REPAIR_OUTPUT_SCHEMA).outcome
    if isinstance(outcome, Completed) and isinstance(outcome.output, dict):
        args = outcome.output.get("repaired_arguments")
        if isinstance(args, dict):
            schema = submission_schema(step.by_id[node_id].agent)
            headings = markdown_headings(step, node_id)
            repaired = complete_submit(args, json.dumps(args), schema, None, headings)
            if isinstance(repaired, Completed):
                step.emit(OutputRepairSucceeded(node_id=node_id, model=reply.model or "repair"))
                seat = Seat(node_id)
                on_completed(step, node_id, repaired, [], lambda item: append(step, seat, item))
                return
            reason = f"the repaired arguments are still invalid: {repaired.message}"
        else:
            reason = "the repair model returned no repaired_arguments object"
    elif isinstance(outcome, TurnError):
        reason = error_text(outcome)
    else:
        reason = "the repair model did not submit repaired arguments"
    step.emit(OutputRepairFailed(node_id=node_id, reason=reason))
    on_error(step, node_id, original, allow_repair=False)


def on_repair_failure(step: Step, node_id: str, failure: ProviderFailure) -> None:
    original = take_repair(step, node_id)
    if original is None:
        return
    reason = error_text(classify_failure(failure))
    step.emit(OutputRepairFailed(node_id=node_id, reason=reason))
    if failure.kind == "interrupted":
        interrupt(step, node_id)
        return
    on_error(step, node_id, original, allow_repair=False)


__all__ = [
    "INVALID_ARGS",
    "announce_approval",
    "call_decision",
    "kept_call",
    "on_completed",
    "on_error",
    "on_failure",
    "on_repair_failure",
    "on_repair_reply",
    "on_reply",
    "pause_for_input",
    "queue_batch",
    "record_seal",
    "relativize",
    "store_output",
    "text_only",
]
