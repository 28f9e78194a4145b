"""Multipart bodies for the routes that take attachments (`POST /runs`, `.../input`, `.../messages`).

Such a route reads the JSON body it always did; a `multipart/form-data` body is turned into
that same JSON before the route sees it: each text field becomes a field of the body (`workflow`
as JSON text, `allowConcurrent` as `true`/`false`), and every file part is an attachment. So one
model validates both forms, and the route gets the files from `uploads_of(request)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from starlette.datastructures import UploadFile

from openflow.api.errors import Unprocessable
from openflow.api.routing import StrictJsonRoute
from openflow.attachments import Upload, check_count
from openflow.engine.limits import MAX_ATTACHMENTS

__all__ = ["AttachmentsRoute", "multipart_doc", "uploads_of"]

_UPLOADS = "openflow.uploads"
#: Form fields whose text is JSON, and ones that are yes/no switches.
_JSON_FIELDS = frozenset({"workflow", "budget"})
_SWITCHES = frozenset({"allowConcurrent"})
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def uploads_of(request: Request) -> list[Upload]:
    """The files a multipart body carried (none for a JSON body)."""
    found: list[Upload] = request.scope.get(_UPLOADS, [])
    return found


def _is_multipart(content_type: str | None) -> bool:
    return bool(content_type) and str(content_type).lower().startswith("multipart/form-data")


async def _form_as_json(request: Request) -> tuple[bytes, list[Upload]]:
    form = await request.form(max_files=MAX_ATTACHMENTS.value + 1, max_fields=64)
    try:
        fields: dict[str, Any] = {}
        uploads: list[Upload] = []
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                uploads.append(Upload(value.filename or name, await value.read()))
                continue
            if name in _JSON_FIELDS:
                try:
                    fields[name] = json.loads(value)
                except (ValueError, RecursionError):
                    raise Unprocessable(
                        f"the form field {name!r} is not JSON; send the {name} as JSON text",
                        code="invalid_request",
                    ) from None
            elif name in _SWITCHES:
                lowered = value.strip().lower()
                if lowered not in _TRUE | _FALSE:
                    raise Unprocessable(
                        f"the form field {name!r} must be true or false", code="invalid_request"
                    )
                fields[name] = lowered in _TRUE
            else:
                fields[name] = value
    finally:
        await form.close()
    check_count(len(uploads))
    return json.dumps(fields).encode(), uploads


class AttachmentsRoute(StrictJsonRoute):
    """A StrictJsonRoute that also takes its body as multipart form data with files."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_uploads(request: Request) -> Response:
            if not _is_multipart(request.headers.get("content-type")):
                return await handler(request)
            body, uploads = await _form_as_json(request)
            scope = dict(request.scope)
            scope["headers"] = [
                (k, v)
                for k, v in request.scope.get("headers", [])
                if k.lower() not in (b"content-type", b"content-length")
            ] + [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            scope[_UPLOADS] = uploads
            sent = False

            async def receive() -> dict[str, Any]:
                nonlocal sent
                if sent:
                    return {"type": "http.disconnect"}
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            return await handler(Request(scope, receive))

        return with_uploads


def multipart_doc(fields: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    """The `openapi_extra` that documents the multipart form of a route's body."""
    properties = {
        **fields,
        "attachments": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "description": "Files (images, PDFs, UTF-8 text); every file part is one",
        },
    }
    schema = {"type": "object", "properties": properties, "required": required}
    return {"requestBody": {"content": {"multipart/form-data": {"schema": schema}}}}
