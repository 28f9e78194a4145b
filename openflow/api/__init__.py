"""The HTTP API: runs, pauses, a live event stream, the inbox and the workflow catalog."""

from openflow.api.app import create_app, is_loopback, serve
from openflow.api.errors import ApiError, UnsafeBind

__all__ = ["ApiError", "UnsafeBind", "create_app", "is_loopback", "serve"]
