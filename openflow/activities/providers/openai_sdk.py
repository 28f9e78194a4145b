"""The `openai` SDK client both OpenAI wires share: base URL, key, errors."""

from __future__ import annotations

import json
from typing import Any

import openai

from openflow.activities.providers.errors import (
    ProviderError,
    status_error,
    stream_error,
    transport_error,
)
from openflow.settings import ProviderProfile

KEYLESS_PLACEHOLDER = "no-key"


def endpoint_base(base_url: str, path: str, suffix: str) -> str:
    """The SDK base URL for a profile's `base_url` + endpoint path ending in `suffix`."""
    base = base_url.rstrip("/")
    tail = path.strip("/")
    if tail.startswith("v1/") and base.endswith("/v1"):
        tail = tail[3:]
    full = f"{base}/{tail}" if tail else base
    if full.endswith("/" + suffix):
        return full[: -len(suffix) - 1]
    if tail == suffix:
        return base
    raise ProviderError.of(
        "permanent",
        f"endpoint path {path!r} must end with {suffix!r}; fix the provider profile",
    )


def make_client(
    profile: ProviderProfile, api_key: str | None, *, base_url: str
) -> openai.AsyncOpenAI:
    """An AsyncOpenAI client with SDK retries off (one retry layer only)."""
    return openai.AsyncOpenAI(
        api_key=api_key or KEYLESS_PLACEHOLDER,
        base_url=base_url,
        max_retries=0,
        timeout=profile.request_timeout_secs,
    )


def sdk_failure(
    label: str, exc: openai.OpenAIError, secrets: tuple[str | None, ...]
) -> ProviderError:
    """Classify an `openai` SDK exception (spec 5.3)."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        detail: Any = None
        if isinstance(body, dict):
            error = body.get("error", body)
            detail = error.get("message") if isinstance(error, dict) else error
        body_text = body if isinstance(body, str) else json.dumps(body, default=str)
        return status_error(
            label,
            exc.response.status_code,
            headers=dict(exc.response.headers),
            body_text=body_text,
            detail=detail if isinstance(detail, str) else None,
            secrets=secrets,
        )
    if isinstance(exc, openai.APIConnectionError):
        return transport_error(label, exc)
    if isinstance(exc, openai.APIError):
        body = exc.body
        code = ""
        message = exc.message
        if isinstance(body, dict):
            code = str(body.get("code") or body.get("type") or "")
            message = str(body.get("message") or message)
        return stream_error(label, code, message, secrets)
    return ProviderError.of("failed", f"{label} client error ({type(exc).__name__})")


__all__ = ["KEYLESS_PLACEHOLDER", "endpoint_base", "make_client", "sdk_failure"]
