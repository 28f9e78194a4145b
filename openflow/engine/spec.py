"""OpenFlow's workflow file format (spec section 1) as pydantic models.

The JSON keys are OpenFlow's, mixed snake_case and camelCase: every field reads its key and the
aliases the original accepts, and writes the key the original writes. Unknown keys are kept, so
a file loaded and saved again loses nothing.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from openflow.engine.copies import json_copy
from openflow.engine.errors import WorkflowFormatError
from openflow.engine.limits import (
    MAX_EDGES,
    MAX_NODES,
    MAX_WORKFLOW_FILE_BYTES,
    check_json_text,
)

ApprovalMode = Literal["read_only", "always_ask", "write", "yolo"]
HandoffFormat = Literal["json", "markdown", "legacy"]
McpContextKind = Literal["resource", "prompt"]

MAX_BACKOFF_MS = 30_000
MCP_CONTEXT_DEFAULT_MAX_BYTES = 65_536
MCP_CONTEXT_MAX_BYTES = 1_048_576

DEFAULT_SYSTEM_PROMPT = "You are a focused AI agent in a node workflow."
DEFAULT_TASK_PROMPT = "Complete this node's configured handoff."
DEFAULT_MARKDOWN_TEMPLATE = (
    "# Handoff\n"
    "\n"
    "## Summary\n"
    "<!-- Required: the result in a few sentences -->\n"
    "\n"
    "## Findings\n"
    "<!-- Required: findings, decisions or completed work -->\n"
    "\n"
    "## Files\n"
    "<!-- Files or artifacts that matter -->\n"
    "\n"
    "## Risks\n"
    "<!-- Unknowns, blockers or follow-up concerns -->\n"
    "\n"
    "## Recommended Next Step\n"
    "<!-- One concrete action for the next node -->\n"
)
DEFAULT_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}
MARKDOWN_SUBMISSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "markdown": {
            "type": "string",
            "description": (
                "Completed Markdown handoff. Preserve every heading from the configured template."
            ),
        }
    },
    "required": ["markdown"],
}
SAVED_AGENT_PURPOSE = "Saved agent"

_M = TypeVar("_M", bound=BaseModel)

_U8_MAX = 2**8 - 1
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


def _is_true(value: object) -> bool:
    return value is True


def _is_false(value: object) -> bool:
    return value is False


def _is_none(value: object) -> bool:
    return value is None


def _is_empty(value: object) -> bool:
    return isinstance(value, list) and not value


def _key(name: str, *also: str) -> dict[str, Any]:
    """Field keyword arguments: write `name`, read `name` or any of `also`."""
    if not also:
        return {"alias": name}
    return {"alias": name, "validation_alias": AliasChoices(name, *also)}


class SpecModel(BaseModel):
    """Base of every file-format model: reads by key or field name, writes OpenFlow's keys.

    Unknown keys are kept, so a file loaded and saved again loses nothing.
    """

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, extra="allow")


class Position(SpecModel):
    """Where a node sits on the canvas."""

    x: float
    y: float


class Edge(SpecModel):
    """A dependency: `to` runs after `from` and receives its output."""

    id: str
    from_: str = Field(alias="from")
    to: str


class NodeToolConfig(SpecModel):
    """Approval mode and human-input switches; defaults serialize to `{}`."""

    approval_mode: ApprovalMode | None = Field(
        default=None, exclude_if=_is_none, **_key("approvalMode")
    )
    allow_structured_user_input: bool = Field(
        default=True, exclude_if=_is_true, **_key("allowStructuredUserInput")
    )
    allow_free_text_user_input: bool = Field(
        default=True, exclude_if=_is_true, **_key("allowFreeTextUserInput")
    )

    @property
    def effective_approval_mode(self) -> ApprovalMode:
        """The approval mode in force: absent means `write`."""
        return self.approval_mode or "write"


class JsonHandoff(SpecModel):
    """The node's schema-valid output is stored as `HANDOFF.json`."""

    format: Literal["json"] = "json"


class MarkdownHandoff(SpecModel):
    """The node submits Markdown that keeps every heading of `template`."""

    format: Literal["markdown"] = "markdown"
    template: str = DEFAULT_MARKDOWN_TEMPLATE


class LegacyHandoff(SpecModel):
    """No handoff artifact (direct chat)."""

    format: Literal["legacy"] = "legacy"


HandoffSpec = Annotated[
    JsonHandoff | MarkdownHandoff | LegacyHandoff, Field(discriminator="format")
]


class McpResourceSelection(SpecModel):
    """One MCP resource frozen into a node's context when a run starts."""

    server_id: str = Field(**_key("serverId", "server_id"))
    uri: str
    max_bytes: int = Field(default=MCP_CONTEXT_DEFAULT_MAX_BYTES, **_key("maxBytes", "max_bytes"))
    subscribe: bool = False


class McpPromptSelection(SpecModel):
    """One rendered MCP prompt frozen into a node's context when a run starts."""

    server_id: str = Field(**_key("serverId", "server_id"))
    name: str
    arguments: dict[str, str] = Field(default_factory=dict)
    max_bytes: int = Field(default=MCP_CONTEXT_DEFAULT_MAX_BYTES, **_key("maxBytes", "max_bytes"))


class McpContextSnapshot(SpecModel):
    """MCP content resolved at run start; the run sees this, never the live server."""

    kind: McpContextKind
    server_id: str = Field(**_key("serverId", "server_id"))
    source: str
    title: str | None = Field(default=None, exclude_if=_is_none)
    description: str | None = Field(default=None, exclude_if=_is_none)
    mime_type: str | None = Field(default=None, exclude_if=_is_none, **_key("mimeType"))
    content: str = ""
    original_size_bytes: int = Field(default=0, **_key("originalSizeBytes"))
    included_size_bytes: int = Field(default=0, **_key("includedSizeBytes"))
    truncated: bool = False
    error: str | None = Field(default=None, exclude_if=_is_none)
    #: Where the run store keeps `content` when it is too large to travel in history (the
    #: model-turn activity reads it back into the request); `content` is then empty.
    content_ref: str | None = Field(default=None, exclude_if=_is_none, **_key("contentRef"))


class AgentNodeConfig(SpecModel):
    """What one node asks of its model: prompts, schema, handoff, tools (spec 1.4)."""

    system_prompt: str
    task_prompt: str
    model: str = ""
    output_schema: Any
    handoff: HandoffSpec = Field(default_factory=JsonHandoff)
    auto_start: bool = True
    tools: NodeToolConfig = Field(default_factory=NodeToolConfig)
    callable_agents: list[str] = Field(default_factory=list, **_key("callableAgents"))
    allow_all_callable_agents: bool = Field(default=False, **_key("allowAllCallableAgents"))
    reasoning_effort: str | None = Field(
        default=None, **_key("reasoningEffort", "reasoning_effort")
    )
    reasoning_budget_tokens: int | None = Field(
        default=None, ge=0, le=_U32_MAX, **_key("reasoningBudgetTokens", "reasoning_budget_tokens")
    )
    provider_id: str | None = Field(default=None, **_key("providerId"))
    request_user_input: bool = Field(
        default=False, **_key("requestUserInput", "request_user_input")
    )
    conversation_mode: bool = Field(default=False, **_key("conversationMode", "conversation_mode"))
    mcp_resources: list[McpResourceSelection] = Field(
        default_factory=list, **_key("mcpResources", "mcp_resources")
    )
    mcp_prompts: list[McpPromptSelection] = Field(
        default_factory=list, **_key("mcpPrompts", "mcp_prompts")
    )
    mcp_context_snapshots: list[McpContextSnapshot] = Field(
        default_factory=list,
        exclude_if=_is_empty,
        **_key("mcpContextSnapshots", "mcp_context_snapshots"),
    )


class Node(SpecModel):
    """One agent node of the graph."""

    id: str
    label: str
    kind: Literal["agent"]
    position: Position
    agent: AgentNodeConfig

    @field_validator("kind", mode="before")
    @classmethod
    def _accept_legacy_kind(cls, value: object) -> object:
        return "agent" if value == "Agent" else value


class RetryPolicy(SpecModel):
    """Transient-error retries: `max_attempts` counts retries after the first failure."""

    MAX_BACKOFF_MS: ClassVar[int] = MAX_BACKOFF_MS

    max_attempts: int = Field(default=3, ge=0, le=_U8_MAX)
    backoff_ms: int = Field(default=1000, ge=0, le=_U64_MAX)


class WorkflowSchedule(SpecModel):
    """A cron schedule for the workflow (stored; runs are started by whoever reads it)."""

    cron: str
    enabled: bool = True
    timezone: str = ""


class PlanModeConfig(SpecModel):
    """Plan -> Execute mode: the node whose output freezes the plan (spec 11)."""

    evidence_source_node_id: str = Field(**_key("evidenceSourceNodeId"))


#: The largest budget a run takes: a limit, not a price list.
MAX_BUDGET_USD = 1_000_000.0
MAX_BUDGET_TOKENS = 10**15

CostUsd = Annotated[float, Field(gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False, strict=True)]
TokenCount = Annotated[int, Field(gt=0, le=MAX_BUDGET_TOKENS, strict=True)]


class Budget(SpecModel):
    """What a run may spend on model calls: estimated USD, tokens (input plus output), or both.

    The workflow setting `budget` (an extension key, written only when set) or a run's own
    (`openflow run --max-cost`, `POST /runs {budget}`), which overrides it field by field.
    """

    model_config = ConfigDict(
        populate_by_name=True, serialize_by_alias=True, extra="forbid", strict=False
    )

    max_cost_usd: CostUsd | None = Field(default=None, exclude_if=_is_none, **_key("maxCostUsd"))
    max_tokens: TokenCount | None = Field(default=None, exclude_if=_is_none, **_key("maxTokens"))

    @field_validator("max_cost_usd", mode="before")
    @classmethod
    def _whole_usd(cls, value: object) -> object:
        # A whole number of dollars is a number too; strict floats would refuse it.
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def over(self, other: Budget | None) -> Budget:
        """This budget with `other`'s fields put over it where `other` sets them."""
        if other is None:
            return self
        return Budget(
            max_cost_usd=(
                other.max_cost_usd if other.max_cost_usd is not None else self.max_cost_usd
            ),
            max_tokens=other.max_tokens if other.max_tokens is not None else self.max_tokens,
        )

    @property
    def empty(self) -> bool:
        return self.max_cost_usd is None and self.max_tokens is None


class WorkflowSettings(SpecModel):
    """Workflow-wide settings (spec 1.6), plus `strictLayers` and `budget`."""

    shared_context: str = ""
    schedule: WorkflowSchedule | None = None
    budget: Budget | None = Field(default=None, exclude_if=_is_none)
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy)
    provider_id: str | None = None
    reasoning_effort: str | None = Field(
        default=None, **_key("reasoningEffort", "reasoning_effort")
    )
    reasoning_budget_tokens: int | None = Field(
        default=None, ge=0, le=_U32_MAX, **_key("reasoningBudgetTokens", "reasoning_budget_tokens")
    )
    fast_mode: bool = Field(default=False, **_key("fastMode", "fast_mode"))
    forward_upstream_reads: bool = Field(default=True, **_key("forwardUpstreamReads"))
    plan_mode: PlanModeConfig | None = Field(default=None, **_key("planMode", "plan_mode"))
    output_repair_model: str | None = Field(
        default=None, **_key("outputRepairModel", "output_repair_model")
    )
    strict_layers: bool = Field(
        default=False, exclude_if=_is_false, **_key("strictLayers", "strict_layers")
    )
    """OpenFlow's layer barrier (spec 2.2): layer N+1 waits for every node of layer N.

    Off by default: a node starts as soon as all its direct parents have an output. Written
    only when on, so OpenFlow files round-trip unchanged.
    """


class Workflow(SpecModel):
    """A workflow file: a DAG of agent nodes plus settings (spec 1.3)."""

    id: str
    name: str
    nodes: list[Node]
    edges: list[Edge]
    settings: WorkflowSettings = Field(default_factory=WorkflowSettings)

    @classmethod
    def load_json(cls, text: str | bytes) -> Workflow:
        """Parse a workflow file's text; raises WorkflowFormatError in one readable line.

        A text over max_workflow_file_bytes, or nested deeper than max_json_depth, raises
        LimitExceeded before it is parsed.
        """
        size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "replace"))
        if size > MAX_WORKFLOW_FILE_BYTES.value:
            raise MAX_WORKFLOW_FILE_BYTES.error(
                "the workflow file", size, "split the workflow or shorten its prompts"
            )
        return cls.from_json_dict(_parse_json(text, "the workflow file"))

    @classmethod
    def from_json_dict(cls, data: object) -> Workflow:
        """Build a workflow from parsed JSON; raises WorkflowFormatError in one readable line.

        More nodes or edges than max_nodes / max_edges raise LimitExceeded.
        """
        if not isinstance(data, dict):
            raise WorkflowFormatError(
                "not an OpenFlow workflow: expected a JSON object with id, name, nodes and "
                f"edges, got {_json_type(data)}"
            )
        for key, limit in (("nodes", MAX_NODES), ("edges", MAX_EDGES)):
            items = data.get(key)
            if isinstance(items, list) and len(items) > limit.value:
                # Counted before the models are built, which would take seconds.
                fix = "split it into smaller workflows"
                raise limit.error("the workflow", len(items), fix, verb="has")
        return _validate(cls, data, "not an OpenFlow workflow")

    def to_json_dict(self) -> dict[str, Any]:
        """The workflow as OpenFlow writes it, unknown keys included."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self, indent: int | None = 2) -> str:
        """The workflow file's text (UTF-8, trailing newline)."""
        return json.dumps(self.to_json_dict(), indent=indent, ensure_ascii=False) + "\n"

    def find_node(self, node_id: str) -> Node | None:
        """The first node with this id, or None."""
        return next((node for node in self.nodes if node.id == node_id), None)

    @property
    def node_ids(self) -> list[str]:
        """Node ids in file order."""
        return [node.id for node in self.nodes]


class CallableAgent(SpecModel):
    """A saved agent that nodes may call as a subagent (spec 1.7)."""

    id: str
    name: str
    system_prompt: str = Field(
        default="", validation_alias=AliasChoices("system_prompt", "systemPrompt")
    )
    task_prompt: str = Field(default="", validation_alias=AliasChoices("task_prompt", "taskPrompt"))
    model: str = ""
    output_schema: Any = Field(validation_alias=AliasChoices("output_schema", "outputSchema"))
    handoff: HandoffSpec = Field(default_factory=JsonHandoff)
    auto_start: bool = Field(
        default=False, validation_alias=AliasChoices("auto_start", "autoStart")
    )
    tools: NodeToolConfig = Field(default_factory=NodeToolConfig)

    @property
    def purpose(self) -> str:
        """What models are told this agent is for (see `callable_agent_purpose`)."""
        return callable_agent_purpose(self)


class AgentsFile(SpecModel):
    """`$OPENFLOW_HOME/agents.json`."""

    agents: list[CallableAgent] = Field(default_factory=list)

    @classmethod
    def load_json(cls, text: str | bytes) -> AgentsFile:
        """Parse agents.json; raises WorkflowFormatError in one readable line."""
        data = _parse_json(text, "agents.json")
        if not isinstance(data, dict):
            raise WorkflowFormatError(
                f'not an agents file: expected {{"agents": [...]}}, got {_json_type(data)}'
            )
        return _validate(cls, data, "not an agents file")

    def to_json_dict(self) -> dict[str, Any]:
        """The file's JSON, unknown keys included."""
        return self.model_dump(mode="json", by_alias=True)


class AppWorkflowStore(SpecModel):
    """`$OPENFLOW_HOME/workflows.json`: the app's workflows and the examples already seeded."""

    workflows: list[Workflow] = Field(default_factory=list)
    seeded_examples: list[str] = Field(default_factory=list)

    @classmethod
    def load_json(cls, text: str | bytes) -> AppWorkflowStore:
        """Parse workflows.json; raises WorkflowFormatError in one readable line."""
        data = _parse_json(text, "the workflow store")
        if not isinstance(data, dict):
            raise WorkflowFormatError(
                'not a workflow store: expected {"workflows": [...], "seeded_examples": [...]}, '
                f"got {_json_type(data)}"
            )
        return _validate(cls, data, "not a workflow store")

    def to_json_dict(self) -> dict[str, Any]:
        """The file's JSON, unknown keys included."""
        return self.model_dump(mode="json", by_alias=True)


def object_schema_or_default(schema: Any) -> dict[str, Any]:
    """An object schema as it is, else a copy of the `{summary}` fallback (spec 1.4)."""
    if isinstance(schema, dict) and (schema.get("type") == "object" or "properties" in schema):
        return schema
    return json_copy(DEFAULT_OUTPUT_SCHEMA)


def effective_output_schema(agent: AgentNodeConfig | CallableAgent) -> dict[str, Any]:
    """The schema a node's output must satisfy (spec 1.4 fallback to `{summary}`), a copy."""
    return json_copy(object_schema_or_default(agent.output_schema))


def submission_schema(agent: AgentNodeConfig | CallableAgent) -> dict[str, Any]:
    """The schema of the submit tool: `{markdown}` for Markdown handoffs, else the effective one."""
    return json_copy(read_submission_schema(agent))


def read_submission_schema(agent: AgentNodeConfig | CallableAgent) -> dict[str, Any]:
    """`submission_schema` itself, not a copy: to read only (say, to classify a reply), never
    to change or to keep."""
    if isinstance(agent.handoff, MarkdownHandoff):
        return MARKDOWN_SUBMISSION_SCHEMA
    return object_schema_or_default(agent.output_schema)


def template_headings(template: str) -> list[str]:
    """The heading lines (levels 1-6) of a Markdown text, normalized to `"## Title"`."""
    headings: list[str] = []
    for raw_line in template.split("\n"):
        line = raw_line.strip()
        level = len(line) - len(line.lstrip("#"))
        if not 1 <= level <= 6:
            continue
        title = line[level:].strip()
        if title:
            headings.append(f"{'#' * level} {title}")
    return headings


def missing_template_headings(template: str, markdown: str) -> list[str]:
    """The template's headings that `markdown` lacks, in template order."""
    present = set(template_headings(markdown))
    return [heading for heading in template_headings(template) if heading not in present]


def callable_agent_purpose(agent: CallableAgent) -> str:
    """The first non-empty line of the agent's task prompt, else "Saved agent"."""
    for line in agent.task_prompt.split("\n"):
        if line.strip():
            return line.strip()
    return SAVED_AGENT_PURPOSE


def _parse_json(text: str | bytes, what: str) -> object:
    """Parsed JSON; raises LimitExceeded for text nested deeper than max_json_depth."""
    check_json_text(text, what)
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except UnicodeDecodeError as exc:
        raise WorkflowFormatError(
            f"not valid JSON: the file is not UTF-8 text (byte {exc.start}) — save it as UTF-8"
        ) from None
    except json.JSONDecodeError as exc:
        raise WorkflowFormatError(
            f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except _NonFiniteNumber as exc:
        raise WorkflowFormatError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise WorkflowFormatError("not valid JSON: nested too deeply to read") from None


class _NonFiniteNumber(ValueError):
    """JSON has no NaN or Infinity; Python's reader accepts them unless told not to."""


def _reject_constant(name: str) -> float:
    raise _NonFiniteNumber(f"{name} is not a JSON number — use a finite number or null")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFiniteNumber(f"{text} is too large for a JSON number — use a smaller number")
    return value


def _validate(model: type[_M], data: dict[str, Any], what: str) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise WorkflowFormatError(f"{what}: {describe_validation_error(exc)}") from None
    except RecursionError:
        raise WorkflowFormatError(f"{what}: nested too deeply to read") from None


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem of a pydantic error as one line naming the field path."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "the data does not match the format"
    first = errors[0]
    path = _loc_path(first["loc"])
    if first["type"] == "missing":
        line = f"{path} is missing — add it"
    else:
        line = f"{path}: {first['msg']} — fix the value"
    more = len(errors) - 1
    if more:
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return line


def _loc_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "the top level"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


__all__ = [
    "DEFAULT_MARKDOWN_TEMPLATE",
    "DEFAULT_OUTPUT_SCHEMA",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TASK_PROMPT",
    "MARKDOWN_SUBMISSION_SCHEMA",
    "MAX_BACKOFF_MS",
    "MCP_CONTEXT_DEFAULT_MAX_BYTES",
    "MCP_CONTEXT_MAX_BYTES",
    "AgentNodeConfig",
    "AgentsFile",
    "AppWorkflowStore",
    "ApprovalMode",
    "Budget",
    "CostUsd",
    "MAX_BUDGET_TOKENS",
    "MAX_BUDGET_USD",
    "TokenCount",
    "CallableAgent",
    "Edge",
    "HandoffFormat",
    "HandoffSpec",
    "JsonHandoff",
    "LegacyHandoff",
    "MarkdownHandoff",
    "McpContextKind",
    "McpContextSnapshot",
    "McpPromptSelection",
    "McpResourceSelection",
    "Node",
    "NodeToolConfig",
    "PlanModeConfig",
    "Position",
    "RetryPolicy",
    "SpecModel",
    "Workflow",
    "WorkflowSchedule",
    "WorkflowSettings",
    "callable_agent_purpose",
    "describe_validation_error",
    "effective_output_schema",
    "object_schema_or_default",
    "missing_template_headings",
    "read_submission_schema",
    "submission_schema",
    "template_headings",
]
