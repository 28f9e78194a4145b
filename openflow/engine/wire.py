"""JSON that leaves out fields still at their defaults, for models that travel through history.

Reading it back restores the defaults, so nothing is lost; history just stops paying for
`null`, `false` and `[]` on every activity input and result.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, get_origin

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer
from pydantic.fields import FieldInfo

#: Default factories whose every call gives an equal value: their default is made once.
_PLAIN_FACTORIES: tuple[Any, ...] = (list, dict, tuple, set, frozenset)
_UNSET = object()


class OmitDefaults(BaseModel):
    """A model whose serialized form omits optional fields equal to their defaults."""

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_defaults(self, handler(self))


def omit_defaults(value: BaseModel, data: Any) -> Any:
    """`data`, the dump of `value`, without its top-level optional fields at their defaults."""
    if not isinstance(data, dict):
        return data
    held = value.__dict__
    for name, keys, default, field in _optional_fields(type(value)):
        for key in keys:
            if key in data:
                break
        else:
            continue
        if default is _UNSET:
            default = _fresh_default(field)
        item = held[name] if name in held else getattr(value, name)
        if item is default or item == default:
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
                tuple(
                    dict.fromkeys(k for k in (field.serialization_alias, field.alias, name) if k)
                ),
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


#: Whether each default factory seen takes the validated data (asking costs a signature).
_takes_data: dict[Any, bool] = {}


def _fresh_default(field: FieldInfo) -> Any:
    """A field's default from its factory, called directly when it takes no arguments."""
    factory = field.default_factory
    if factory is None:
        return field.get_default(call_default_factory=True)
    takes = _takes_data.get(factory)
    if takes is None:
        takes = _takes_data[factory] = bool(field.default_factory_takes_validated_data)
    if takes:
        return field.get_default(call_default_factory=True)
    return factory()  # type: ignore[call-arg]


def _strip(value: Any, data: Any) -> None:
    """Delete from `data` (the JSON dump of `value`) every field at its default, however deep;
    a `Literal` field (a union's discriminator) stays."""
    if isinstance(value, BaseModel) and isinstance(data, dict):
        optional = {name: (default, f) for name, _, default, f in _optional_fields(type(value))}
        for name, field in type(value).model_fields.items():
            keys = (field.serialization_alias, field.alias, name)
            key = next((k for k in keys if k and k in data), None)
            if key is None:
                continue
            item = getattr(value, name)
            default, _ = optional.get(name, (_UNSET, None))
            if name in optional and default is _UNSET:
                default = _fresh_default(field)
            if name in optional and item == default and get_origin(field.annotation) is not Literal:
                del data[key]
            else:
                _strip(item, data[key])
    elif isinstance(value, list | tuple) and isinstance(data, list) and len(value) == len(data):
        for item, dumped in zip(value, data, strict=True):
            _strip(item, dumped)
    elif isinstance(value, dict) and isinstance(data, dict):
        for key, item in value.items():
            if isinstance(key, str) and key in data:
                _strip(item, data[key])


def without_defaults(value: BaseModel, data: Any) -> Any:
    """`data`, the JSON dump of `value`, without the fields at their defaults at any depth,
    when it reads back as `value`; `data` whole when it would not."""
    if not isinstance(data, dict):
        return data
    slim = copy.deepcopy(data)
    _strip(value, slim)
    try:
        same = type(value).model_validate(slim) == value
    except ValueError:
        same = False
    return slim if same else data


__all__ = ["OmitDefaults", "omit_defaults", "without_defaults"]
