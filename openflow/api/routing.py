"""Routes that read JSON strictly: no NaN or Infinity, no text that is not UTF-8, no deep nesting."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


class StrictJsonRequest(Request):
    """A request whose JSON body must be standard JSON."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
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


__all__ = ["StrictJsonRequest", "StrictJsonRoute"]
