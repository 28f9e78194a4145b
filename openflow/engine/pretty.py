"""Pretty JSON (`json.dumps(value, indent=2, ensure_ascii=False)`), made fast for plain data.

Handoff files, the review's evidence and a request's input are rendered this way on every turn
that makes them. Python's own encoder renders an indented dump in Python, a call per value;
pydantic's serializer makes the very same text natively, for plain data: dicts with string
keys, lists, strings, booleans, None, integers of 64 bits and floats that Python writes without
an exponent (both write the shortest digits that read back the same). Anything else, and
anything the serializer refuses (a lone surrogate, nesting too deep), goes to `json.dumps`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_INT_LIMIT = 1 << 63


def _plain(value: Any) -> bool:
    """Whether both serializers write `value` the same."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_INT_LIMIT < value < _INT_LIMIT)
    if kind is float:
        text = repr(value)
        # No exponent, and not nan or inf.
        return "e" not in text and "n" not in text
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return False


def pretty_json(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False, default=default)`, the same text."""
    try:
        if _plain(value):
            return _ANY.dump_json(value, indent=2).decode()
    except (RecursionError, ValueError, UnicodeError):
        pass
    return json.dumps(value, indent=2, ensure_ascii=False, default=default)


__all__ = ["pretty_json"]
