"""JSON that leaves out fields still at their defaults, for models that travel through history.

Reading it back restores the defaults, so nothing is lost; history just stops paying for
`null`, `false` and `[]` on every activity input and result.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer
from pydantic.fields import FieldInfo

#: Default factories whose every call gives an equal value: their default is made once.
_PLAIN_FACTORIES: tuple[Any, ...] = (list, dict, tuple, set, frozenset)
_UNSET = object()


class OmitDefaults(BaseModel):
    """A model whose serialized form omits optional fields equal to their defaults."""

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for name, keys, default, field in _optional_fields(type(self)):
            for key in keys:
                if key in data:
                    break
            else:
                continue
            if default is _UNSET:
                default = field.get_default(call_default_factory=True)
            if getattr(self, name) == default:
                del data[key]
        return data


_OptionalField = tuple[str, tuple[str, ...], Any, FieldInfo]
_optional: dict[type[BaseModel], tuple[_OptionalField, ...]] = {}


def _optional_fields(model: type[BaseModel]) -> tuple[_OptionalField, ...]:
    """A model's optional fields: each one's name, the keys it may be dumped under and its
    default (`_UNSET` when its factory must be called each time), worked out once a model."""
    known = _optional.get(model)
    if known is None:
        known = tuple(
            (
                name,
                tuple(k for k in (field.serialization_alias, field.alias, name) if k),
                field.get_default(call_default_factory=True)
                if field.default_factory is None or field.default_factory in _PLAIN_FACTORIES
                else _UNSET,
                field,
            )
            for name, field in model.model_fields.items()
            if not field.is_required()
        )
        _optional[model] = known
    return known


__all__ = ["OmitDefaults"]
