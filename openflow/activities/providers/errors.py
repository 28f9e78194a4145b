"""Provider failures and their classification (OPENFLOW_SPEC 5.3).

Errors:
    ProviderError    a model call that produced no reply; carries a `ProviderFailure`

Messages built here never carry keys or model text: they name the provider, the HTTP status
and the provider's own short error description, with anything key-shaped redacted.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Iterable, Mapping

from openflow.engine.request import ProviderErrorKind, ProviderFailure

_TRANSIENT_STATUSES = frozenset({408, 409, 429})
_TRANSIENT_BODY_MARKERS = (
    "upstream request failed",
    "provider returned error",
    "temporarily unavailable",
    "service unavailable",
    "overloaded",
    "bad gateway",
    "gateway timeout",
    "error decoding response body",
)
_MAX_DETAIL_CHARS = 300
_KEYISH = re.compile(
    r"(?i)(bearer\s+\S+|\b(?:sk|pk|rk|key|sess|ak)-[A-Za-z0-9_\-*.]{6,}|\bAKIA[0-9A-Z]{12,})"
)


class ProviderError(Exception):
    """A model call that did not produce a reply; `failure` says how the engine should react."""

    def __init__(self, failure: ProviderFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure

    @classmethod
    def of(
        cls,
        kind: ProviderErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after_ms: int | None = None,
        partial_tool_names: Iterable[str] = (),
    ) -> ProviderError:
        """Build the error from its parts."""
        return cls(
            ProviderFailure(
                kind=kind,
                message=message,
                status=status,
                retry_after_ms=retry_after_ms,
                partial_tool_names=tuple(partial_tool_names),
            )
        )


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with the given secrets and anything that looks like a credential removed."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _KEYISH.sub("[redacted]", text)


def short_detail(detail: str | None, secrets: Iterable[str | None] = ()) -> str:
    """A provider's error description, one line, capped, with secrets redacted."""
    if not detail:
        return ""
    line = " ".join(detail.split())
    if len(line) > _MAX_DETAIL_CHARS:
        line = line[: _MAX_DETAIL_CHARS - 1] + "…"
    return redact(line, secrets)


def retry_after_ms(
    headers: Mapping[str, str] | None, *, now: Callable[[], float] = time.time
) -> int | None:
    """Milliseconds the server asked us to wait, from `retry-after-ms` or `Retry-After`."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms", "").strip()
    if raw_ms:
        try:
            return max(0, int(float(raw_ms)))
        except ValueError:
            pass
    raw = lowered.get("retry-after", "").strip()
    if not raw:
        return None
    try:
        return max(0, int(float(raw) * 1000))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0, int((when.timestamp() - now()) * 1000))


def kind_for_status(status: int, body_text: str = "") -> ProviderErrorKind:
    """Spec 5.3: 408/409/429/5xx and overload wording are transient, 400 failed, else permanent."""
    lowered = body_text.lower()
    if status in _TRANSIENT_STATUSES or 500 <= status <= 599:
        return "transient"
    if any(marker in lowered for marker in _TRANSIENT_BODY_MARKERS):
        return "transient"
    if status == 400:
        return "failed"
    return "permanent"


def status_error(
    label: str,
    status: int,
    *,
    headers: Mapping[str, str] | None = None,
    body_text: str = "",
    detail: str | None = None,
    secrets: Iterable[str | None] = (),
) -> ProviderError:
    """The ProviderError for an HTTP error response."""
    kind = kind_for_status(status, body_text)
    text = short_detail(detail, secrets)
    hint = {
        401: "check the API key",
        403: "check the API key's permissions",
        404: "check the model name and base URL",
    }.get(status)
    message = f"{label} request failed with HTTP {status}"
    if text:
        message += f": {text}"
    if hint:
        message += f" ({hint})"
    return ProviderError.of(
        kind,
        message,
        status=status,
        retry_after_ms=retry_after_ms(headers) if kind == "transient" else None,
    )


def stream_error(
    label: str, error_type: str, detail: str | None, secrets: Iterable[str | None] = ()
) -> ProviderError:
    """The ProviderError for an error the provider reported inside a 200 stream."""
    lowered = f"{error_type} {detail or ''}".lower()
    transient_types = ("overloaded", "rate_limit", "api_error", "server_error", "internal")
    if any(t in lowered for t in transient_types) or any(
        marker in lowered for marker in _TRANSIENT_BODY_MARKERS
    ):
        kind: ProviderErrorKind = "transient"
    elif "invalid_request" in lowered or "validation" in lowered:
        kind = "failed"
    else:
        kind = "transient"
    text = short_detail(detail, secrets)
    message = f"{label} stream reported {error_type or 'an error'}"
    if text:
        message += f": {text}"
    return ProviderError.of(kind, message)


def transport_error(label: str, exc: BaseException) -> ProviderError:
    """The transient ProviderError for a connection, timeout or protocol failure."""
    reason = type(exc).__name__
    what = "timed out" if "timeout" in reason.lower() else f"failed in transport ({reason})"
    return ProviderError.of("transient", f"{label} request {what}; it will be retried")


def stream_cut(label: str) -> ProviderError:
    """The transient ProviderError for a stream that ended before the response was complete."""
    return ProviderError.of(
        "transient", f"{label} stream ended before the response completed; it will be retried"
    )


def truncated(label: str, tool_names: Iterable[str]) -> ProviderError:
    """The ProviderError for a reply cut off by the output token limit."""
    names = tuple(dict.fromkeys(n for n in tool_names if n))
    message = f"{label} response hit the output token limit"
    if names:
        message += f" while writing a call to {', '.join(names)}"
    return ProviderError.of("truncated", message, partial_tool_names=names)


def _transport_exception_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import httpx

        types.append(httpx.TransportError)
    except ImportError:  # pragma: no cover - httpx is a dependency
        pass
    try:
        import httpx2

        types.append(httpx2.TransportError)
    except ImportError:  # pragma: no cover - only SDK builds that use httpx2 ship it
        pass
    try:
        import urllib3.exceptions

        types.append(urllib3.exceptions.HTTPError)
    except ImportError:  # pragma: no cover - botocore depends on urllib3
        pass
    try:
        from botocore.exceptions import (
            ConnectionClosedError,
            EndpointConnectionError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        types += [
            ConnectionClosedError,
            EndpointConnectionError,
            ReadTimeoutError,
            ResponseStreamingError,
        ]
    except ImportError:  # pragma: no cover - boto3 is a dependency
        pass
    return tuple(types)


TRANSPORT_EXCEPTIONS = _transport_exception_types()

__all__ = [
    "TRANSPORT_EXCEPTIONS",
    "ProviderError",
    "kind_for_status",
    "redact",
    "retry_after_ms",
    "short_detail",
    "status_error",
    "stream_cut",
    "stream_error",
    "transport_error",
    "truncated",
]
