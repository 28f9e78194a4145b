"""The turn machine's shared half: what every model conversation does, a node's or a subagent's.

A `Seat` says whose conversation a step works on: a node's own, or the subagent the node runs
(`NodeState.child`). The functions here keep its transcript (items and where the run store
holds them), send its next call (attempt announcements, the in-flight mark, the transcript
delta), take a reply in (usage, chat messages, items kept by reference), and hold it for a
transient backoff or a lost call. What differs between the two (approvals, completion, the
nudges and their caps) is in `turn` for nodes and `subagents` for subagents.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from openflow.engine.classify import TurnError
from openflow.engine.copies import replaced
from openflow.engine.errors import EngineError
from openflow.engine.events import (
    ChatMessage,
    NodeQueued,
    NodeRetrying,
    NodeStarted,
    ToolCompleted,
    UsageReported,
)
from openflow.engine.protocol import (
    MAX_MODEL_ATTEMPT,
    Keep,
    backoff_delay_ms,
    jitter_ms,
    reply_items,
)
from openflow.engine.request import AgentRequest, ModelReply
from openflow.engine.state import (
    CallModel,
    ChildRun,
    Conversation,
    CounterName,
    Counters,
    InFlightCall,
    NodeState,
    SleepUntil,
    StoredItemRef,
    TranscriptDelta,
    child_timer_key,
    in_place,
    pack_refs,
)
from openflow.engine.step import Step
from openflow.engine.transcript import (
    ToolCall,
    ToolCallItem,
    ToolResult,
    ToolResultItem,
    TranscriptItem,
)


@dataclass(frozen=True)
class Seat:
    """Whose conversation: node `node_id`'s own, or that of the subagent it runs."""

    node_id: str
    subagent_id: str | None = None

    @property
    def key(self) -> str:
        """The id its events and requests carry: the node's, or the subagent's."""
        return self.subagent_id if self.subagent_id is not None else self.node_id

    @property
    def timer_key(self) -> str:
        """The key of its backoff timer (`SleepUntil.node_id`, `TimerFired`)."""
        if self.subagent_id is not None:
            return child_timer_key(self.subagent_id)
        return self.node_id


def conversation(step: Step, seat: Seat) -> Conversation:
    """The seat's conversation as the step holds it now."""
    ns = step.node(seat.node_id)
    if seat.subagent_id is None:
        return ns.conversation
    return _child(ns, seat).conversation


def _child(ns: NodeState, seat: Seat) -> ChildRun:
    child = ns.child
    if child is None or child.subagent_id != seat.subagent_id:
        raise EngineError(f"node {seat.node_id!r} runs no subagent {seat.subagent_id!r}")
    return child


def put(step: Step, seat: Seat, conv: Conversation) -> None:
    """Make `conv` the seat's conversation."""
    ns = step.node(seat.node_id)
    if seat.subagent_id is None:
        step.update_node(seat.node_id, conversation=conv)
    else:
        child = replaced(_child(ns, seat), {"conversation": conv})
        step.update_node(seat.node_id, child=child)


def update_conversation(step: Step, seat: Seat, **changes: Any) -> Conversation:
    """Replace fields of the seat's conversation (a shallow copy, not validated); the new one."""
    conv = conversation(step, seat)
    if all(getattr(conv, name) is value for name, value in changes.items()):
        return conv
    new = replaced(conv, changes)
    if "transcript" not in changes:
        known = _known(conv)
        if known is not None:
            _remember(new, known)
    put(step, seat, new)
    return new


def child_seat(step: Step, node_id: str) -> Seat | None:
    """The seat of the subagent node `node_id` runs, or None."""
    child = step.s.nodes[node_id].child
    return Seat(node_id, child.subagent_id) if child is not None else None


def label(step: Step, seat: Seat) -> str:
    if seat.subagent_id is not None:
        return step.subagent_name(seat.subagent_id)
    return step.label(seat.node_id)


# --- the transcript -------------------------------------------------------------------------


def append(
    step: Step, seat: Seat, item: TranscriptItem, origin: StoredItemRef | None = None
) -> None:
    conv = conversation(step, seat)
    known = _known(conv)
    conv = update_conversation(
        step, seat, transcript=[*conv.transcript, item], origins=[*conv.origins, origin]
    )
    if known is not None:
        _remember(conv, known.then(item))


def add_result(
    step: Step,
    seat: Seat,
    call: ToolCall,
    content: str,
    is_error: bool,
    origin: StoredItemRef | None = None,
    artifact_ids: tuple[str, ...] = (),
    output_meta: dict[str, Any] | None = None,
) -> None:
    """Give `call` its result in the transcript and tell followers (`ToolCompleted`)."""
    result = ToolResult(
        tool_call_id=call.id,
        tool_name=call.name,
        content=content,
        is_error=is_error,
        artifact_ids=artifact_ids,
        output_meta=output_meta,
    )
    append(step, seat, ToolResultItem(result=result), origin)
    step.emit(
        ToolCompleted(
            node_id=seat.key,
            tool_call_id=call.id,
            tool_name=call.name,
            content=content,
            is_error=is_error,
            artifact_ids=artifact_ids,
            output_meta=output_meta,
        )
    )


@dataclass(frozen=True)
class _Calls:
    """What a transcript's tool calls come to: the calls no result answers (in transcript
    order), and the ids its results answer (`settled | recent`).

    A step works out a new transcript's from the one it appends to (`then`), so a turn
    costs what it adds, not the length of the conversation."""

    open: tuple[ToolCall, ...]
    settled: frozenset[str]
    recent: frozenset[str] = frozenset()

    @classmethod
    def of(cls, transcript: Sequence[TranscriptItem]) -> _Calls:
        done = frozenset(
            item.result.tool_call_id for item in transcript if isinstance(item, ToolResultItem)
        )
        open_calls = tuple(
            item.call
            for item in transcript
            if isinstance(item, ToolCallItem) and item.call.id not in done
        )
        return cls(open_calls, done)

    def answers(self, call_id: str) -> bool:
        return call_id in self.recent or call_id in self.settled

    def then(self, item: TranscriptItem) -> _Calls:
        """The same for the transcript with `item` appended."""
        if isinstance(item, ToolResultItem):
            call_id = item.result.tool_call_id
            open_calls = tuple(c for c in self.open if c.id != call_id)
            recent = self.recent | {call_id}
            if len(recent) > _RECENT:
                return _Calls(open_calls, self.settled | recent)
            return _Calls(open_calls, self.settled, recent)
        if isinstance(item, ToolCallItem) and not self.answers(item.call.id):
            return _Calls((*self.open, item.call), self.settled, self.recent)
        return self


#: How many answered ids `_Calls` adds before folding them into one set (copied then).
_RECENT = 32


class _Known(weakref.ref[Conversation]):
    """A conversation's `_Calls`, kept while the conversation lives (a weak reference)."""

    __slots__ = ("key", "calls")

    def __new__(cls, conv: Conversation, calls: _Calls) -> _Known:
        return super().__new__(cls, conv, _forget)

    def __init__(self, conv: Conversation, calls: _Calls) -> None:
        # `weakref.ref.__init__` does nothing `__new__` has not done.
        self.key = id(conv)
        self.calls = calls


#: The `_Calls` of live conversations, by identity: only a step's speed depends on it, since
#: what it holds is what a scan of the transcript gives. A conversation is frozen (a change
#: is a new one), and its entry goes when it does, so memory and answers are as without it.
_KNOWN: dict[int, _Known] = {}


def _forget(ref: weakref.ref[Conversation]) -> None:
    """A conversation went: its entry goes too (called back by its weak reference)."""
    key = getattr(ref, "key", None)
    if key is not None and _KNOWN.get(key) is ref:
        _KNOWN.pop(key, None)


def _known(conv: Conversation) -> _Calls | None:
    found = _KNOWN.get(id(conv))
    return found.calls if found is not None and found() is conv else None


def _remember(conv: Conversation, calls: _Calls) -> _Calls:
    _KNOWN[id(conv)] = _Known(conv, calls)
    return calls


def _calls(conv: Conversation) -> _Calls:
    """The conversation's `_Calls`: remembered, or worked out once from its transcript (a
    snapshot read back from history, a transcript rewritten or trimmed)."""
    known = _known(conv)
    return known if known is not None else _remember(conv, _Calls.of(conv.transcript))


def answered(conv: Conversation) -> set[str]:
    """The ids of the calls the transcript holds a result for."""
    known = _calls(conv)
    return set(known.settled | known.recent)


def close_open(
    step: Step, seat: Seat, content: str, calls: Sequence[ToolCall] | None = None
) -> None:
    """Give the seat's calls without a result an error result (spec 5.5).

    `calls` limits it to those calls; otherwise every call of the transcript is looked at,
    except the calls still queued and the call a running subagent answers.
    """
    known = _calls(conversation(step, seat))
    if calls is None:
        pending = {c.id for b in step.node_batches(seat.node_id) for c in b.calls}
        child = step.s.nodes[seat.node_id].child
        if child is not None:
            pending.add(child.call.id)
        calls = [call for call in known.open if call.id not in pending]
    done: set[str] = set()
    for call in calls:
        if call.id not in done and not known.answers(call.id):
            done.add(call.id)
            add_result(step, seat, call, content, is_error=True)


def wrote_recently(conv: Conversation) -> bool:
    """Whether one of the last 40 items is a successful write."""
    return any(
        isinstance(item, ToolResultItem)
        and item.result.tool_name == "write"
        and not item.result.is_error
        for item in conv.transcript[-40:]
    )


_FRESH = Counters()


def reset_protocol(step: Step, seat: Seat, keep_auto_continue: bool = False) -> None:
    """Progress: the protocol counters, the transient streak and any backoff start over."""
    conv = conversation(step, seat)
    streak = conv.counters.auto_continue
    counters = Counters(auto_continue=streak) if keep_auto_continue and streak else _FRESH
    if conv.counters != counters or conv.transient_streak or conv.backoff_until_ms is not None:
        update_conversation(
            step, seat, counters=counters, transient_streak=0, backoff_until_ms=None
        )


def count(step: Step, seat: Seat, counter: CounterName, value: int | None = None) -> int:
    """Add one to a protocol counter of the seat's conversation (or set it to `value`)."""
    counters = conversation(step, seat).counters
    new = getattr(counters, counter) + 1 if value is None else value
    update_conversation(step, seat, counters=counters.model_copy(update={counter: new}))
    return new


# --- calls ------------------------------------------------------------------------------


def delta(step: Step, seat: Seat) -> TranscriptDelta:
    """What the next call must append: stored references, or the items themselves once a
    call found its references missing from the run store (`inline_next`, then cleared)."""
    conv = conversation(step, seat)
    start = max(conv.persisted_len - conv.transcript_offset, 0)
    inline = conv.inline_next
    persisted = conv.persisted_len
    if not inline:
        # What the last model turn wrote to the transcript itself is there already.
        held = in_place(conv.origins[start:], persisted)
        persisted += held
        start += held
    if inline or persisted != conv.persisted_len:
        update_conversation(step, seat, inline_next=False, persisted_len=persisted)
    items: list[Any] = []
    for item, origin in zip(conv.transcript[start:], conv.origins[start:], strict=True):
        items.append(origin if origin is not None and not inline else item)
    return TranscriptDelta(base_len=persisted, items=pack_refs(items))


def announce_attempt(step: Step, seat: Seat, shown: str) -> None:
    """`NodeQueued` and `NodeStarted`, once per attempt."""
    conv = conversation(step, seat)
    attempt = conv.model_attempt
    if conv.announced_attempt < attempt:
        update_conversation(step, seat, announced_attempt=attempt)
        step.emit(NodeQueued(node_id=seat.key, label=shown, model_attempt=attempt))
        step.emit(NodeStarted(node_id=seat.key, label=shown, model_attempt=attempt))


def send(
    step: Step, seat: Seat, request: AgentRequest, purpose: Literal["node", "subagent"]
) -> None:
    """Plan the seat's next model call and mark it in flight."""
    conv = conversation(step, seat)
    attempt = conv.model_attempt
    call_id = step.new_id(f"model:{seat.key}")
    update_conversation(
        step, seat, in_flight=InFlightCall(call_id=call_id, model_attempt=attempt, kind=purpose)
    )
    step.intents.append(
        CallModel(
            call_id=call_id,
            node_id=seat.node_id,
            model_attempt=attempt,
            request=request,
            delta=delta(step, seat),
            purpose=purpose,
        )
    )


def take_call(step: Step, call_id: str) -> tuple[Seat, InFlightCall] | None:
    """The seat whose call this is, its in-flight mark cleared; None for a stale fact."""
    for node_id, seen in sorted(step.s.nodes.items()):
        if node_id not in step.by_id:
            continue
        child = seen.child
        if child is not None and _is(child.conversation.in_flight, call_id):
            seat = Seat(node_id, child.subagent_id)
        elif _is(seen.conversation.in_flight, call_id):
            seat = Seat(node_id)
        else:
            continue
        call = conversation(step, seat).in_flight
        assert call is not None
        update_conversation(step, seat, in_flight=None)
        return seat, call
    return None


def _is(call: InFlightCall | None, call_id: str) -> bool:
    return call is not None and call.call_id == call_id


# --- replies ----------------------------------------------------------------------------


def count_usage(step: Step, reply: ModelReply) -> None:
    """Add a reply's tokens and cost to the run's totals."""
    if reply.usage is None:
        return
    step.s.tokens_in += reply.usage.prompt_tokens
    step.s.tokens_out += reply.usage.completion_tokens
    if reply.usage.cost_usd is not None:
        step.s.cost_usd = round((step.s.cost_usd or 0.0) + reply.usage.cost_usd, 6)


def report_usage(step: Step, key: str, reply: ModelReply) -> None:
    if reply.usage is None:
        return
    count_usage(step, reply)
    step.emit(
        UsageReported(
            node_id=key,
            usage=reply.usage,
            model=reply.model,
            max_context_tokens=reply.max_context_tokens,
        )
    )


def take_reply(
    step: Step, seat: Seat, reply: ModelReply, stored: Sequence[StoredItemRef] | None
) -> Keep:
    """Count and show a reply (usage, thinking, text); how to keep its items.

    `stored` says where the run store holds each of `reply_items(reply)`: an item the
    conversation keeps is then sent by reference.
    """
    report_usage(step, seat.key, reply)
    refs: dict[str, StoredItemRef] | None = None if stored is not None else {}

    def keep(item: TranscriptItem) -> None:
        nonlocal refs
        if refs is None:
            # Made for the first item kept (a reply that submits keeps none of its own).
            assert stored is not None
            refs = {_key(i): origin for i, origin in zip(reply_items(reply), stored, strict=True)}
        append(step, seat, item, refs.get(_key(item)) if refs else None)

    for block in reply.reasoning:
        if block.type in ("text", "summary") and block.text.strip():
            step.emit(ChatMessage(node_id=seat.key, role="thinking", content=block.text))
    if reply.text.strip() and not reply.streamed:
        step.emit(ChatMessage(node_id=seat.key, role="assistant", content=reply.text.strip()))
    return keep


def _key(item: TranscriptItem) -> str:
    return json.dumps(item.model_dump(mode="json"), sort_keys=True)


def keep_all(keep: Keep, items: Iterable[TranscriptItem]) -> None:
    for item in items:
        keep(item)


# --- holding for a retry ----------------------------------------------------------------


def hold_for_backoff(step: Step, seat: Seat, err: TurnError, display: str) -> bool:
    """Hold the seat for its transient backoff (spec 5.3), unless the streak is spent."""
    conv = conversation(step, seat)
    policy = step.wf.settings.retry_policy
    if conv.transient_streak >= policy.max_attempts:
        return False
    streak = conv.transient_streak + 1
    delay = backoff_delay_ms(policy.backoff_ms, streak) + jitter_ms(seat.key)
    if err.retry_after_ms is not None:
        delay = max(delay, err.retry_after_ms)
    conv = update_conversation(
        step,
        seat,
        transient_streak=streak,
        retries=min(conv.retries + 1, MAX_MODEL_ATTEMPT),
        backoff_until_ms=step.now + delay,
    )
    step.emit(
        NodeRetrying(
            node_id=seat.key,
            label=label(step, seat),
            attempt=conv.model_attempt,
            backoff_ms=delay,
            error=display,
        )
    )
    step.intents.append(SleepUntil(node_id=seat.timer_key, wake_at_ms=step.now + delay))
    return True


def retry_lost(step: Step, seat: Seat, display: str) -> bool:
    """A call whose worker died: try again at once (the provider did not fail).

    It counts as a new attempt and against the transient streak, so a worker that keeps
    dying on the same call ends in a failure instead of a loop; False when the streak is spent.
    """
    conv = conversation(step, seat)
    if conv.transient_streak >= step.wf.settings.retry_policy.max_attempts:
        return False
    conv = update_conversation(
        step,
        seat,
        transient_streak=conv.transient_streak + 1,
        retries=min(conv.retries + 1, MAX_MODEL_ATTEMPT),
    )
    step.emit(
        NodeRetrying(
            node_id=seat.key,
            label=label(step, seat),
            attempt=conv.model_attempt,
            backoff_ms=0,
            error=display,
        )
    )
    return True


__all__ = [
    "Seat",
    "add_result",
    "announce_attempt",
    "answered",
    "append",
    "child_seat",
    "close_open",
    "conversation",
    "count",
    "put",
    "update_conversation",
    "count_usage",
    "delta",
    "hold_for_backoff",
    "keep_all",
    "label",
    "report_usage",
    "reset_protocol",
    "retry_lost",
    "send",
    "take_call",
    "take_reply",
    "wrote_recently",
]
