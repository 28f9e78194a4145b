"""JSON that leaves out fields still at their defaults, for models that travel through history.

Reading it back restores the defaults, so nothing is lost; history just stops paying for
`null`, `false` and `[]` on every activity input and result.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer


class OmitDefaults(BaseModel):
    """A model whose serialized form omits optional fields equal to their defaults."""

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for name, field in type(self).model_fields.items():
            if field.is_required():
                continue
            keys = (field.serialization_alias, field.alias, name)
            key = next((k for k in keys if k and k in data), None)
            if key is None:
                continue
            if getattr(self, name) == field.get_default(call_default_factory=True):
                del data[key]
        return data


__all__ = ["OmitDefaults"]
