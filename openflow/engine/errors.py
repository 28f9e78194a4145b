"""Errors the engine raises.

Every engine error derives from `EngineError`, so callers at a process edge can catch the whole
family with one clause and map it to an exit code or an HTTP status:

    EngineError
    ├── WorkflowFormatError        the text is not JSON, or the JSON is not an OpenFlow workflow
    ├── WorkflowValidationError    a well-formed workflow that breaks a rule of spec 2.1
    ├── LimitExceeded              a file, request or text over a limit of `engine.limits`
    └── UnknownNodeError           a node id that the workflow does not contain

Messages are one line, quote identifiers with `!r` and end with what to do.
"""

from __future__ import annotations

from typing import Any, Literal

ValidationCode = Literal[
    "EmptyWorkflow",
    "DuplicateNodeId",
    "InvalidHandoffTemplate",
    "InvalidOutputSchema",
    "InvalidMcpContextSelection",
    "DuplicateEdgeId",
    "SelfEdge",
    "MissingEndpoint",
    "PlanModeSourceMissing",
    "PlanModeSourceNotInteractive",
    "Cycle",
    "InternalConsistency",
    "LimitExceeded",
]


class EngineError(Exception):
    """Base class of every error the engine raises."""


class WorkflowFormatError(EngineError):
    """The input is not JSON, or not shaped like an OpenFlow workflow."""


class WorkflowValidationError(EngineError):
    """A workflow broke one rule of spec 2.1; `code` names the rule, `detail` says why."""

    def __init__(
        self,
        code: ValidationCode,
        message: str,
        node_id: str | None = None,
        edge_id: str | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.code: ValidationCode = code
        self.message = message
        self.node_id = node_id
        self.edge_id = edge_id
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self.code, self.message, self.node_id, self.edge_id, self.detail),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkflowValidationError):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash((self.code, self.message, self.node_id, self.edge_id, self.detail))

    def __repr__(self) -> str:
        return (
            f"WorkflowValidationError(code={self.code!r}, node_id={self.node_id!r}, "
            f"edge_id={self.edge_id!r}, detail={self.detail!r})"
        )

    def as_dict(self) -> dict[str, str | None]:
        """The error as plain JSON, for API responses and CLI output."""
        return {
            "code": self.code,
            "message": self.message,
            "node_id": self.node_id,
            "edge_id": self.edge_id,
            "detail": self.detail,
        }


class LimitExceeded(EngineError):
    """An input is over one of the named limits; `limit` names it, `value` is its value."""

    def __init__(self, message: str, limit: str, value: int, found: int) -> None:
        super().__init__(message)
        self.message = message
        self.limit = limit
        self.value = value
        self.found = found

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.limit, self.value, self.found))

    def as_dict(self) -> dict[str, str | int]:
        """The limit and what was found, for API error details."""
        return {"limit": self.limit, "value": self.value, "found": self.found}


class UnknownNodeError(EngineError, KeyError):
    """A node id was asked for that the workflow does not contain."""

    def __init__(self, node_id: str, workflow_id: str) -> None:
        super().__init__(
            f"node {node_id!r} is not in workflow {workflow_id!r}; use one of its node ids"
        )
        self.node_id = node_id
        self.workflow_id = workflow_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.node_id, self.workflow_id))

    def __str__(self) -> str:
        return str(self.args[0])


__all__ = [
    "EngineError",
    "LimitExceeded",
    "UnknownNodeError",
    "ValidationCode",
    "WorkflowFormatError",
    "WorkflowValidationError",
]
