"""ASGI middleware at the edge of the API: the body size limit and the last-resort error boundary."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from openflow.api.errors import error_response, internal_error_response
from openflow.engine.limits import MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS, MAX_REQUEST_BYTES

logger = logging.getLogger(__name__)


#: How much more a multipart body (files to attach) may carry than `max_bytes`.
ATTACHMENTS_ALLOWANCE = MAX_ATTACHMENTS.value * MAX_ATTACHMENT_BYTES.value


class BodyLimit:
    """Answer 413 to a body over `max_bytes`, by its Content-Length or by what actually arrives.

    A multipart body may carry `ATTACHMENTS_ALLOWANCE` more: the files it attaches are checked
    one by one against max_attachment_bytes by the route.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        limit = self.max_bytes
        if headers.get(b"content-type", b"").lower().startswith(b"multipart/form-data"):
            limit += ATTACHMENTS_ALLOWANCE
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await self._reject(scope, receive, send, 400, "bad_request", _BAD_LENGTH)
                return
            if declared > limit:
                await self._too_large(scope, receive, send, limit)
                return
            if declared == 0:
                await self.app(scope, receive, send)
                return
        elif b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await self._too_large(scope, receive, send, limit)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        message = (
            f"the request body is over the limit {MAX_REQUEST_BYTES.name} ({limit:,} "
            "bytes) — send a smaller body"
        )
        await self._reject(scope, receive, send, 413, "payload_too_large", message)

    @staticmethod
    async def _reject(
        scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        response = error_response(status, code, message, headers={"Connection": "close"})
        await response(scope, receive, send)


_BAD_LENGTH = "the Content-Length header is not a number; send the body's size in bytes"


class ErrorBoundary:
    """Turn any exception no handler took into a logged 500 with the API's error shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # the process edge: nothing may escape as a stack trace
            if started:
                logger.error("response to %s broke off", scope.get("path", ""), exc_info=exc)
                return
            response = internal_error_response(exc, scope.get("path", ""))
            await response(scope, receive, send)


__all__ = ["BodyLimit", "ErrorBoundary"]
