"""The HTTP bodies that are the API's own: requests that name a run's action, and small replies.

Workflows, run state, run events and run summaries are the project's models (`Workflow`,
`WorkflowRunState`, `RunEvent`, `RunSummary`); only the shapes that exist because of HTTP live
here. Each action body maps onto the one `Action` the `act` update takes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from openflow.contracts import (
    MAX_BY_CHARS,
    Action,
    CallDecision,
    DecidedBy,
    ToolGrant,
    check_decisions,
)
from openflow.engine.spec import Budget, CostUsd, TokenCount, Workflow
from openflow.engine.transcript import ToolCall

RunStatus = Literal["running", "paused", "stopped", "completed", "failed"]
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartRun(_Body):
    """Start a run of a catalog workflow (`workflow_id`) or of an inline `workflow`."""

    workflow_id: str | None = Field(
        default=None, min_length=1, description="A workflow of the catalog; snapshotted at start"
    )
    workflow: Workflow | None = Field(default=None, description="An inline workflow")
    entrypoint: str = Field(default="", description="The text the root nodes receive")
    run_id: str | None = Field(
        default=None,
        pattern=RUN_ID_PATTERN,
        description="Your own run id (letters, digits, '_', '.', '-'); `run-<uuid>` when absent",
    )
    project_dir: str | None = Field(
        default=None,
        min_length=1,
        description="Absolute path of the project folder the run works in (server side)",
    )
    provider_id: str | None = Field(
        default=None, min_length=1, description="A provider profile of settings.json"
    )
    allow_concurrent: bool = Field(
        default=False,
        alias="allowConcurrent",
        description="Start even while another run is changing `project_dir` (the mutation gate)",
    )
    budget: Budget | None = Field(
        default=None,
        description="What the run may spend, `{maxCostUsd?, maxTokens?}`: over the workflow's "
        "`settings.budget` field by field",
    )

    @model_validator(mode="after")
    def _one_workflow(self) -> StartRun:
        if (self.workflow_id is None) == (self.workflow is None):
            raise ValueError("give exactly one of 'workflow_id' and 'workflow'")
        return self


class RunRef(BaseModel):
    """A run the request started, stopped or resumed."""

    run_id: str
    status: Literal["running", "stopping"]
    workflow_id: str | None = None


class InputBody(_Body):
    """A person's answer to a node awaiting input."""

    node_id: str = Field(min_length=1)
    text: str

    def action(self) -> Action:
        return Action(kind="input", node_id=self.node_id, text=self.text)


class ApprovalBody(_Body):
    """A person's decision on a pending tool approval: the whole batch, or call by call.

    `allow` decides every call `decisions` leaves out; give one or both.
    """

    allow: bool | None = Field(default=None, description="The decision for every call left out")
    reason: str | None = Field(default=None, description="Why the calls left out are denied")
    decisions: list[CallDecision] = Field(
        default_factory=list, description="One call's decision each (`arguments` edit the call)"
    )
    remember: ToolGrant | None = Field(
        default=None, description="Approve later calls of a tool, under a path, for the run"
    )
    by: DecidedBy | None = Field(default=None, description="Who decided; the caller's tenant")

    @model_validator(mode="after")
    def _decides(self) -> ApprovalBody:
        if self.allow is None and not self.decisions:
            raise ValueError("give 'allow' for the whole batch or 'decisions' for its calls")
        check_decisions(self.decisions)
        return self

    def action(self, approval_id: str, tenant: str = "") -> Action:
        """The `act` action; `by` is the tenant when the body leaves it out."""
        return Action(
            kind="approval",
            approval_id=approval_id,
            allow=self.allow,
            reason=self.reason,
            decisions=self.decisions,
            remember=self.remember,
            by=self.by if self.by is not None else tenant[:MAX_BY_CHARS] or None,
        )


class RevokeBody(ToolGrant):
    """Take back a remembered approval: the grant's `tool` and `path_prefix` as given."""

    by: DecidedBy | None = Field(default=None, description="Who revoked it; the caller's tenant")

    def action(self, tenant: str = "") -> Action:
        return Action(
            kind="revoke_grant",
            tool=self.tool,
            path_prefix=self.path_prefix,
            by=self.by if self.by is not None else tenant[:MAX_BY_CHARS] or None,
        )


class RetryBody(_Body):
    """Retry a failed or interrupted node, optionally with a message to it."""

    node_id: str = Field(min_length=1)
    message: str | None = None

    def action(self) -> Action:
        return Action(kind="retry", node_id=self.node_id, message=self.message)


class InterruptBody(_Body):
    """Interrupt one running node; it can be retried, with a message, later."""

    node_id: str = Field(min_length=1)

    def action(self) -> Action:
        return Action(kind="interrupt", node_id=self.node_id)


class ResumeBody(_Body):
    """Resume from the checkpoint; with both fields, that node's next user turn is `message`."""

    node_id: str | None = Field(default=None, min_length=1)
    message: str | None = None


class RevertResult(BaseModel):
    """The files the revert restored to what they were before the edit batch."""

    batch_id: str
    paths: list[str]


class BudgetBody(_Body):
    """Set the run's budget: the fields given replace the run's, the others stay."""

    max_cost_usd: CostUsd | None = Field(
        default=None,
        alias="maxCostUsd",
        description="The estimated US dollars the run may spend on model calls",
    )
    max_tokens: TokenCount | None = Field(
        default=None,
        alias="maxTokens",
        description="The input plus output tokens the run may spend",
    )
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _sets(self) -> BudgetBody:
        if self.max_cost_usd is None and self.max_tokens is None:
            raise ValueError("give 'maxCostUsd', 'maxTokens' or both")
        return self

    def action(self) -> Action:
        return Action(kind="budget", max_cost_usd=self.max_cost_usd, max_tokens=self.max_tokens)


class MessageBody(_Body):
    """A live message to a node."""

    node_id: str = Field(min_length=1)
    text: str

    def action(self) -> Action:
        return Action(kind="message", node_id=self.node_id, text=self.text)


class ActionResult(BaseModel):
    """The run accepted the action; `status` is the run's status once it was applied."""

    accepted: bool = True
    status: str


class ValidationOk(BaseModel):
    """The workflow passed every rule."""

    ok: Literal[True] = True


class InboxAction(BaseModel):
    """One way to settle an inbox item: the exact request to send."""

    label: str
    method: Literal["POST"] = "POST"
    path: str
    body: dict[str, Any]


class InboxItem(BaseModel):
    """Something a person must do for a run to go on."""

    run_id: str
    workflow_id: str = ""
    workflow_name: str = ""
    kind: Literal["input", "approval", "retry"]
    node_id: str
    label: str = Field(description="The node's label")
    approval_id: str | None = None
    question: str | None = Field(default=None, description="What the node asks (input)")
    structured_input: dict[str, Any] | None = Field(
        default=None, description="A structured question (input)"
    )
    tool_call: ToolCall | None = Field(default=None, description="The first call (approval)")
    tool_calls: list[ToolCall] = Field(default_factory=list, description="The whole batch")
    tier: str | None = None
    error: str | None = Field(default=None, description="Why the node failed (retry)")
    since_ms: int | None = Field(default=None, description="When the run started waiting")
    actions: list[InboxAction]


class Health(BaseModel):
    """Whether the API is up and reaches Temporal."""

    status: Literal["ok", "degraded"]
    temporal: Literal["connected", "unreachable"]
    namespace: str
    task_queue: str


__all__ = [
    "RUN_ID_PATTERN",
    "ActionResult",
    "ApprovalBody",
    "RevokeBody",
    "Health",
    "InboxAction",
    "InboxItem",
    "InputBody",
    "InterruptBody",
    "ResumeBody",
    "RevertResult",
    "MessageBody",
    "RetryBody",
    "RunRef",
    "RunStatus",
    "StartRun",
    "ValidationOk",
]
