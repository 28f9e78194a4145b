"""Built-in tools and the batch executor that runs them inside the execution folder."""

from openflow.activities.tools.base import (
    Cancelled,
    Failed,
    FileChange,
    InvalidArgs,
    NotFound,
    PermissionDenied,
    ReadRecord,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolTimeout,
)
from openflow.activities.tools.cache import ResultCache
from openflow.activities.tools.executor import (
    DEFAULT_TOOL_BUDGET,
    BatchOutcome,
    LockTable,
    cancelled_result,
    execute_batch,
    new_tool_budget,
    tool_backoff_ms,
    unavailable_result,
)
from openflow.activities.tools.process import harden_process, is_hardened, tool_env
from openflow.activities.tools.registry import (
    ToolRegistry,
    builtin_tools,
    default_registry,
    spec_of,
)
from openflow.activities.tools.sandbox import Sandbox

__all__ = [
    "DEFAULT_TOOL_BUDGET",
    "BatchOutcome",
    "Cancelled",
    "Failed",
    "FileChange",
    "InvalidArgs",
    "LockTable",
    "NotFound",
    "PermissionDenied",
    "ReadRecord",
    "ResultCache",
    "Sandbox",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "ToolTimeout",
    "builtin_tools",
    "cancelled_result",
    "default_registry",
    "execute_batch",
    "harden_process",
    "is_hardened",
    "new_tool_budget",
    "spec_of",
    "tool_backoff_ms",
    "tool_env",
    "unavailable_result",
]
