"""Copies the reducer makes many times a step, made the cheap way.

`replaced(model, changes)` is `model.model_copy(update=changes)` without pydantic's generic
copy machinery (three `copy.copy` calls a model); `json_copy(value)` is `copy.deepcopy` of a
JSON value (dicts, lists, strings, numbers, booleans, null), walking only what JSON can hold.
Both give exactly what the originals give.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from pydantic import BaseModel

_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")
_set = object.__setattr__


def replaced(model: _M, changes: Mapping[str, Any]) -> _M:
    """`model.model_copy(update=changes)`: a shallow copy with `changes` (not validated)."""
    if (
        getattr(model, "__pydantic_private__", None) is not None
        or model.__pydantic_extra__ is not None
    ):
        return model.model_copy(update=dict(changes))
    cls = type(model)
    new = cls.__new__(cls)
    _set(new, "__dict__", {**model.__dict__, **changes})
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    _set(new, "__pydantic_private__", None)
    return new


def trusted(cls: type[_M], fields: dict[str, Any]) -> _M:
    """`cls(**fields)` for `fields` that name every field of `cls`, each already of its type
    (what the type checker checks): not validated again. Only the model's own fields, in
    order; its set fields are those given."""
    if list(fields) != list(cls.model_fields):
        raise TypeError(f"{cls.__name__} takes its fields in order: {list(cls.model_fields)}")
    new = cls.__new__(cls)
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_fields_set__", set(fields))
    _set(new, "__pydantic_private__", None)
    return new


def json_copy(value: _T) -> _T:
    """A deep copy of a JSON value; anything else inside it is deep-copied as `copy` does."""
    return cast(_T, _json_copy(value))


def _json_copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _json_copy(v) for k, v in value.items()}
    if kind is list:
        return [_json_copy(v) for v in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


__all__ = ["json_copy", "replaced", "trusted"]
