"""The API's error shape and the handlers that give every failure that shape.

Every error response is `{"error": {"code", "message", "details"?}}`. Domain errors from the
client, the catalog and the engine map to 4xx; anything unexpected is a 500 whose body carries a
reference to the server log, never a stack trace.

Errors:
    ApiError                   base
    ├── HttpError              answered as a JSON error with `status_code`
    │   ├── BadRequest         400 malformed JSON, a bad header
    │   ├── Unauthorized       401 no or unknown bearer key
    │   ├── NotFound           404 no such run or workflow (for this tenant)
    │   ├── Conflict           409 the run refused the request
    │   ├── PayloadTooLarge    413 the body is over max_request_bytes (or the set limit)
    │   ├── Unprocessable      422 the body parsed but is not acceptable (over a limit too)
    │   └── ServiceUnavailable 503 Temporal cannot be reached
    └── UnsafeBind             `serve` refused a non-loopback host without API keys
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.client import WorkflowQueryFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from openflow.api.routing import BodyOverLimit
from openflow.attachments import AttachmentError
from openflow.catalog import CatalogError, WorkflowNotFoundError
from openflow.client import ActionRejected, EditBatchNotFound, RunConflict, RunNotFound
from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.settings import SettingsError

logger = logging.getLogger(__name__)


class ErrorInfo(BaseModel):
    """What went wrong: a stable code, a sentence that says what to do, optional specifics."""

    code: str
    message: str
    details: Any | None = Field(default=None, description="Specifics, e.g. each field problem")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorInfo


class ApiError(Exception):
    """Base of every error the API package raises."""


class HttpError(ApiError):
    """A failure answered as a JSON error response."""

    status_code = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details
        self.headers = dict(headers or {})


class BadRequest(HttpError):
    status_code = 400
    code = "bad_request"


class Unauthorized(HttpError):
    status_code = 401
    code = "unauthorized"


class NotFound(HttpError):
    status_code = 404
    code = "not_found"


class Conflict(HttpError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(HttpError):
    status_code = 413
    code = "payload_too_large"


class Unprocessable(HttpError):
    status_code = 422
    code = "invalid_request"


class ServiceUnavailable(HttpError):
    status_code = 503
    code = "temporal_unavailable"


class UnsafeBind(ApiError):
    """`serve` was asked to listen beyond loopback while no API keys are configured."""


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The JSON of an error response."""
    info = ErrorInfo(code=code, message=message, details=details)
    return ErrorResponse(error=info).model_dump(mode="json", exclude_none=True)


def error_response(
    status_code: int,
    code: str,
    message: str,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A JSON error response of the API's shape."""
    return JSONResponse(
        error_body(code, message, details), status_code=status_code, headers=dict(headers or {})
    )


def as_http_error(exc: BaseException) -> HttpError | None:
    """The HTTP error a domain exception stands for, or None when it is unexpected."""
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, RunNotFound):
        return NotFound(f"{exc}; list your runs with GET /runs", code="run_not_found")
    if isinstance(exc, EditBatchNotFound):
        return NotFound(str(exc), code="edit_batch_not_found")
    if isinstance(exc, ActionRejected):
        return Conflict(str(exc), code="action_rejected")
    if isinstance(exc, RunConflict):
        return Conflict(str(exc), code="run_conflict")
    if isinstance(exc, WorkflowAlreadyStartedError):
        return Conflict(
            f"a run with id {exc.workflow_id!r} already exists; pick another run_id",
            code="run_conflict",
        )
    if isinstance(exc, WorkflowNotFoundError):
        return NotFound(
            f"workflow {exc.workflow_id!r} is not in the catalog; list it with GET /workflows",
            code="workflow_not_found",
        )
    if isinstance(exc, WorkflowFormatError):
        return Unprocessable(str(exc), code="invalid_workflow")
    if isinstance(exc, LimitExceeded):
        return Unprocessable(exc.message, code="limit_exceeded", details=exc.as_dict())
    if isinstance(exc, AttachmentError):
        return Unprocessable(str(exc), code="invalid_attachment")
    if isinstance(exc, WorkflowQueryFailedError):
        return ServiceUnavailable(
            "the run could not answer the query; check that a worker polls its task queue",
            code="run_unavailable",
        )
    if isinstance(exc, RPCError):
        return _rpc_error(exc)
    return None


def _rpc_error(exc: RPCError) -> HttpError | None:
    if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
        return ServiceUnavailable(
            "Temporal did not answer in time; check that the server is up and try again"
        )
    if exc.status == RPCStatusCode.INVALID_ARGUMENT:
        return BadRequest(f"Temporal refused the request: {exc.message}")
    if exc.status == RPCStatusCode.NOT_FOUND:
        return NotFound("no such run; list your runs with GET /runs", code="run_not_found")
    return None


def internal_error_response(exc: BaseException, request_path: str) -> JSONResponse:
    """Log `exc` with a reference and answer a 500 that carries only the reference."""
    reference = uuid.uuid4().hex[:12]
    if isinstance(exc, SettingsError | CatalogError):
        logger.error("request %s failed (ref %s): %s", request_path, reference, exc)
        message = (
            "the server's OpenFlow files cannot be read; the operator should check the server "
            f"log (reference {reference})"
        )
        return error_response(500, "server_misconfigured", message)
    logger.error("request %s failed (ref %s)", request_path, reference, exc_info=exc)
    message = (
        f"an unexpected error occurred; the server log has the details (reference {reference})"
    )
    return error_response(500, "internal_error", message)


def _validation_details(errors: Sequence[Any]) -> list[dict[str, Any]]:
    details: list[dict[str, Any]] = []
    for err in errors:
        loc = [part for part in err.get("loc", ()) if isinstance(part, str | int)]
        details.append(
            {"loc": loc, "message": str(err.get("msg", "")), "type": str(err.get("type", ""))}
        )
    return details


def _where(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if not parts:
        return "the request"
    if parts[0] == "body":
        return "body." + ".".join(parts[1:]) if len(parts) > 1 else "the body"
    if len(parts) > 1:
        return f"{parts[0]} parameter {'.'.join(parts[1:])!r}"
    return parts[0]


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(err.get("type") == "json_invalid" for err in errors):
        first = next(err for err in errors if err.get("type") == "json_invalid")
        reason = (first.get("ctx") or {}).get("error", "the text is not JSON")
        return error_response(
            400, "malformed_json", f"the body is not valid JSON ({reason}); send a JSON object"
        )
    details = _validation_details(errors)
    if not details:
        return error_response(422, "invalid_request", "the request is not valid")
    first = details[0]
    if first["type"] == "missing" and first["loc"] == ["body"]:
        message = "the request body is missing; send a JSON object"
    else:
        message = f"{_where(first['loc'])}: {first['message']}"
        if len(details) > 1:
            message += f" (and {len(details) - 1} more)"
    return error_response(422, "invalid_request", message, details)


async def _on_http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {
        400: "bad_request",
        401: "unauthorized",
        404: "not_found",
        405: "method_not_allowed",
        413: "payload_too_large",
        415: "unsupported_media_type",
    }
    if isinstance(exc, BodyOverLimit):
        return error_response(exc.status_code, exc.code, str(exc.detail), exc.details)
    code = codes.get(exc.status_code, "http_error")
    if exc.status_code == 404:
        message = f"no route {request.url.path!r}; see /docs for the routes"
    elif exc.status_code == 405:
        allowed = _allowed_methods(request)
        message = (
            f"{request.method} is not allowed on {request.url.path!r}; "
            f"use {', '.join(allowed) or 'another route'}"
        )
        return error_response(405, code, message, headers={"Allow": ", ".join(allowed)})
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, code, message, headers=exc.headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API documents for this path (Starlette names only one route's)."""
    paths: dict[str, dict[str, Any]] = request.app.openapi().get("paths", {})
    for template, operations in paths.items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            return sorted(method.upper() for method in operations)
    return []


async def _on_domain_error(request: Request, exc: Exception) -> JSONResponse:
    mapped = as_http_error(exc)
    if mapped is None:
        return internal_error_response(exc, request.url.path)
    return error_response(
        mapped.status_code, mapped.code, mapped.message, mapped.details, mapped.headers
    )


async def _on_response_validation(request: Request, exc: Exception) -> JSONResponse:
    return internal_error_response(exc, request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    """Give every error the API's JSON shape."""
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(ResponseValidationError, _on_response_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    for exc_type in (
        HttpError,
        RunNotFound,
        EditBatchNotFound,
        ActionRejected,
        RunConflict,
        WorkflowAlreadyStartedError,
        CatalogError,
        WorkflowFormatError,
        LimitExceeded,
        AttachmentError,
        WorkflowQueryFailedError,
        RPCError,
        SettingsError,
    ):
        app.add_exception_handler(exc_type, _on_domain_error)


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the error statuses a route can answer."""
    descriptions = {
        400: "Malformed JSON or a bad header",
        401: "No or unknown bearer key",
        404: "No such run or workflow",
        409: "The run refused the request",
        413: "The body is over the size limit",
        422: "The body or a parameter is not acceptable",
        500: "Unexpected server error",
        503: "Temporal cannot be reached",
    }
    return {
        status: {"model": ErrorResponse, "description": descriptions[status]} for status in statuses
    }


__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "ErrorInfo",
    "ErrorResponse",
    "HttpError",
    "NotFound",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "Unauthorized",
    "UnsafeBind",
    "Unprocessable",
    "as_http_error",
    "documented",
    "error_body",
    "error_response",
    "install_error_handlers",
    "internal_error_response",
]
