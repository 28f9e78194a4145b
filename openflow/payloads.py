"""The project's data converter: pydantic payloads, with one cache of type adapters a process.

The SDK makes a payload converter for every workflow a worker holds (and keeps it as long as
the run stays cached). `temporalio.contrib.pydantic`'s makes its own JSON converter each time,
with its own serializer and cache of type adapters, so every cached run rebuilt and kept the
adapters of its input, its results and its queries: several KB of a paused run, and the CPU
to build them on its first workflow task. Here every converter shares one JSON converter,
whose adapters are built once; the payloads are byte for byte the same. The composite over it
is one a process too (the SDK wraps it for each run): none of its converters takes a
serialization context, so nothing of it is the run's own.
"""

from __future__ import annotations

from typing import ClassVar

from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
)
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    SerializationContext,
)

_JSON = PydanticJSONPlainPayloadConverter()


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` over the process's one JSON converter (its lru cache of
    type adapters is thread-safe), itself one a process: every construction answers it."""

    _one: ClassVar[SharedPydanticPayloadConverter | None] = None

    def __new__(cls) -> SharedPydanticPayloadConverter:
        one = cls._one
        if one is None or type(one) is not cls:
            one = super().__new__(cls)
            CompositePayloadConverter.__init__(
                one,
                *(
                    _JSON if isinstance(c, JSONPlainPayloadConverter) else c
                    for c in DefaultPayloadConverter.default_encoding_payload_converters
                ),
            )
            cls._one = one
        return one

    def __init__(self) -> None:
        """Made once, in `__new__`."""

    def with_context(self, context: SerializationContext) -> SharedPydanticPayloadConverter:
        converters = self.get_converters_with_context(context)
        if converters is None:
            return self
        # A converter that takes a context gets a composite of its own, never the shared one.
        fresh = object.__new__(type(self))
        CompositePayloadConverter.__init__(fresh, *converters)
        return fresh


#: What every client and worker of OpenFlow speaks.
data_converter = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)

__all__ = ["SharedPydanticPayloadConverter", "data_converter"]
