"""Routes that read JSON strictly: no NaN or Infinity, no text that is not UTF-8, no deep nesting."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from openflow.engine.errors import LimitExceeded
from openflow.engine.limits import check_json_text


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


class BodyOverLimit(HTTPException):
    """A body over one of the limits; FastAPI passes an HTTPException from body parsing on."""

    def __init__(self, exc: LimitExceeded) -> None:
        super().__init__(status_code=422, detail=exc.message)
        self.code = "limit_exceeded"
        self.details = exc.as_dict()


class StrictJsonRequest(Request):
    """A request whose JSON body must be standard JSON, nested no deeper than max_json_depth."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                check_json_text(body, "the request body")
            except LimitExceeded as exc:
                raise BodyOverLimit(exc) from None
            try:
                self._json = json.loads(body, parse_constant=_reject_constant)
            except UnicodeDecodeError:
                raise json.JSONDecodeError("the body is not UTF-8 text", "", 0) from None
            except RecursionError:
                raise json.JSONDecodeError("the JSON is nested too deeply", "", 0) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """An APIRoute that parses bodies with `StrictJsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler


__all__ = ["BodyOverLimit", "StrictJsonRequest", "StrictJsonRoute"]
