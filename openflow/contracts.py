"""What crosses Temporal: the workflow's input and result and every activity's input and output.

These travel through history, so they are durable contracts: add optional fields with
defaults; never rename or remove one. Activity and handler names are explicit and fixed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import quote

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from openflow.engine.events import EditBatch
from openflow.engine.headers import HeaderRefs
from openflow.engine.policy import HARNESS_SUBMIT
from openflow.engine.recipes import InputRecipe
from openflow.engine.request import AgentRequest, ModelReply, ProviderFailure
from openflow.engine.spec import Budget, CallableAgent, CostUsd, TokenCount, Workflow
from openflow.engine.state import (
    Continuation,
    Intent,
    RunSnapshot,
    ToolResultSummary,
    TranscriptDelta,
)
from openflow.engine.transcript import Attachment, ToolCall
from openflow.engine.wire import OmitDefaults, omit_defaults, without_defaults

WORKFLOW_NAME = "OpenFlowRun"
ACTIVITY_PREPARE = "prepare_run"
ACTIVITY_MODEL_TURN = "model_turn"
ACTIVITY_TOOL_BATCH = "tool_batch"
ACTIVITY_HANDOFF = "write_handoff"
ACTIVITY_RECEIPT = "read_receipt"
ACTIVITY_REVERT = "revert_batch"
#: The child workflow that carries a run's notice to its webhooks, and its delivery activity.
WORKFLOW_NOTICE = "OpenFlowNotice"
ACTIVITY_WEBHOOK = "deliver_webhook"
ACTIVITY_LIST_WEBHOOKS = "list_webhooks"
#: Tool batches of a run on task queue Q are scheduled on Q + this suffix, the worker's tool
#: pool, so model calls (I/O-bound, hundreds at once) and tool work (bounded) never share slots.
TOOL_QUEUE_SUFFIX = "-tools"
#: How long a workflow task may take before another worker gets it, set when a run starts,
#: resumes or continues as new. Temporal's default, 10 s, is what a worker killed mid-task
#: used to cost. It must hold a full replay of an execution's history on a loaded worker
#: (about 2 s at 2,000 events on 2 busy cores, where executions continue as new); see README
#: "Recovery".
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=5)


def tool_task_queue(task_queue: str) -> str:
    """The task queue of the tool pool that serves runs on `task_queue`."""
    return task_queue + TOOL_QUEUE_SUFFIX


#: The error type of an activity whose worker cannot see the run's folder (retry elsewhere).
RUN_FOLDER_MISSING = "RunFolderMissing"

SIGNAL_INPUT = "submit_user_input"
SIGNAL_APPROVAL = "submit_tool_approval"
SIGNAL_RETRY = "retry_node"
SIGNAL_MESSAGE = "send_message"
SIGNAL_INTERRUPT = "interrupt_node"
UPDATE_ACT = "act"
QUERY_STATE = "state"
QUERY_EVENTS = "events"
QUERY_CHECKPOINT = "checkpoint"
QUERY_EVENTS_ORIGIN = "events_origin"

SA_STATUS = "OpenFlowStatus"
SA_WORKFLOW_ID = "OpenFlowWorkflowId"
SA_WORKFLOW_NAME = "OpenFlowWorkflowName"
SA_AWAITING = "OpenFlowAwaiting"
SA_TENANT = "OpenFlowTenant"


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


WebhookEvent = Literal["paused", "completed", "failed", "stopped"]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = ("paused", "completed", "failed", "stopped")


class WebhookRef(_Model):
    """A settings.json webhook by its place in the list, with the events it wants.

    The URL and the secret stay in settings.json: the delivery activity reads them there.
    """

    index: int
    events: list[WebhookEvent] = Field(default_factory=list)


class RunInput(OmitDefaults, _Model):
    """How a run starts (or continues as new, or resumes from a checkpoint)."""

    #: "" for the run's workflow id (a run's start leaves it out; a schedule's runs' ids are
    #: made by Temporal).
    run_id: str = ""
    workflow: Workflow
    entrypoint: str = ""
    project_dir: str | None = None
    provider_id: str | None = None
    tenant: str = ""
    profiles: dict[str, dict[str, Any]] | None = None
    active_provider: str | None = None
    snapshot: RunSnapshot | None = None
    resume: bool = False
    events: list[dict[str, Any]] = Field(default_factory=list)
    pending_intents: list[Intent] = Field(default_factory=list)
    headers_sent: list[str] = Field(default_factory=list)
    #: The digests of the header parts the run's start stored (`PrepareResult.header_parts`).
    header_parts: list[str] = Field(default_factory=list)
    execution_dir: str | None = None
    state: dict[str, Any] | None = None
    first_seq: int = 1
    previous_run_id: str | None = None
    webhooks: list[WebhookRef] = Field(default_factory=list)
    #: The entrypoint's attachments: references to files in the run store, never their bytes.
    attachments: list[Attachment] = Field(default_factory=list)
    #: A resume's message for one node, its next user turn (`openflow runs resume --message`).
    continuation: Continuation | None = None
    #: The run's own budget, over the workflow's `settings.budget` field by field.
    budget: Budget | None = None
    #: The digest of `workflow` as its client stored it (`workflow_key`) ("" when it did
    #: not): `prepare_run` then reads it from the store instead of history.
    workflow_stored: str = ""
    #: Whether `workflow` travels with a node's agent that is much like an earlier node's as
    #: a reference to it (`lean_workflow`); never in JSON (a run recorded before the patch
    #: `agent-refs` continues as new without them).
    agent_refs: bool = Field(default=True, exclude=True)

    @field_serializer("workflow", mode="wrap")
    def _workflow(self, value: Workflow | None, handler: SerializerFunctionWrapHandler) -> Any:
        """The workflow without its fields at their defaults (they read back as them)."""
        return lean_workflow(value, handler(value), agent_refs=self.agent_refs)

    @field_validator("workflow", mode="before")
    @classmethod
    def _full_workflow(cls, value: Any) -> Any:
        return full_workflow(value)


#: What a node of most workflows carries for nothing: its kind (there is one) and, in a
#: workflow made by code, a place at the canvas's origin and its id as its label.
_NODE_KIND = "agent"
_ORIGIN = {"x": 0.0, "y": 0.0}


def _zero(value: Any) -> bool:
    """0.0 itself (not -0.0, which reads back as another float)."""
    return type(value) is float and repr(value) == "0.0"


def _lean_node(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    position = node.get("position")
    at_origin = (
        isinstance(position, dict)
        and position.keys() == _ORIGIN.keys()
        and all(map(_zero, position.values()))
    )
    return {
        k: v
        for k, v in node.items()
        if not (k == "kind" and v == _NODE_KIND)
        and not (k == "position" and at_origin)
        and not (k == "label" and v == node.get("id"))
    }


def _full_node(node: Any) -> Any:
    if not isinstance(node, dict) or ("kind" in node and "position" in node and "label" in node):
        return node
    return {"label": node.get("id"), "kind": _NODE_KIND, "position": dict(_ORIGIN), **node}


def lean_workflow(value: Workflow | None, data: Any, *, agent_refs: bool = False) -> Any:
    """A workflow's JSON as history carries it: without its fields at their defaults, and its
    nodes without their kind, a label that is their id and a position at the canvas's origin
    (`full_workflow` puts them back). With `agent_refs`, a node's agent that shares fields
    with an earlier node's travels as that node's id and what differs (`_agent_refs`)."""
    if value is None:
        return data
    whole = data
    data = without_defaults(value, data)
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        return data
    lean = {**data, "nodes": [_lean_node(node) for node in nodes]}
    whole_nodes = whole.get("nodes") if isinstance(whole, dict) else None
    if not agent_refs or not isinstance(whole_nodes, list) or len(whole_nodes) != len(nodes):
        return lean
    referring = _agent_refs(lean["nodes"], whole_nodes)
    if referring is None:
        return lean
    shorter = {**lean, "nodes": referring}
    try:
        same = Workflow.model_validate(full_workflow(shorter)) == value
    except ValueError:
        same = False
    return shorter if same else lean


#: What a node's agent carries, in a workflow's JSON, when it is an earlier node's with some
#: fields of its own: `[<that node's id>, {<the fields that differ>}]` (`[<id>]`: the same).
#: A node's agent is an object in the workflow's format, so a list reads as nothing else.
AgentRef = list[Any]


def _agent_refs(nodes: list[Any], whole: list[Any]) -> list[Any] | None:
    """`nodes` (lean) with each agent that is shorter as a reference to an earlier node's
    agent given inline (the one sharing most fields, the earliest of those); None when
    none is. `whole` are the nodes with every field, for a field the base sets and the
    node leaves at its default."""
    inline: list[tuple[str, dict[str, Any]]] = []
    out: list[Any] = []
    changed = False
    for node, full in zip(nodes, whole, strict=True):
        agent = node.get("agent") if isinstance(node, dict) else None
        full_agent = full.get("agent") if isinstance(full, dict) else None
        if not isinstance(agent, dict) or not isinstance(full_agent, dict):
            out.append(node)
            continue
        ref = _agent_ref(agent, full_agent, inline)
        if ref is None:
            inline.append((str(node.get("id")), agent))
            out.append(node)
        else:
            out.append({**node, "agent": ref})
            changed = True
    return out if changed else None


def _agent_ref(
    agent: dict[str, Any], full: dict[str, Any], inline: list[tuple[str, dict[str, Any]]]
) -> AgentRef | None:
    """`agent` as a reference to one of the `inline` agents, when that is shorter."""
    best: tuple[int, str, dict[str, Any]] | None = None
    for base_id, base in inline:
        if any(key not in agent and key not in full for key in base):
            continue
        shared = sum(1 for key, item in base.items() if key in agent and agent[key] == item)
        if shared and (best is None or shared > best[0]):
            best = (shared, base_id, base)
    if best is None:
        return None
    _, base_id, base = best
    differ = {key: item for key, item in agent.items() if key not in base or base[key] != item}
    differ.update({key: full[key] for key in base if key not in agent})
    ref: AgentRef = [base_id, differ] if differ else [base_id]
    if len(_compact(ref)) >= len(_compact(agent)):
        return None
    return ref


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def full_workflow(data: Any) -> Any:
    """A workflow's JSON as `lean_workflow` left it, with each node's kind, label and
    position back, and each agent given by reference made whole."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        return data
    if any(isinstance(node, dict) and isinstance(node.get("agent"), list) for node in nodes):
        nodes = _agents_whole(nodes)
    return {**data, "nodes": [_full_node(node) for node in nodes]}


def _agents_whole(nodes: list[Any]) -> list[Any]:
    """`nodes` with each agent given as a reference (`AgentRef`) made whole from the node it
    names (whose own agent is given inline); a reference to anything else stays as it is,
    for the workflow's validation to refuse."""
    inline = {
        node.get("id"): node["agent"]
        for node in nodes
        if isinstance(node, dict) and isinstance(node.get("agent"), dict)
    }
    out = []
    for node in nodes:
        ref = node.get("agent") if isinstance(node, dict) else None
        if isinstance(ref, list) and 1 <= len(ref) <= 2 and isinstance(ref[0], str):
            base = inline.get(ref[0])
            differ = ref[1] if len(ref) == 2 else {}
            if isinstance(base, dict) and isinstance(differ, dict):
                node = {**node, "agent": {**base, **differ}}
        out.append(node)
    return out


class RunResult(OmitDefaults, _Model):
    """How a run ended (no `error` when none). `run_id` is left out ("") when it is the
    run's workflow id, as it is for every run but one resumed under another id."""

    run_id: str = ""
    status: Literal["completed", "failed", "stopped"]
    outputs: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class PrepareInput(OmitDefaults, _Model):
    """A run's start. `workflow` is None when its client stored it (`workflow_stored`, the
    digest of what is stored at `workflow_key`)."""

    run_id: str
    workflow: Workflow | None = None
    project_dir: str | None = None
    provider_id: str | None = None
    workflow_stored: str = ""

    @field_serializer("workflow", mode="wrap")
    def _workflow(self, value: Workflow | None, handler: SerializerFunctionWrapHandler) -> Any:
        """The workflow without its fields at their defaults (they read back as them)."""
        return handler(value) if value is None else without_defaults(value, handler(value))


#: The run's own folder under the run store's home, the run's id as `*` (`PrepareResult.run_home`).
RUN_HOME_FOLDER = "/runs/*/workspace"


class PrepareResult(OmitDefaults, _Model):
    """The workflow as the run will see it, its providers' kinds, the tools it offers.

    `agents` are the saved agents (agents.json) its nodes may call, snapshotted for the run.

    The profiles themselves (without keys) are kept in the run store, not in history.

    `workflow` is left out (None) when it is the run's own with only `active_provider` filled
    in as its provider (`settled_workflow`): history need not carry the workflow twice more.
    """

    workflow: Workflow | None = None
    #: Each profile's kind (`{"kind": ...}`); in JSON a profile whose kind is its id is `{}`.
    profiles: dict[str, dict[str, Any]]
    #: None (left out) when it is the one profile of `profiles` (`provider`): results
    #: recorded before always name it.
    active_provider: str | None = None
    #: Sorted; in JSON a known set of them travels as its name (`TOOL_SETS`).
    tool_names: list[str]
    #: "" when it is the run's project folder (`PrepareInput.project_dir`) or `run_folder`
    #: or `run_home` names it.
    execution_dir: str = ""
    #: The run's own folder as the run store makes every run's, the run's id as `*`
    #: (`<home>/runs/*/workspace`, `<workspaces>/*`): `execution_dir` is it with the run's id.
    run_folder: str = ""
    #: `<home>` when the run's own folder is `<home>/runs/<run id>/workspace` (`RUN_HOME_FOLDER`),
    #: instead of `run_folder` (results before name `run_folder`).
    run_home: str = ""
    #: MCP tools whose server is marked `read`: approval treats their calls as reads.
    read_tools: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    agents: list[CallableAgent] = Field(default_factory=list)
    #: The webhooks of settings.json when the run started (no URLs, no secrets).
    webhooks: list[WebhookRef] = Field(default_factory=list)
    #: The digests of the request header parts stored under `HEADER_PARTS_KEY`
    #: (`openflow.engine.headers`): calls send these by reference. Results since
    #: `header_parts_digest` leave them out.
    header_parts: list[str] = Field(default_factory=list)
    #: One digest for the set of parts stored (`parts_digest`): the workflow foretells the
    #: same set from its own start (`headers.expected_parts`) and checks it against this.
    header_parts_digest: str = ""
    #: The stored workflow the input named is missing or not the one named: the run's start
    #: is asked again with the workflow itself (nothing else in this result is filled in).
    workflow_missing: bool = False

    @field_serializer("profiles")
    def _profiles(self, profiles: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """A profile whose kind is its id as `{}` (results before always name the kind)."""
        return {pid: {} if data == {"kind": pid} else data for pid, data in profiles.items()}

    @field_validator("profiles", mode="before")
    @classmethod
    def _profile_kinds(cls, profiles: Any) -> Any:
        if not isinstance(profiles, dict):
            return profiles
        return {pid: data or {"kind": pid} for pid, data in profiles.items()}

    def folder(self, run_id: str) -> str:
        """The run's execution folder ("" for its project): `execution_dir`, or `run_folder`
        or `run_home`'s with the run's id."""
        if self.run_home:
            return self.run_home + RUN_HOME_FOLDER.replace("*", run_id, 1)
        if self.run_folder:
            return self.run_folder.replace("*", run_id, 1)
        return self.execution_dir

    @property
    def provider(self) -> str:
        """The run's provider: `active_provider`, or the one profile when it is left out."""
        if self.active_provider is None and len(self.profiles) == 1:
            return next(iter(self.profiles))
        return self.active_provider or ""

    @field_serializer("tool_names")
    def _tool_names(self, names: list[str]) -> list[str]:
        """The names with the largest known set among them as its name (`TOOL_SETS`)."""
        listed = set(names)
        if len(listed) != len(names):
            return names
        for name, known in _SETS_LARGEST_FIRST:
            if listed.issuperset(known):
                return [name, *sorted(listed.difference(known))]
        return names

    @field_validator("tool_names", mode="before")
    @classmethod
    def _known_tool_names(cls, names: Any) -> Any:
        if not isinstance(names, list) or not any(str(n).startswith("@") for n in names):
            return names
        found: set[str] = set()
        for name in names:
            known = TOOL_SETS.get(name) if str(name).startswith("@") else None
            if str(name).startswith("@") and known is None:
                raise ValueError(f"unknown tool set {name!r}")
            found.update(known or (name,))
        return sorted(found)


#: Sets of tool names a start's result names instead of listing (the worker's own tools, as
#: `tools.registry.default_registry` offers them). A recorded result names its set for good:
#: add a set under a new name, never change or remove one.
TOOL_SETS: dict[str, frozenset[str]] = {
    "@builtin-1": frozenset(
        {
            "apply_patch",
            "ast_edit",
            "ast_grep",
            "bash",
            "edit",
            "find",
            "ls",
            "openflow_update_todo_list",
            "read",
            "search",
            "write",
        }
    ),
}
_SETS_LARGEST_FIRST = sorted(TOOL_SETS.items(), key=lambda item: (-len(item[1]), item[0]))


def settled_workflow(workflow: Workflow, provider_id: str) -> Workflow:
    """The run's workflow as its start settles it when nothing but its provider is filled in
    (what a `PrepareResult` without a workflow means)."""
    if workflow.settings.provider_id == provider_id:
        return workflow
    settings = workflow.settings.model_copy(update={"provider_id": provider_id})
    return workflow.model_copy(update={"settings": settings})


#: Where a run's start stores its request header parts, by digest.
HEADER_PARTS_KEY = "header-parts.json"


def parts_digest(digests: Iterable[str]) -> str:
    """The name of a set of header parts: a digest of their digests, sorted."""
    return hashlib.sha256(",".join(sorted(digests)).encode()).hexdigest()[:16]


def workflow_digest(data: bytes) -> str:
    """The name of a stored workflow: a digest of its bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def workflow_key(digest: str) -> str:
    """Where the run's workflow is stored as its client started it (`RunInput.workflow_stored`
    names its digest), so `prepare_run`'s input need not carry it again."""
    return f"workflows/{digest}.json"


class TurnHandoff(OmitDefaults, _Model):
    """What a model turn needs to store the handoff of a submission: the node's handoff
    format and, for Markdown, its template's headings (the output schema is the request's)."""

    format: Literal["json", "markdown"]
    headings: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _format_alone(cls, data: Any) -> Any:
        return {"format": data} if isinstance(data, str) else data

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A handoff of nothing but its format as its format (`"json"`)."""
        data = OmitDefaults._omit_defaults(self, handler)
        return self.format if data == {"format": self.format} else data


class ModelTurnInput(OmitDefaults, _Model):
    """One model call. `run_id` may be left empty: the activity takes its workflow id; so may
    `call_id` when the activity's id names it (`activity_call_id`), and `node_id` when the
    call id names it (`model:<node>-<n>`, see `call_node`)."""

    run_id: str = ""
    call_id: str = ""
    node_id: str = ""
    model_attempt: int = 1
    turn_index: int = 0
    header_digest: str
    header: AgentRequest | None = None
    #: The header without the parts the run's start stored (`header` is then None, so a
    #: worker that knows nothing of parts finds no header, reports it missing and gets it
    #: whole), and the references to them.
    header_rest: AgentRequest | None = None
    header_refs: HeaderRefs | None = None
    #: The digest of the node's header set the run's start stored (`engine.headers.header_set`):
    #: with it, only the header's `input` travels (`header_input`), not `header_rest`.
    header_set: str = ""
    header_input: dict[str, Any] | None = None
    #: How the call's input is made of what the run store holds (`engine.recipes`): then
    #: `header_set` carries `RECIPE_MARK` and `header_input` is the input the recipe starts
    #: from (None when it starts from a stored part).
    header_recipe: InputRecipe | None = None
    delta: TranscriptDelta = Field(default_factory=lambda: TranscriptDelta(base_len=0))
    #: "" when it is the one the header names (`AgentRequest.provider_id`): the activity
    #: takes that one.
    provider_id: str = ""
    profile: dict[str, Any] = Field(default_factory=dict)
    #: Run the reply's calls at once when all are reads the node lets through (see `tools`).
    eager: bool = True
    #: What the call is for: a conversation's turn, or the post-run review (whose evidence
    #: the activity completes from the store). Calls recorded without it are the review when
    #: their node is the review's (`openflow.activities.model_turn.turn_purpose`).
    purpose: Literal["node", "review"] = "node"
    #: The node's handoff: a reply that submits a valid output stores it in the same turn.
    handoff: TurnHandoff | None = None

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The review's call leaves out that it runs no reads at once: a review never does
        (the activity reads `eager` only for a node's turn)."""
        data = OmitDefaults._omit_defaults(self, handler)
        if isinstance(data, dict) and self.purpose == "review" and not self.eager:
            data.pop("eager", None)
        return data

    @field_serializer("header", "header_rest", mode="wrap")
    def _header(self, value: AgentRequest | None, handler: SerializerFunctionWrapHandler) -> Any:
        """The header without its fields at their defaults (they read back as them)."""
        data = handler(value)
        if value is None:
            return data
        return omit_defaults(value, data)


class ToolBatchInput(OmitDefaults, _Model):
    """One tool batch. Empty `run_id` / `execution_dir` are filled in by the activity."""

    run_id: str = ""
    batch_id: str
    node_id: str
    calls: list[ToolCall]
    execution_dir: str = ""
    side_effects: bool
    max_attempts: int = 3
    backoff_ms: int = 1000


class ToolResultWire(ToolResultSummary):
    """A tool result in an activity's answer; a model turn's results leave out the call's id and
    name, which are its reply's calls in order."""

    tool_call_id: str = ""
    tool_name: str = ""


class ToolBatchResult(OmitDefaults, _Model):
    results: list[ToolResultWire]
    #: Where the full results are stored, from `store_index` on; empty means the key its batch
    #: implies (`batch_key`), or, for a model turn's reads, the transcript after its reply.
    store_key: str = ""
    store_index: int = 0
    interrupted: bool = False
    changed_files: list[dict[str, Any]] = Field(default_factory=list)
    reads: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    #: How long each call took, in milliseconds, in call order (the engine's `PhaseTimed` tool).
    ms: list[int] = Field(default_factory=list)


def _segment(text: str) -> str:
    return quote(text, safe="-_.")


#: What every model call's id begins with (`model:<node>-<n>`).
CALL_PREFIX = "model:"


def turn_activity_id(call_id: str) -> str | None:
    """The activity id of the model turn that makes the call `call_id` (`turn-activity-ids`):
    the call's id without `CALL_PREFIX` (never a number: Temporal's own ids are); None for a
    call id of another shape, which the turn's input carries."""
    rest = call_id.removeprefix(CALL_PREFIX)
    return rest if rest != call_id and "-" in rest else None


def activity_call_id(activity_id: str) -> str:
    """The call a model turn makes whose input leaves its id out: its activity id's."""
    return CALL_PREFIX + activity_id


def call_node(call_id: str) -> str:
    """The conversation a model call id names (`model:<node>-<n>`), or ""."""
    prefix, _, rest = call_id.partition(":")
    node, _, n = rest.rpartition("-")
    return node if prefix == "model" and n.isdigit() else ""


def transcript_key(node_id: str) -> str:
    """A conversation's transcript: one TranscriptItem a line."""
    return f"transcripts/{_segment(node_id)}.jsonl"


def batch_key(batch_id: str) -> str:
    """Where a tool batch stores its full results."""
    return f"batches/{_segment(batch_id)}.json"


def receipt_key(batch_id: str) -> str:
    """Where a side-effecting batch records what it reported, after its full results."""
    return f"receipts/{_segment(batch_id)}.json"


class ReceiptInput(_Model):
    """Which lost batch to look up; the run id is the workflow's when empty."""

    batch_id: str
    run_id: str = ""


class RevertInput(_Model):
    """One edit batch to undo in the run's execution folder, with its before-snapshots."""

    run_id: str
    execution_dir: str
    batch: EditBatch


class RevertResult(OmitDefaults, _Model):
    """The files a revert restored, or why it changed nothing (`error` names the file)."""

    paths: list[str] = Field(default_factory=list)
    error: str | None = None


class ReceiptResult(OmitDefaults, _Model):
    """The result a lost batch recorded in its receipt, or None when it left none."""

    result: ToolBatchResult | None = None


#: The wire each provider kind speaks unless its profile names another transport
#: (`activities.providers.base.wire_for`): what a call to a provider of that kind asks for.
KIND_WIRES: dict[str, str] = {
    "openai": "responses",
    "anthropic": "anthropic_messages",
    "chat_completions": "chat_completions",
    "bedrock": "bedrock_converse",
    "scripted": "scripted",
}


class TurnAsked(BaseModel):
    """What a model call asked for, as its activity and its workflow both know it: a lean
    result (`ModelTurnResult.lean`) leaves out what of its reply is just that."""

    model_config = ConfigDict(frozen=True)

    #: The wire of the provider's kind (`KIND_WIRES`); "" when not known (never lean).
    wire: str
    #: The model the request names.
    model: str
    #: The transcript's length once the call's delta is stored.
    persisted_len: int


def turn_asked(inp: ModelTurnInput, kind: Any, model: str) -> TurnAsked:
    """What the call `inp` to a provider of `kind` for `model` asked for."""
    return TurnAsked(
        wire=KIND_WIRES.get(kind, "") if isinstance(kind, str) else "",
        model=model,
        persisted_len=inp.delta.base_len + len(inp.delta.items),
    )


class ModelTurnResult(OmitDefaults, _Model):
    """A model call's outcome. Its reply's items, then the full results of the reads it ran
    (`tools`), are the transcript's lines from `persisted_len` on (`reply_key` is set only in
    histories of workers that stored replies on their own).

    A lean result (`lean`) is one whose reply has no `wire`: it leaves out what the call asked
    for (`TurnAsked`): the wire, the model when it is the one asked for, a cost of 0.0 and
    `persisted_len`, and the name of each call of the submit tool (`HARNESS_SUBMIT`; a call
    of a lean reply without a name is one; one of an output and an empty message as the
    output alone, `_lean_submit`), and its usage of counts alone as a list of them
    (`_lean_usage`). The workflow puts them back from the call it made (`restored`).
    """

    reply: ModelReply | None = None
    failure: ProviderFailure | None = None
    reply_key: str = ""
    persisted_len: int | None = None
    refs_missing: bool = False
    #: The reply's calls, run in the same activity when all of them were `eager_tools`.
    tools: ToolBatchResult | None = None
    #: How long the model call took, in milliseconds (the engine's `PhaseTimed` ai_invoke).
    ms: int | None = None
    #: The manifest of the handoff the turn stored for the output its reply submitted.
    handoff: dict[str, Any] | None = None
    #: The turn stored that handoff and leaves its manifest out: the engine makes it again
    #: from the submission it classifies (`ModelReplied.handoff_stored`).
    #: Results since `lean-turn-results` leave it out too: the reply says whether it did.
    handoff_stored: bool = False
    #: A lean result's reply as it travels (under `reply`), until `restored` makes it whole.
    lean_reply: dict[str, Any] | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _lean_reply(cls, data: Any) -> Any:
        reply = data.get("reply") if isinstance(data, dict) else None
        if isinstance(reply, dict) and "wire" not in reply:
            data = {k: v for k, v in data.items() if k != "reply"}
            data["lean_reply"] = reply
        return data

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = OmitDefaults._omit_defaults(self, handler)
        if self.lean_reply is not None and isinstance(data, dict):
            data = {"reply": self.lean_reply, **data}
        return data

    def lean(self, asked: TurnAsked) -> ModelTurnResult:
        """This result as history carries it: its reply without what the call asked for; the
        result itself when its reply is not what was asked for (another wire, a transcript
        of another length, a cost unknown)."""
        reply = self.reply
        usage = reply.usage if reply is not None else None
        if (
            reply is None
            or not asked.wire
            or reply.wire != asked.wire
            or self.persisted_len != asked.persisted_len
            or (usage is not None and usage.cost_usd is None)
        ):
            return self
        data = reply.model_dump(mode="json")
        del data["wire"]
        if reply.model == asked.model:
            data.pop("model", None)
        else:
            data["model"] = reply.model
        cost = usage.cost_usd if usage is not None else None
        if _zero(cost) and isinstance(data.get("usage"), dict):
            del data["usage"]["cost_usd"]
            data["usage"] = _lean_usage(data["usage"])
        calls = data.get("tool_calls")
        if isinstance(calls, list):
            # The submit tool, which ends most nodes' turns, goes without its name.
            data["tool_calls"] = [_lean_submit(call) for call in calls]
        return self.model_copy(update={"reply": None, "lean_reply": data, "persisted_len": None})

    def restored(self, asked: TurnAsked) -> ModelTurnResult:
        """The result whole again, its reply as the activity had it (a result that is not
        lean, recorded by any worker, is itself)."""
        if self.lean_reply is None:
            return self
        data = {"wire": asked.wire, "model": asked.model, **self.lean_reply}
        usage = data.get("usage")
        if isinstance(usage, list):
            usage = data["usage"] = _whole_usage(usage)
        if isinstance(usage, dict) and "cost_usd" not in usage:
            data["usage"] = {**usage, "cost_usd": 0.0}
        calls = data.get("tool_calls")
        if isinstance(calls, list):
            data["tool_calls"] = [_whole_submit(call) for call in calls]
        return self.model_copy(
            update={
                "reply": ModelReply.model_validate(data),
                "lean_reply": None,
                "persisted_len": asked.persisted_len,
            }
        )


#: The counts of a lean reply's usage that travels as a list of them, in this order (trailing
#: zeros left out): a usage of no other field, at no cost, whose total is their sum.
_USAGE_COUNTS = (
    "prompt_tokens",
    "completion_tokens",
    "cached_input_tokens",
    "cache_creation_input_tokens",
)


def _lean_usage(usage: dict[str, Any]) -> dict[str, Any] | list[int]:
    """A lean reply's usage (its zero cost left out) as the list of its counts, when it has
    nothing else."""
    if not usage or not set(usage) <= set(_USAGE_COUNTS):
        return usage
    counts = [usage.get(key, 0) for key in _USAGE_COUNTS]
    if not all(type(n) is int for n in counts):
        return usage
    while counts and counts[-1] == 0:
        counts.pop()
    return counts


def _whole_usage(counts: list[Any]) -> dict[str, Any]:
    """A usage as `_lean_usage` left it, as the object it was (its zero counts left out)."""
    return {key: n for key, n in zip(_USAGE_COUNTS, counts, strict=False) if n != 0}


#: The key of a submit call's message to the person following the run.
_SUBMIT_MESSAGE = "assistant_message"


def _lean_submit(call: Any) -> Any:
    """A call of a lean reply: a submit call without its name; one whose arguments are an
    output and an empty message as that output alone (`"output"` in place of `"arguments"`,
    which no call of a reply has)."""
    if not isinstance(call, dict) or call.get("name") != HARNESS_SUBMIT:
        return call
    lean = {k: v for k, v in call.items() if k != "name"}
    args = call.get("arguments")
    if (
        isinstance(args, dict)
        and args.keys() == {"output", _SUBMIT_MESSAGE}
        and args[_SUBMIT_MESSAGE] == ""
        and "output" not in lean
    ):
        del lean["arguments"]
        lean["output"] = args["output"]
    return lean


def _whole_submit(call: Any) -> Any:
    """A call of a lean reply as the activity had it (`_lean_submit`)."""
    if not isinstance(call, dict) or "name" in call:
        return call
    whole = {**call, "name": HARNESS_SUBMIT}
    if "output" in whole and "arguments" not in whole:
        whole["arguments"] = {"output": whole.pop("output"), _SUBMIT_MESSAGE: ""}
    return whole


class HandoffInput(_Model):
    run_id: str
    node_id: str
    format: Literal["json", "markdown"]
    output: Any


class HandoffResult(_Model):
    manifest: dict[str, Any] | None = None
    error: str | None = None


#: The longest `by` (who decided) an action may carry.
MAX_BY_CHARS = 200


def _printable(value: str) -> bool:
    return not any(ord(ch) < 32 or ord(ch) == 127 for ch in value)


def _name(value: str) -> str:
    if not value.strip() or not _printable(value):
        raise ValueError("give a name of printable characters, or leave it out")
    return value


#: Who decided an approval: a person's name, the CLI's `--by`, the API's tenant.
DecidedBy = Annotated[str, Field(max_length=MAX_BY_CHARS), AfterValidator(_name)]


class CallDecision(_Model):
    """One call's decision in an approval: allowed (with edited `arguments`) or denied."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    call_id: str = Field(min_length=1, max_length=1000)
    allow: bool
    reason: str | None = None
    #: The arguments an allowed call runs with instead of the model's.
    arguments: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _edit_allowed_only(self) -> CallDecision:
        if self.arguments is not None and not self.allow:
            raise ValueError("arguments: only an allowed call can be edited")
        return self


class ToolGrant(_Model):
    """Approve later calls of `tool` (under `path_prefix` when given) for the rest of the run."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    tool: str = Field(min_length=1, max_length=200)
    path_prefix: str | None = Field(default=None, max_length=4096)

    @field_validator("tool")
    @classmethod
    def _tool_name(cls, value: str) -> str:
        if not value.strip() or not _printable(value):
            raise ValueError("give a tool name of printable characters")
        return value

    @field_validator("path_prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or not _printable(value)):
            raise ValueError("give a path prefix of printable characters, or leave it out")
        return value


def check_decisions(decisions: list[CallDecision]) -> None:
    """Raise ValueError when a call is decided twice."""
    seen: set[str] = set()
    for decision in decisions:
        if decision.call_id in seen:
            raise ValueError(f"decisions: call {decision.call_id!r} is decided twice")
        seen.add(decision.call_id)


class Action(_Model):
    """One human action, as the `act` update and the signals carry it (CONTRACT 7 and 8).

    An approval decides its whole batch with `allow` (and `reason` for a denial); `decisions`
    decide calls one by one, `allow` then deciding the calls they leave out. `remember`
    grants later calls of a tool; `by` says who decided. A budget action sets the run's
    `max_cost_usd` and/or `max_tokens` (the others stay).
    """

    kind: Literal[
        "input", "approval", "retry", "message", "interrupt", "revert", "budget", "revoke_grant"
    ]
    node_id: str | None = None
    text: str | None = None
    approval_id: str | None = None
    allow: bool | None = None
    reason: str | None = None
    message: str | None = None
    decisions: list[CallDecision] = Field(default_factory=list)
    remember: ToolGrant | None = None
    by: DecidedBy | None = None
    #: The edit batch a `revert` undoes (`editBatches[].batch_id` of the state).
    batch_id: str | None = None
    max_cost_usd: CostUsd | None = None
    max_tokens: TokenCount | None = None

    @field_validator("max_cost_usd", mode="before")
    @classmethod
    def _whole_usd(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    #: The grant a `revoke_grant` action takes back (as `remember` gave it).
    tool: str | None = None
    path_prefix: str | None = None

    @model_validator(mode="after")
    def _approval_fields(self) -> Action:
        if self.kind != "approval" and (self.decisions or self.remember is not None):
            field = "decisions" if self.decisions else "remember"
            raise ValueError(f"{field}: only an approval carries it")
        if self.kind != "budget" and (self.max_cost_usd is not None or self.max_tokens is not None):
            field = "max_cost_usd" if self.max_cost_usd is not None else "max_tokens"
            raise ValueError(f"{field}: only a budget action carries it")
        if self.kind != "revoke_grant" and (self.tool is not None or self.path_prefix is not None):
            field = "tool" if self.tool is not None else "path_prefix"
            raise ValueError(f"{field}: only a revoke_grant action carries it")
        if self.kind == "revoke_grant" and self.tool is not None:
            ToolGrant(tool=self.tool, path_prefix=self.path_prefix)
        check_decisions(self.decisions)
        return self

    def decision_for(self, call_id: str) -> tuple[bool | None, str | None]:
        """Whether the call is allowed (None: undecided) and the reason of a denial."""
        for decision in self.decisions:
            if decision.call_id == call_id:
                return decision.allow, decision.reason if decision.reason else self.reason
        return self.allow, self.reason

    #: Files given with an input answer: references to the run store, never their bytes.
    attachments: list[Attachment] = Field(default_factory=list)


class ActResult(_Model):
    """The `act` update's answer: the action was applied; the run's status after it."""

    accepted: bool = True
    status: str


class RevertAnswer(ActResult):
    """The `act` update's answer to a `revert`: the files restored, or why none were."""

    paths: list[str] = Field(default_factory=list)
    error: str | None = None


class EventsOrigin(_Model):
    """The `events_origin` query's answer: where an execution's events start, and the
    execution that holds the earlier ones."""

    first_seq: int
    previous_run_id: str | None = None


class Checkpoint(_Model):
    """The `checkpoint` query's answer: what a resumed execution starts from (as JSON)."""

    input: dict[str, Any]
    snapshot: dict[str, Any]
    state: dict[str, Any]
    events: list[dict[str, Any]]
    first_seq: int
    previous_run_id: str


class PendingPause(OmitDefaults, _Model):
    """One thing a paused run waits for from a person, as a notice describes it."""

    kind: Literal["input", "approval", "retry"]
    node_id: str
    approval_id: str | None = None
    question: str | None = None
    tools: list[str] = Field(default_factory=list)
    error: str | None = None


class RunNotice(_Model):
    """What a webhook is told (the delivery activity adds the run page's URL)."""

    run_id: str
    workflow_id: str
    status: str
    event: WebhookEvent
    awaiting: list[PendingPause] = Field(default_factory=list)


class NoticeInput(_Model):
    """The notice child workflow's input: one notice for the webhooks at these places."""

    notice: RunNotice
    hooks: list[int] = Field(default_factory=list)


class WebhookInput(_Model):
    """One delivery: the notice, to the webhook at `hook` in settings.json."""

    notice: RunNotice
    hook: int


class ListWebhooksInput(_Model):
    """Nothing: the webhooks come from the worker's settings.json."""


class ListWebhooksResult(_Model):
    webhooks: list[WebhookRef] = Field(default_factory=list)


class WebhookResult(_Model):
    #: "delivered", or "skipped" when settings.json no longer has that webhook for the event.
    outcome: Literal["delivered", "skipped"]
    http_status: int | None = None


__all__ = [
    "CALL_PREFIX",
    "HEADER_PARTS_KEY",
    "RUN_HOME_FOLDER",
    "TOOL_SETS",
    "parts_digest",
    "settled_workflow",
    "ACTIVITY_LIST_WEBHOOKS",
    "ACTIVITY_WEBHOOK",
    "ListWebhooksInput",
    "ListWebhooksResult",
    "NoticeInput",
    "PendingPause",
    "RunNotice",
    "WEBHOOK_EVENTS",
    "WORKFLOW_NOTICE",
    "WebhookEvent",
    "WebhookInput",
    "WebhookRef",
    "WebhookResult",
    "RUN_FOLDER_MISSING",
    "activity_call_id",
    "call_node",
    "transcript_key",
    "turn_activity_id",
    "ToolResultWire",
    "batch_key",
    "receipt_key",
    "ACTIVITY_RECEIPT",
    "ACTIVITY_REVERT",
    "RevertInput",
    "RevertResult",
    "SIGNAL_INTERRUPT",
    "TOOL_QUEUE_SUFFIX",
    "tool_task_queue",
    "WORKFLOW_TASK_TIMEOUT",
    "ReceiptInput",
    "ReceiptResult",
    "ACTIVITY_HANDOFF",
    "ACTIVITY_MODEL_TURN",
    "ACTIVITY_PREPARE",
    "ACTIVITY_TOOL_BATCH",
    "ActResult",
    "RevertAnswer",
    "Action",
    "CallDecision",
    "Checkpoint",
    "DecidedBy",
    "check_decisions",
    "MAX_BY_CHARS",
    "ToolGrant",
    "EventsOrigin",
    "HandoffInput",
    "HandoffResult",
    "ModelTurnInput",
    "ModelTurnResult",
    "PrepareInput",
    "PrepareResult",
    "QUERY_CHECKPOINT",
    "QUERY_EVENTS",
    "QUERY_EVENTS_ORIGIN",
    "QUERY_STATE",
    "RunInput",
    "RunResult",
    "SA_AWAITING",
    "SA_STATUS",
    "SA_TENANT",
    "SA_WORKFLOW_ID",
    "SA_WORKFLOW_NAME",
    "SIGNAL_APPROVAL",
    "SIGNAL_INPUT",
    "SIGNAL_MESSAGE",
    "SIGNAL_RETRY",
    "ToolBatchInput",
    "ToolBatchResult",
    "TurnHandoff",
    "UPDATE_ACT",
    "WORKFLOW_NAME",
    "KIND_WIRES",
    "TurnAsked",
    "full_workflow",
    "lean_workflow",
    "turn_asked",
]
