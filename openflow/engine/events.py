"""Run events: the durable, observable record of a run (OpenFlow spec 9.1).

Every event is a frozen model with a `type` discriminator (the spec's variant name) and
snake_case fields. `seq` (gap-free, from 1) and `at_ms` (workflow time) are assigned when an
event is appended to the run's log, so the engine builds events with the defaults and the
shell stamps them. Events travel through Temporal history and the `events` query, so they are
a durable contract: add optional fields with defaults, never rename.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from openflow.engine.copies import replaced
from openflow.engine.request import UsageReport
from openflow.engine.transcript import Attachment, ToolCall

ChatRole = Literal["system", "thinking", "user", "assistant"]
SubagentStatus = Literal["declared", "active", "completed", "failed"]
FileOp = Literal["create", "update", "delete", "rename"]
SuggestionCategory = Literal["prompt", "tools", "workflow", "model", "coordination"]
Phase = Literal["ai_invoke", "tool", "tool-wait"]

DEFAULT_DENIAL_REASON = "Tool call denied by the user."


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)


# --- supporting models ------------------------------------------------------------------


class ChatLogMessage(_Model):
    """One message of a node's chat log as the projection shows it (spec 9.2 ChatMessage)."""

    role: ChatRole
    content: str = ""
    attachments: tuple[Attachment, ...] = ()
    id: str | None = None
    streaming: bool = False
    tool_call_id: str | None = Field(default=None, alias="toolCallId")
    message_kind: Literal["node_completed"] | None = Field(default=None, alias="messageKind")
    created_at_ms: int | None = Field(default=None, alias="createdAtMs")
    completed_at_ms: int | None = Field(default=None, alias="completedAtMs")
    elapsed_since_previous_ms: int | None = Field(default=None, alias="elapsedSincePreviousMs")


class PendingToolApproval(_Model):
    """A tool batch waiting for a person's decision; `tool_call` is the batch's first call."""

    approval_id: str = Field(alias="approvalId")
    node_id: str = Field(alias="nodeId")
    node_label: str = Field(default="", alias="nodeLabel")
    tool_call: ToolCall = Field(alias="toolCall")
    tier: Literal["read", "write"] = "write"
    tool_calls: tuple[ToolCall, ...] = Field(default=(), alias="toolCalls")

    def batch_calls(self) -> tuple[ToolCall, ...]:
        """Every call the decision covers (the first call alone when the batch list is empty)."""
        return self.tool_calls or (self.tool_call,)


class FileChangeRecord(_Model):
    """One file a tool created, updated, deleted or renamed."""

    path: str
    op: FileOp
    rename_to: str | None = None
    diff_summary: str | None = None
    timestamp_ms: int = 0
    batch_id: str | None = None


class FileSnapshot(_Model):
    """A file as it was before an edit batch touched it (`content` None when it did not exist).

    `after_sha256` is what the batch left at `path` (None: the batch deleted it or moved it to
    `rename_to`); `after_known` is False in batches recorded before it was kept.
    """

    path: str
    existed: bool = True
    content: str | None = None
    sha256: str | None = None
    after_known: bool = False
    after_sha256: str | None = None
    rename_to: str | None = None


class EditBatch(_Model):
    """The files one tool call mutated, with their before-snapshots, so the edit can be undone."""

    batch_id: str
    node_id: str
    tool_call_id: str | None = None
    tool_name: str | None = None
    timestamp_ms: int = 0
    snapshots: tuple[FileSnapshot, ...] = ()


class SubagentSummary(_Model):
    """A subagent a node can call, as announced or declared."""

    id: str
    name: str
    purpose: str = ""
    status: SubagentStatus = "declared"


class PostRunSuggestion(_Model):
    """One improvement the post-run review proposes (spec 12)."""

    id: str
    category: SuggestionCategory
    target_node_id: str | None = Field(
        default=None, validation_alias=AliasChoices("target_node_id", "targetNodeId")
    )
    title: str
    evidence: str
    recommendation: str


class ReportOutput(_Model):
    """One node's final output in the run report."""

    node_id: str
    output: Any = None


class RunReport(_Model):
    """What a completed run produced (spec 9.4, snake_case)."""

    workflow_id: str
    outputs: tuple[ReportOutput, ...] = ()
    read_calls: int = 0
    redundant_reads: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    estimated_cost_usd: float | None = None
    suggestions: tuple[PostRunSuggestion, ...] = ()
    suggestions_error: str | None = None

    @field_validator("outputs")
    @classmethod
    def _sorted_by_node(cls, outputs: tuple[ReportOutput, ...]) -> tuple[ReportOutput, ...]:
        return tuple(sorted(outputs, key=lambda item: item.node_id))


# --- events -----------------------------------------------------------------------------


#: The validation context of an event our code builds (`_Event.__init__`).
_BUILDING: dict[str, bool] = {"building": True}


class _Event(_Model):
    """One run event. Built by our code it refuses a field it does not define (`extra="forbid"`,
    which mypy checks too); read back from durable data (Temporal history, a carried snapshot,
    the `events` query) it ignores one, so a field dropped since a history was recorded never
    stops it from replaying."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    seq: int = 0
    at_ms: int = 0

    def __init__(self, /, **data: Any) -> None:
        self.__pydantic_validator__.validate_python(data, self_instance=self, context=_BUILDING)

    # Validation (model_validate, a TypeAdapter, the data converter) must not come through
    # here: marked as pydantic's own initializer, it stays the constructor alone.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _ignore_unknown(cls, data: Any, info: ValidationInfo) -> Any:
        """Drop the fields this event does not define, unless our code is building it."""
        if info.context is _BUILDING or not isinstance(data, dict):
            return data
        known = cls.model_fields
        if all(key in known for key in data):
            return data
        return {key: value for key, value in data.items() if key in known}


class NodeQueued(_Event):
    type: Literal["NodeQueued"] = "NodeQueued"
    node_id: str
    label: str = ""
    model_attempt: int = 0


class NodeStarted(_Event):
    type: Literal["NodeStarted"] = "NodeStarted"
    node_id: str
    label: str = ""
    model_attempt: int = 0


class ChatMessage(_Event):
    """A whole chat message: assistant text not streamed, a person's words, a system notice."""

    type: Literal["ChatMessage"] = "ChatMessage"
    node_id: str
    role: ChatRole
    content: str
    attachments: tuple[Attachment, ...] = ()
    message_id: str | None = None
    tool_call_id: str | None = None
    message_kind: Literal["node_completed"] | None = None


class ChatMessageDelta(_Event):
    type: Literal["ChatMessageDelta"] = "ChatMessageDelta"
    node_id: str
    message_id: str
    role: Literal["assistant", "thinking"] = "assistant"
    delta: str = ""
    finalize: bool = False


class NodeAwaitingInput(_Event):
    type: Literal["NodeAwaitingInput"] = "NodeAwaitingInput"
    node_id: str
    label: str = ""
    context: str = ""
    is_initial: bool = False
    structured_input: dict[str, Any] | None = None


class ToolCallProposed(_Event):
    type: Literal["ToolCallProposed"] = "ToolCallProposed"
    node_id: str
    label: str = ""
    tool_call: ToolCall


class ToolApprovalRequested(_Event):
    type: Literal["ToolApprovalRequested"] = "ToolApprovalRequested"
    request: PendingToolApproval


class ToolApproved(_Event):
    type: Literal["ToolApproved"] = "ToolApproved"
    approval_id: str
    node_id: str
    tool_call_id: str
    tool_name: str
    #: Who decided (absent in older runs and when nobody was named).
    by: str | None = None
    #: The arguments the call runs with instead of the model's, when a person edited it.
    arguments: dict[str, Any] | None = None
    #: The remembered grant that approved the call without a pause (`tool` or `tool:prefix`).
    grant: str | None = None


class ToolDenied(_Event):
    type: Literal["ToolDenied"] = "ToolDenied"
    approval_id: str
    node_id: str
    tool_call_id: str
    tool_name: str
    reason: str = DEFAULT_DENIAL_REASON
    by: str | None = None


class GrantAdded(_Event):
    """A person let later calls of `tool` (under `path_prefix`) run without asking."""

    type: Literal["GrantAdded"] = "GrantAdded"
    node_id: str
    tool: str
    path_prefix: str | None = None
    by: str | None = None


class GrantRevoked(_Event):
    """A remembered grant was taken back: matching calls ask again."""

    type: Literal["GrantRevoked"] = "GrantRevoked"
    tool: str
    path_prefix: str | None = None
    by: str | None = None


class ToolStarted(_Event):
    type: Literal["ToolStarted"] = "ToolStarted"
    node_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolRetrying(_Event):
    type: Literal["ToolRetrying"] = "ToolRetrying"
    node_id: str
    tool_call_id: str
    tool_name: str
    attempt: int
    backoff_ms: int


class ToolUpdated(_Event):
    """Streaming tool output; `content` is the output so far."""

    type: Literal["ToolUpdated"] = "ToolUpdated"
    node_id: str
    tool_call_id: str
    tool_name: str
    content: str
    output_meta: dict[str, Any] | None = None


class ToolArtifactCreated(_Event):
    type: Literal["ToolArtifactCreated"] = "ToolArtifactCreated"
    node_id: str
    artifact_id: str
    tool_name: str
    path: str
    size_bytes: int


class FileChanged(_Event):
    type: Literal["FileChanged"] = "FileChanged"
    node_id: str
    record: FileChangeRecord


class EditBatchRecorded(_Event):
    type: Literal["EditBatchRecorded"] = "EditBatchRecorded"
    node_id: str
    batch: EditBatch


class EditBatchReverted(_Event):
    """A person undid an edit batch: its files are as they were before it (or, with `error`,
    nothing was changed and the error says why)."""

    type: Literal["EditBatchReverted"] = "EditBatchReverted"
    node_id: str
    label: str = ""
    batch_id: str
    paths: tuple[str, ...] = ()
    error: str | None = None


class ToolCompleted(_Event):
    type: Literal["ToolCompleted"] = "ToolCompleted"
    node_id: str
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    output_meta: dict[str, Any] | None = None
    artifact_ids: tuple[str, ...] = ()


class NodeCompleted(_Event):
    type: Literal["NodeCompleted"] = "NodeCompleted"
    node_id: str
    label: str = ""
    output: Any = None
    handoff: dict[str, Any] | None = None


class NodeFailed(_Event):
    """A terminal run failure attributed to a node."""

    type: Literal["NodeFailed"] = "NodeFailed"
    node_id: str
    label: str = ""
    error: str


class NodeInterrupted(_Event):
    type: Literal["NodeInterrupted"] = "NodeInterrupted"
    node_id: str
    label: str = ""


class NodeErrored(_Event):
    """A node failed but the run waits for a retry (a retryable pause)."""

    type: Literal["NodeErrored"] = "NodeErrored"
    node_id: str
    label: str = ""
    error: str
    model_attempt: int = 0


class Finished(_Event):
    type: Literal["Finished"] = "Finished"
    report: RunReport


class Aborted(_Event):
    type: Literal["Aborted"] = "Aborted"


class Error(_Event):
    """A fatal run error, unless the message starts with `ignored `."""

    type: Literal["Error"] = "Error"
    message: str

    def is_fatal(self) -> bool:
        """Whether the error ends the run."""
        return not self.message.startswith("ignored ")


class SubagentsDeclared(_Event):
    type: Literal["SubagentsDeclared"] = "SubagentsDeclared"
    node_id: str
    summaries: tuple[SubagentSummary, ...] = ()


class SubagentStarted(_Event):
    type: Literal["SubagentStarted"] = "SubagentStarted"
    node_id: str
    subagent_id: str


class SubagentCompleted(_Event):
    type: Literal["SubagentCompleted"] = "SubagentCompleted"
    node_id: str
    subagent_id: str


class SubagentFailed(_Event):
    type: Literal["SubagentFailed"] = "SubagentFailed"
    node_id: str
    subagent_id: str
    error: str


class PhaseTimed(_Event):
    type: Literal["PhaseTimed"] = "PhaseTimed"
    phase: Phase
    label: str
    node_id: str | None = None
    duration_ms: int


class UsageReported(_Event):
    type: Literal["UsageReported"] = "UsageReported"
    node_id: str
    usage: UsageReport
    model: str = ""
    max_context_tokens: int | None = None


class AiInvokeFailed(_Event):
    type: Literal["AiInvokeFailed"] = "AiInvokeFailed"
    node_id: str
    label: str = ""
    error: str


class OutputRepairStarted(_Event):
    type: Literal["OutputRepairStarted"] = "OutputRepairStarted"
    node_id: str
    model: str


class OutputRepairSucceeded(_Event):
    type: Literal["OutputRepairSucceeded"] = "OutputRepairSucceeded"
    node_id: str
    model: str


class OutputRepairFailed(_Event):
    type: Literal["OutputRepairFailed"] = "OutputRepairFailed"
    node_id: str
    reason: str


class ActionIgnored(_Event):
    """A signal that matched no pending pause or live node, or did not parse; it changes
    nothing else. `signal` names the signal when its payload did not parse (then `action`
    holds only the action's kind and a description of the payload's shape)."""

    type: Literal["ActionIgnored"] = "ActionIgnored"
    action: dict[str, Any]
    reason: str
    signal: str | None = None


class RunStarted(_Event):
    """The run began; the entrypoint text shows as a user message on `entry_node_id`."""

    type: Literal["RunStarted"] = "RunStarted"
    workflow_id: str
    workflow_name: str = ""
    entrypoint_text: str = ""
    entry_node_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    #: The folder the run's tools work in, and its project (the `--project` folder), if any.
    execution_cwd: str | None = None
    project_id: str | None = None


class RunResumed(_Event):
    """A new execution continues the run from its checkpoint."""

    type: Literal["RunResumed"] = "RunResumed"
    from_status: str


class NodeRetrying(_Event):
    """A transient model error; the node's next call is scheduled after `backoff_ms`."""

    type: Literal["NodeRetrying"] = "NodeRetrying"
    node_id: str
    label: str = ""
    attempt: int
    backoff_ms: int
    error: str


class ToolOutcomeUnknown(_Event):
    """A side-effecting tool batch was lost in a crash: the call may or may not have run."""

    type: Literal["ToolOutcomeUnknown"] = "ToolOutcomeUnknown"
    node_id: str
    tool_call_id: str
    tool_name: str


RunEvent = Annotated[
    NodeQueued
    | NodeStarted
    | ChatMessage
    | ChatMessageDelta
    | NodeAwaitingInput
    | ToolCallProposed
    | ToolApprovalRequested
    | ToolApproved
    | ToolDenied
    | ToolStarted
    | ToolRetrying
    | ToolUpdated
    | ToolArtifactCreated
    | FileChanged
    | EditBatchRecorded
    | EditBatchReverted
    | ToolCompleted
    | NodeCompleted
    | NodeFailed
    | NodeInterrupted
    | NodeErrored
    | Finished
    | Aborted
    | Error
    | SubagentsDeclared
    | SubagentStarted
    | SubagentCompleted
    | SubagentFailed
    | PhaseTimed
    | UsageReported
    | AiInvokeFailed
    | OutputRepairStarted
    | OutputRepairSucceeded
    | OutputRepairFailed
    | ActionIgnored
    | RunStarted
    | RunResumed
    | NodeRetrying
    | ToolOutcomeUnknown
    | GrantAdded
    | GrantRevoked,
    Field(discriminator="type"),
]

RunEventAdapter: TypeAdapter[list[RunEvent]] = TypeAdapter(list[RunEvent])


def stamped(event: RunEvent, *, seq: int, at_ms: int) -> RunEvent:
    """The event as appended to the run's log: numbered and timed."""
    return replaced(event, {"seq": seq, "at_ms": at_ms})


__all__ = [
    "DEFAULT_DENIAL_REASON",
    "Aborted",
    "ActionIgnored",
    "AiInvokeFailed",
    "ChatLogMessage",
    "ChatMessage",
    "ChatMessageDelta",
    "ChatRole",
    "EditBatch",
    "EditBatchRecorded",
    "EditBatchReverted",
    "Error",
    "FileChangeRecord",
    "FileChanged",
    "FileOp",
    "FileSnapshot",
    "Finished",
    "GrantAdded",
    "GrantRevoked",
    "NodeAwaitingInput",
    "NodeCompleted",
    "NodeErrored",
    "NodeFailed",
    "NodeInterrupted",
    "NodeQueued",
    "NodeRetrying",
    "NodeStarted",
    "OutputRepairFailed",
    "OutputRepairStarted",
    "OutputRepairSucceeded",
    "PendingToolApproval",
    "Phase",
    "PhaseTimed",
    "PostRunSuggestion",
    "ReportOutput",
    "RunEvent",
    "RunEventAdapter",
    "RunReport",
    "RunResumed",
    "RunStarted",
    "SubagentCompleted",
    "SubagentFailed",
    "SubagentStarted",
    "SubagentStatus",
    "SubagentSummary",
    "SubagentsDeclared",
    "SuggestionCategory",
    "ToolApprovalRequested",
    "ToolApproved",
    "ToolArtifactCreated",
    "ToolCallProposed",
    "ToolCompleted",
    "ToolDenied",
    "ToolOutcomeUnknown",
    "ToolRetrying",
    "ToolStarted",
    "ToolUpdated",
    "UsageReport",
    "UsageReported",
    "stamped",
]
