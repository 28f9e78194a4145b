"""The pure core of OpenFlow on Temporal: the workflow format, validation and the run reducer.

Nothing here does I/O, reads a clock or draws a random number: time and ids arrive as data,
and `advance.advance(snapshot, facts, now_ms) -> Plan` is total and deterministic (the module
`advance` also has `start`, `resume` and `check`).
"""

from openflow.engine import advance
from openflow.engine.errors import (
    EngineError,
    LimitExceeded,
    WorkflowFormatError,
    WorkflowValidationError,
)
from openflow.engine.events import RunEvent, RunReport
from openflow.engine.graph import execution_layers, validate_workflow, workflow_problems
from openflow.engine.limits import LIMITS, Limit
from openflow.engine.projection import WorkflowRunState, apply_event, initial_state, project
from openflow.engine.spec import Workflow
from openflow.engine.state import Fact, Intent, Plan, RunSnapshot

__all__ = [
    "LIMITS",
    "EngineError",
    "Fact",
    "Intent",
    "Limit",
    "LimitExceeded",
    "Plan",
    "RunEvent",
    "RunReport",
    "RunSnapshot",
    "Workflow",
    "WorkflowFormatError",
    "WorkflowRunState",
    "WorkflowValidationError",
    "advance",
    "apply_event",
    "execution_layers",
    "initial_state",
    "project",
    "validate_workflow",
    "workflow_problems",
]
