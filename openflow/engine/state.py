"""The run snapshot, the facts the engine folds in and the intents it plans.

The snapshot is the whole run state: one pydantic model that round-trips through JSON
losslessly (continue-as-new and resume carry it). Facts are named in the past tense, intents
in the imperative (STYLE.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from openflow.engine.copies import replaced
from openflow.engine.events import RunEvent, SubagentStatus
from openflow.engine.request import AgentRequest, ModelReply, ProviderFailure
from openflow.engine.spec import Budget, CallableAgent, Workflow
from openflow.engine.transcript import Attachment, ToolCall, TranscriptItem, UserItem
from openflow.engine.wire import OmitDefaults

if TYPE_CHECKING:
    #: A list no one changes in place: a change replaces it, so snapshots and steps share it.
    #: mypy sees a read-only sequence; pydantic validates and dumps a plain list (a `Sequence`
    #: field validates half as fast).
    ReadOnlyList = Sequence
else:
    ReadOnlyList = list

RunStatus = Literal["running", "paused", "stopped", "completed", "failed"]


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)


# --- transcript bookkeeping -------------------------------------------------------------


class StoredItemRef(_Frozen):
    """Transcript items whose content the run store already holds (a reply or a batch): `count`
    items of the JSON list at `store_key`, from `index` on. An empty `store_key` means lines of
    the conversation's own transcript: a model turn writes its reply there itself."""

    kind: Literal["stored_ref"] = "stored_ref"
    store_key: str
    index: int
    count: int = 1

    @model_serializer(mode="wrap")
    def _short(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("count") == 1:
            del data["count"]
        return data


def reply_origins(reply_key: str, start: int, count: int) -> list[StoredItemRef]:
    """Where a reply's items are stored: its own list, or the transcript from line `start`."""
    return [StoredItemRef(store_key=reply_key, index=start + i) for i in range(count)]


def in_place(origins: Sequence[StoredItemRef | None], base_len: int) -> int:
    """How many leading items the transcript already holds at their places from `base_len` on."""
    held = 0
    for origin in origins:
        if origin is None or origin.store_key or origin.index != base_len + held:
            break
        held += 1
    return held


def pack_refs(items: Iterable[Any]) -> tuple[Any, ...]:
    """Delta items with runs of consecutive references into one stored list merged into one."""
    packed: list[Any] = []
    for item in items:
        last = packed[-1] if packed else None
        if (
            isinstance(item, StoredItemRef)
            and isinstance(last, StoredItemRef)
            and last.store_key == item.store_key
            and last.index + last.count == item.index
        ):
            packed[-1] = last.model_copy(update={"count": last.count + item.count})
        else:
            packed.append(item)
    return tuple(packed)


DeltaItem = Annotated[
    TranscriptItem | StoredItemRef,
    Field(discriminator="kind"),
]


class TranscriptDelta(OmitDefaults, _Frozen):
    """What a model-turn activity must append before calling the model."""

    base_len: int
    items: tuple[DeltaItem, ...] = ()


# --- per node state ---------------------------------------------------------------------


CounterName = Literal["submit", "request_input", "empty", "mixed", "truncation", "auto_continue"]


class Counters(_Frozen):
    """Protocol retry counters of one conversation (spec 3.5, 3.6); all reset on progress."""

    submit: int = 0
    request_input: int = 0
    empty: int = 0
    mixed: int = 0
    truncation: int = 0
    auto_continue: int = 0


class InFlightCall(_Frozen):
    call_id: str
    model_attempt: int
    kind: Literal["node", "repair", "review", "subagent"] = "node"


class Conversation(_Frozen):
    """One model conversation, a node's or a subagent's: its transcript, where the run store
    holds each item, the call in flight, the retries and backoff, the protocol counters.

    The turn machine (`engine.conversation`) works on it the same way for both."""

    transcript: ReadOnlyList[TranscriptItem] = Field(default_factory=list)
    #: Where the run store holds each transcript item (None: only here), by position.
    origins: ReadOnlyList[StoredItemRef | None] = Field(default_factory=list)
    #: How many older items continue-as-new dropped from `transcript` (positions stay absolute).
    transcript_offset: int = 0
    #: How many items the run store's transcript holds.
    persisted_len: int = 0
    #: The next call sends the items themselves (the store lost what references point at).
    inline_next: bool = False
    in_flight: InFlightCall | None = None
    retries: int = 0
    transient_streak: int = 0
    backoff_until_ms: int | None = None
    counters: Counters = Field(default_factory=Counters)
    #: The last attempt `NodeQueued`/`NodeStarted` announced.
    announced_attempt: int = 0

    @property
    def model_attempt(self) -> int:
        """1-based attempt number (retries + 1), saturating at 255 like OpenFlow's u8."""
        return min(self.retries + 1, 255)


_CONVERSATION_FIELDS = frozenset(Conversation.model_fields)


def _nest_conversation(data: Any) -> Any:
    """A holder's stored fields with its conversation's nested (the wire keeps them flat)."""
    if not isinstance(data, dict) or "conversation" in data:
        return data
    outer = {k: v for k, v in data.items() if k not in _CONVERSATION_FIELDS}
    outer["conversation"] = {k: v for k, v in data.items() if k in _CONVERSATION_FIELDS}
    return outer


def _flat(data: Any) -> Any:
    if isinstance(data, dict) and isinstance(data.get("conversation"), dict):
        data.update(data.pop("conversation"))
    return data


class _HoldsConversation(_Frozen):
    """A model holding a conversation whose fields history keeps at its own level."""

    conversation: Conversation = Field(default_factory=Conversation)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        return _nest_conversation(data)

    @model_serializer(mode="wrap")
    def _flatten(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _flat(handler(self))

    @property
    def model_attempt(self) -> int:
        """The conversation's 1-based attempt number."""
        return self.conversation.model_attempt


class SubagentRecord(_Frozen):
    """A saved agent of the snapshot, or one `owner` declared; `calls_done` spans invocations."""

    id: str
    name: str
    purpose: str = ""
    owner: str | None = None
    status: SubagentStatus = "declared"
    calls_done: int = 0


class ChildRun(_HoldsConversation):
    """One invocation of a subagent: the child conversation its parent node waits on."""

    subagent_id: str
    call: ToolCall
    task: str = ""
    prior_status: SubagentStatus = "declared"

    @model_validator(mode="before")
    @classmethod
    def _auto_continue(cls, data: Any) -> Any:
        """Histories before `Conversation` kept the child's one counter at its own level."""
        if isinstance(data, dict) and "auto_continue" in data:
            data = dict(data)
            streak = data.pop("auto_continue")
            conversation = data.get("conversation")
            if isinstance(conversation, dict):
                counters = dict(conversation.get("counters") or {})
                counters.setdefault("auto_continue", streak)
                data["conversation"] = {**conversation, "counters": counters}
            else:
                counters = dict(data.get("counters") or {})
                counters.setdefault("auto_continue", streak)
                data["counters"] = counters
        return data

    @property
    def timer_key(self) -> str:
        """The key of this invocation's backoff timer (`SleepUntil.node_id`, `TimerFired`)."""
        return child_timer_key(self.subagent_id)


def child_timer_key(subagent_id: str) -> str:
    """A timer key no node id of a workflow is expected to take."""
    return f"subagent:{subagent_id}"


class Ready(_Frozen):
    """Working: calling its model, waiting on its tools or its subagent, or about to."""

    kind: Literal["ready"] = "ready"


class AwaitingInput(_Frozen):
    """Paused for a person's answer (`structured_input`: the questions it asked, if any)."""

    kind: Literal["awaiting"] = "awaiting"
    structured_input: dict[str, Any] | None = None


class Failed(_Frozen):
    """Failed; the run waits for a retry (a retryable pause)."""

    kind: Literal["failed"] = "failed"
    error: str
    #: The node stopped before a model call its run's budget did not allow (`engine.budget`).
    budget: bool = False


class Interrupted(_Frozen):
    """Stopped mid-turn by a person or a stop; the run waits for a retry."""

    kind: Literal["interrupted"] = "interrupted"


class StoringHandoff(_Frozen):
    """Submitted; its handoff is being written (`job`: the output and the message)."""

    kind: Literal["storing_handoff"] = "storing_handoff"
    job: dict[str, Any]


class Done(_Frozen):
    """Completed with its output (and the stored handoff's manifest)."""

    kind: Literal["done"] = "done"
    output: Any = None
    handoff: dict[str, Any] | None = None


NodePhase = Annotated[
    Ready | AwaitingInput | Failed | Interrupted | StoringHandoff | Done,
    Field(discriminator="kind"),
]

#: The fields history keeps a node's phase in (snapshots recorded before `phase` have them).
_PHASE_FIELDS = (
    "output",
    "has_output",
    "handoff",
    "handoff_job",
    "awaiting",
    "structured_input",
    "failed",
    "failed_budget",
    "interrupted",
)


def _phase_of(data: dict[str, Any]) -> dict[str, Any]:
    """The phase the stored lifecycle fields describe (a finished node first)."""
    if data.get("has_output"):
        return {"kind": "done", "output": data.get("output"), "handoff": data.get("handoff")}
    if data.get("handoff_job") is not None:
        return {"kind": "storing_handoff", "job": data["handoff_job"]}
    if data.get("awaiting"):
        return {"kind": "awaiting", "structured_input": data.get("structured_input")}
    if data.get("interrupted"):
        return {"kind": "interrupted"}
    if data.get("failed") is not None:
        return {
            "kind": "failed",
            "error": data["failed"],
            "budget": bool(data.get("failed_budget")),
        }
    return {"kind": "ready"}


class NodeState(_HoldsConversation):
    """Everything the engine knows about one node: its conversation and its lifecycle `phase`.

    On the wire the phase is kept as the lifecycle fields of older snapshots (`has_output`,
    `awaiting`, `failed`, ...), which the read-only properties of the same names also show.
    """

    phase: NodePhase = Field(default_factory=Ready)
    #: People's live messages for the node's next turn: a text, or the user item of one that
    #: carries attachments.
    queued_messages: ReadOnlyList[str | UserItem] = Field(default_factory=list)
    turn_seq: int = 0
    calls_done: int = 0
    errored_attempt: int = 0
    changed_files: ReadOnlyList[dict[str, Any]] = Field(default_factory=list)
    reads: ReadOnlyList[dict[str, Any]] = Field(default_factory=list)
    pending_repair: dict[str, Any] | None = None
    runtime_patch: dict[str, Any] = Field(default_factory=dict)
    repairs_done: int = 0
    child: ChildRun | None = None
    subagents_announced: bool = False
    #: People's queued messages hold back a submit until the node has read them.
    late_messages: bool = False

    @model_validator(mode="before")
    @classmethod
    def _phase_from_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "phase" in data:
            return data
        if not any(key in data for key in _PHASE_FIELDS):
            return data
        outer = {k: v for k, v in data.items() if k not in _PHASE_FIELDS}
        outer["phase"] = _phase_of(data)
        return outer

    @model_serializer(mode="wrap")
    def _flatten(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = _flat(handler(self))
        if isinstance(data, dict) and "phase" in data:
            del data["phase"]
            data.update(
                output=self.output,
                has_output=self.has_output,
                handoff=self.handoff,
                handoff_job=self.handoff_job,
                awaiting=self.awaiting,
                structured_input=self.structured_input,
                failed=self.failed,
                interrupted=self.interrupted,
            )
            if isinstance(self.phase, Failed) and self.phase.budget:
                # Only a budget pause says so: other snapshots read as they always did.
                data["failed_budget"] = True
        return data

    @property
    def has_output(self) -> bool:
        return isinstance(self.phase, Done)

    @property
    def output(self) -> Any:
        return self.phase.output if isinstance(self.phase, Done) else None

    @property
    def handoff(self) -> dict[str, Any] | None:
        return self.phase.handoff if isinstance(self.phase, Done) else None

    @property
    def handoff_job(self) -> dict[str, Any] | None:
        return self.phase.job if isinstance(self.phase, StoringHandoff) else None

    @property
    def awaiting(self) -> bool:
        return isinstance(self.phase, AwaitingInput)

    @property
    def structured_input(self) -> dict[str, Any] | None:
        return self.phase.structured_input if isinstance(self.phase, AwaitingInput) else None

    @property
    def failed(self) -> str | None:
        return self.phase.error if isinstance(self.phase, Failed) else None

    @property
    def interrupted(self) -> bool:
        return isinstance(self.phase, Interrupted)


_M = TypeVar("_M", bound=BaseModel)

#: How `working_copy` copies each field of a model class, worked out once from its annotations.
_Plan = tuple[tuple[str, Literal["container", "models", "model"]], ...]
_plans: dict[type[BaseModel], _Plan] = {}


def working_copy(model: _M, share: Collection[str] = ()) -> _M:
    """A copy of a mutable model the reducer may change without touching the original.

    Lists and dicts are copied one level; mutable models in fields and dict values are copied
    the same way; frozen models (node states, transcript items, records) and plain values are
    shared, and so are the values of the fields named in `share` (never changed, like a run's
    workflow).
    """
    plan = _plans.get(type(model))
    if plan is None:
        plan = _plans[type(model)] = _copy_plan(type(model))
    update: dict[str, Any] = {}
    for name, how in plan:
        value = getattr(model, name)
        if value is None:
            continue
        if how == "model":
            if name not in share:
                update[name] = working_copy(value)
        elif how == "models" and name not in share:
            update[name] = {k: working_copy(v) for k, v in value.items()}
        else:
            update[name] = value.copy()
    return replaced(model, update)


def _copy_plan(cls: type[BaseModel]) -> _Plan:
    plan: list[tuple[str, Literal["container", "models", "model"]]] = []
    for name, info in cls.model_fields.items():
        annotation = info.annotation
        args = [a for a in get_args(annotation) if a is not type(None)]
        origin = get_origin(annotation)
        if origin in (list, dict) or any(get_origin(a) in (list, dict) for a in args):
            values = get_args(annotation)[-1] if origin is dict else None
            plan.append((name, "models" if _mutable_class(values) else "container"))
        elif _mutable_class(annotation) or any(_mutable_class(a) for a in args):
            plan.append((name, "model"))
    return tuple(plan)


def _mutable_class(annotation: Any) -> bool:
    return (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and not annotation.model_config.get("frozen", False)
    )


class PendingBatch(_Model):
    """A tool batch the engine queued: awaiting approval, runnable or in flight."""

    batch_id: str
    node_id: str
    calls: list[ToolCall]
    requires_approval: bool
    side_effects: bool
    in_flight: bool = False
    approval_announced: bool = False
    subagent_id: str | None = None
    #: Its completion was lost (the worker or the server went away); its receipt is being read.
    lost: bool = False
    #: Calls a person edited before they ran: call id -> the arguments the model sent.
    edited: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: Calls a remembered grant approved: they need no decision of their own.
    granted: list[str] = Field(default_factory=list)


# --- plan mode ----------------------------------------------------------------------------


def canonical_sha256(value: Any) -> str:
    """SHA-256 of canonical JSON: object keys sorted recursively, no insignificant spaces."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ChangeEvidencePacket(_Frozen):
    """The plan source's frozen output, given to every later request (spec 11)."""

    schema_version: int = Field(default=1, alias="schemaVersion")
    source_node_id: str = Field(alias="sourceNodeId")
    sha256: str
    content: Any = None

    @classmethod
    def freeze(cls, source_node_id: str, content: Any) -> ChangeEvidencePacket:
        """Freeze `content` as the packet of `source_node_id`."""
        return cls(source_node_id=source_node_id, sha256=canonical_sha256(content), content=content)

    def problem(self, pinned_source: str | None) -> str | None:
        """Why this packet cannot be trusted for a run pinned to `pinned_source`, or None."""
        if self.schema_version != 1:
            return f"unsupported change evidence packet schemaVersion {self.schema_version}"
        if pinned_source is None or self.source_node_id != pinned_source:
            return (
                f"the change evidence packet comes from {self.source_node_id!r}, not the pinned "
                f"Plan Mode source {pinned_source!r}"
            )
        if canonical_sha256(self.content) != self.sha256:
            return "the change evidence packet content does not match its sha256"
        return None

    def as_input(self) -> dict[str, Any]:
        """The packet as `input.change_evidence_packet` carries it."""
        return self.model_dump(mode="json", by_alias=True)


# --- the snapshot -----------------------------------------------------------------------


class RunSnapshot(_Model):
    """The whole run: what continue-as-new and resume carry."""

    run_id: str
    workflow: Workflow
    entrypoint_text: str = ""
    entrypoint_attachments: tuple[Attachment, ...] = ()
    execution_dir: str = ""
    project_root: str | None = None
    tool_names: list[str] | None = None
    nodes: dict[str, NodeState]
    batches: dict[str, PendingBatch] = Field(default_factory=dict)
    next_id: int = 1
    event_seq: int = 0
    status: RunStatus = "running"
    cancel_requested: bool = False
    terminal_error: str | None = None
    terminal_node: str | None = None
    finished: bool = False
    #: Tools the run's settings declare read-only beyond the built-in reads (MCP servers marked
    #: `read`): approval treats their calls as reads.
    read_tools: list[str] = Field(default_factory=list)
    review_done: bool = False
    #: Whether the run enforces `engine.limits` on the texts people send it (runs recorded
    #: before the limits existed replay without them).
    limits: bool = False
    #: Whether a successful run ends with the post-run review (runs recorded before it existed
    #: replay without it).
    review_enabled: bool = False
    #: The post-run review call in flight (spec 12), and what it came back with.
    review_call: str | None = None
    suggestions: list[dict[str, Any]] = Field(default_factory=list)
    suggestions_error: str | None = None
    report: dict[str, Any] | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    #: What the run may spend (`engine.budget`): the workflow's, with the run's own over it.
    budget: Budget | None = None
    read_calls: int = 0
    redundant_reads: int = 0
    plan_source: str | None = None
    packet: ChangeEvidencePacket | None = None
    agents: list[CallableAgent] = Field(default_factory=list)
    subagents: dict[str, SubagentRecord] = Field(default_factory=dict)
    #: Remembered approvals, oldest first.
    grants: list[Grant] = Field(default_factory=list)

    def fork(self) -> RunSnapshot:
        """A copy the reducer may change; the workflow definition is shared (never changed).

        Node states are frozen: the copy's `nodes` is a new dict holding the same states, and
        the reducer replaces the ones it changes, so a step costs what it touches, not the
        size of the workflow.
        """
        return working_copy(self, share=("workflow", "agents", "packet"))

    @property
    def planning(self) -> bool:
        """Plan Mode's planning phase: a pinned source whose packet is not frozen yet."""
        return self.plan_source is not None and self.packet is None


# --- facts ------------------------------------------------------------------------------


class ModelFailed(_Frozen):
    kind: Literal["model_failed"] = "model_failed"
    call_id: str
    node_id: str
    failure: ProviderFailure
    persisted_len: int | None = None
    lost: bool = False
    refs_missing: bool = False
    ms: int | None = None


class ToolResultSummary(OmitDefaults, _Frozen):
    """One tool result as history carries it: a capped preview; the store keeps the rest."""

    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    artifact_ids: tuple[str, ...] = ()
    output_meta: dict[str, Any] | None = None


class ToolsFinished(_Frozen):
    kind: Literal["tools_finished"] = "tools_finished"
    batch_id: str
    results: tuple[ToolResultSummary, ...]
    store_key: str = ""
    #: Where the first result sits in the stored list (a model turn stores its reply first).
    store_index: int = 0
    #: The results are lines of the transcript from `store_index` on (a model turn ran them).
    in_transcript: bool = False
    interrupted: bool = False
    changed_files: tuple[dict[str, Any], ...] = ()
    reads: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    #: How long each call took, by result index, as the batch measured it.
    ms: tuple[int, ...] = ()


class ModelReplied(_Frozen):
    kind: Literal["model_replied"] = "model_replied"
    call_id: str
    node_id: str
    reply: ModelReply
    reply_key: str = ""
    persisted_len: int | None = None
    #: The activity wrote the reply's items to the transcript from line `persisted_len` on.
    in_transcript: bool = False
    #: How long the call took, as the activity measured it (None in older histories).
    ms: int | None = None
    #: The results of the reads the same activity ran for the reply's calls, written to the
    #: transcript after the reply (their `store_index` counts from there). They answer the
    #: batch the engine plans from this reply in the same step, if it has exactly those calls.
    eager: ToolsFinished | None = None
    #: The manifest of the handoff the same activity stored for the output the reply submits
    #: (None: it stored none, and a completion writes it with `WriteHandoff`).
    handoff: dict[str, Any] | None = None
    #: The same activity stored the handoff of the output the reply submits and left its
    #: manifest out: the engine makes the manifest again from the submission it classifies.
    handoff_stored: bool = False


def stored_reply(fact: ModelReplied) -> list[StoredItemRef] | None:
    """Where the store holds the reply's items (`reply_items` order), or None."""
    from openflow.engine.protocol import reply_items

    count = len(reply_items(fact.reply))
    if fact.in_transcript and fact.persisted_len is not None:
        return reply_origins("", fact.persisted_len, count)
    if fact.reply_key:
        return reply_origins(fact.reply_key, 0, count)
    return None


def stored_result(fact: ToolsFinished, index: int) -> StoredItemRef | None:
    """Where the store holds the batch's `index`-th full result, or None."""
    if fact.in_transcript:
        return StoredItemRef(store_key="", index=fact.store_index + index)
    if fact.store_key:
        return StoredItemRef(store_key=fact.store_key, index=fact.store_index + index)
    return None


class ToolsFailed(_Frozen):
    """A batch's activity failed without results: the engine settles it by its posture (a
    read-only batch's calls fail; a side-effecting one is lost, or unknown without receipts)."""

    kind: Literal["tools_failed"] = "tools_failed"
    batch_id: str
    reason: str = ""
    #: The run reads a lost batch's receipt (false in runs recorded before receipts).
    receipts: bool = True


class ToolsOutcomeUnknown(_Frozen):
    """A side-effecting batch whose worker died: settled unknown, never re-sent."""

    kind: Literal["tools_unknown"] = "tools_unknown"
    batch_id: str
    reason: str = ""


class ToolsLost(_Frozen):
    """A side-effecting batch whose completion never arrived: its worker died, or the server
    restarted or the network cut while it ran. It may have run; its receipt may tell."""

    kind: Literal["tools_lost"] = "tools_lost"
    batch_id: str
    reason: str = ""


class ReceiptRead(_Frozen):
    """What the run store holds of a lost batch: the results its receipt recorded, or none."""

    kind: Literal["receipt_read"] = "receipt_read"
    batch_id: str
    finished: ToolsFinished | None = None
    #: Why there is no result (no receipt, or the store could not be read).
    reason: str = ""


class HandoffStored(_Frozen):
    kind: Literal["handoff_stored"] = "handoff_stored"
    node_id: str
    manifest: dict[str, Any] | None = None
    error: str | None = None


class InputGiven(_Frozen):
    kind: Literal["input"] = "input"
    node_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    #: An input to a failed or interrupted node retries it with the input as its message
    #: (OpenFlow's retry-with-message); False replays runs recorded when it was ignored.
    retry_failed: bool = Field(default=True, exclude=True)


class CallDecided(_Frozen):
    """One call's decision: allowed (with the `arguments` it runs with instead) or denied."""

    call_id: str
    allow: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None


class Grant(_Frozen):
    """Later calls of `tool` (with every path under `path_prefix`, when given) run without a
    pause for the rest of the run, as far as their node's approval mode lets them ask."""

    tool: str
    path_prefix: str | None = None
    #: The node whose approval made it, who made it and when (workflow time).
    node_id: str = ""
    by: str | None = None
    at_ms: int = 0

    @property
    def label(self) -> str:
        return self.tool if self.path_prefix is None else f"{self.tool}:{self.path_prefix}"


class ApprovalDecided(_Frozen):
    """A person decided a batch: `allow` for the whole of it, or for the calls `decisions`
    leave out; `remember` grants later calls; `by` says who."""

    kind: Literal["approval"] = "approval"
    approval_id: str
    allow: bool | None = None
    reason: str | None = None
    decisions: tuple[CallDecided, ...] = ()
    remember: Grant | None = None
    by: str | None = None


class GrantRevoked(_Frozen):
    """A person took a remembered grant back."""

    kind: Literal["revoke_grant"] = "revoke_grant"
    tool: str
    path_prefix: str | None = None
    by: str | None = None


class RetryRequested(_Frozen):
    kind: Literal["retry"] = "retry"
    node_id: str
    message: str | None = None


class MessageSent(_Frozen):
    kind: Literal["message"] = "message"
    node_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    #: A message taken while the node's last turn is in flight gets a turn of its own when
    #: that turn submits; False replays runs recorded when the submit won and it was lost.
    deliver_late: bool = Field(default=True, exclude=True)


class InterruptRequested(_Frozen):
    """A person interrupts one running node: its call or batch is cancelled (spec 5.5)."""

    kind: Literal["interrupt"] = "interrupt"
    node_id: str


class RevertRequested(_Frozen):
    """A person asks to undo one edit batch; checked like an action, done by an activity."""

    kind: Literal["revert"] = "revert"
    batch_id: str


class BatchReverted(_Frozen):
    """What undoing an edit batch did: the files restored, or why nothing was (`error`)."""

    kind: Literal["batch_reverted"] = "batch_reverted"
    batch_id: str
    paths: tuple[str, ...] = ()
    error: str | None = None


class Continuation(_Frozen):
    """The message a resume gives one node as its next user turn (OpenFlow's continuation)."""

    node_id: str
    text: str


class BudgetSet(_Frozen):
    """A person set the run's budget: the fields given replace the run's, the others stay."""

    kind: Literal["budget"] = "budget"
    max_cost_usd: float | None = None
    max_tokens: int | None = None


class ActionMalformed(_Frozen):
    """A signal whose payload did not parse: recorded as ignored, and it changes nothing else.

    `action` is the kind of action the signal carries (`input`, `approval`, ...); `payload`
    describes what came (its shape, never its text).
    """

    kind: Literal["action_malformed"] = "action_malformed"
    signal: str
    reason: str
    action: str = ""
    payload: str = ""


class TimerFired(_Frozen):
    kind: Literal["timer"] = "timer"
    node_id: str


class CancelRequested(_Frozen):
    kind: Literal["cancel"] = "cancel"


Fact = Annotated[
    ModelReplied
    | ModelFailed
    | ToolsFinished
    | ToolsFailed
    | ToolsOutcomeUnknown
    | ToolsLost
    | ReceiptRead
    | HandoffStored
    | InputGiven
    | ApprovalDecided
    | GrantRevoked
    | RetryRequested
    | MessageSent
    | InterruptRequested
    | BatchReverted
    | BudgetSet
    | ActionMalformed
    | TimerFired
    | CancelRequested,
    Field(discriminator="kind"),
]


# --- intents ----------------------------------------------------------------------------


class CallModel(_Frozen):
    kind: Literal["call_model"] = "call_model"
    call_id: str
    node_id: str
    model_attempt: int
    request: AgentRequest
    delta: TranscriptDelta
    purpose: Literal["node", "repair", "review", "subagent"] = "node"


class RunTools(_Frozen):
    kind: Literal["run_tools"] = "run_tools"
    batch_id: str
    node_id: str
    calls: tuple[ToolCall, ...]
    side_effects: bool
    model_attempt: int = 1

    @property
    def attempts(self) -> int:
        """How often the batch's activity is tried: a batch with side effects is never sent
        twice (a lost one is looked up instead); a read-only one three times."""
        return 1 if self.side_effects else 3


class WriteHandoff(_Frozen):
    kind: Literal["write_handoff"] = "write_handoff"
    node_id: str
    format: Literal["json", "markdown"]
    output: Any


class ReadReceipt(_Frozen):
    """Look up the receipt a lost side-effecting batch left in the run store (read-only)."""

    kind: Literal["read_receipt"] = "read_receipt"
    batch_id: str
    node_id: str


class CancelWork(_Frozen):
    """Cancel in-flight activities (by call or batch id): stop and interrupts."""

    kind: Literal["cancel_work"] = "cancel_work"
    ids: tuple[str, ...]
    #: The backoff timers to cancel with them; None cancels every timer (a stop).
    timers: tuple[str, ...] | None = None


class SleepUntil(_Frozen):
    kind: Literal["sleep_until"] = "sleep_until"
    node_id: str
    wake_at_ms: int


Intent = Annotated[
    CallModel | RunTools | WriteHandoff | CancelWork | SleepUntil | ReadReceipt,
    Field(discriminator="kind"),
]


class Awaiting(_Frozen):
    """What the run waits on from people."""

    inputs: tuple[str, ...] = ()
    approvals: tuple[str, ...] = ()
    retryables: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.inputs or self.approvals or self.retryables)


class Plan(_Frozen):
    """The reducer's answer: the new snapshot, new events and what to do next."""

    snapshot: RunSnapshot
    events: tuple[RunEvent, ...] = ()
    intents: tuple[Intent, ...] = ()
    awaiting: Awaiting = Awaiting()
    done: bool = False
    status: RunStatus = "running"
    rejected: str | None = None
    #: Facts the engine already holds for its next step: a batch planned here that a model
    #: turn's eager reads answered, instead of a batch to run.
    facts: tuple[Fact, ...] = ()


__all__ = [
    "ActionMalformed",
    "ApprovalDecided",
    "Awaiting",
    "CallDecided",
    "CallModel",
    "CancelRequested",
    "BatchReverted",
    "CancelWork",
    "Continuation",
    "InterruptRequested",
    "RevertRequested",
    "ChangeEvidencePacket",
    "ChildRun",
    "AwaitingInput",
    "BudgetSet",
    "Conversation",
    "Done",
    "Failed",
    "Interrupted",
    "NodePhase",
    "Ready",
    "StoringHandoff",
    "CounterName",
    "Counters",
    "DeltaItem",
    "Fact",
    "Grant",
    "GrantRevoked",
    "HandoffStored",
    "InFlightCall",
    "InputGiven",
    "Intent",
    "MessageSent",
    "ModelFailed",
    "ModelReplied",
    "NodeState",
    "PendingBatch",
    "Plan",
    "RetryRequested",
    "RunSnapshot",
    "RunStatus",
    "RunTools",
    "SleepUntil",
    "StoredItemRef",
    "in_place",
    "pack_refs",
    "reply_origins",
    "stored_reply",
    "stored_result",
    "SubagentRecord",
    "TimerFired",
    "ToolResultSummary",
    "ToolsFailed",
    "ToolsFinished",
    "ToolsOutcomeUnknown",
    "ToolsLost",
    "ReceiptRead",
    "ReadReceipt",
    "TranscriptDelta",
    "WriteHandoff",
    "canonical_sha256",
    "working_copy",
    "child_timer_key",
]
