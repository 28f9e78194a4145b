"""The project's data converter: pydantic payloads, with one cache of type adapters a process.

The SDK makes a payload converter for every workflow a worker holds (and keeps it as long as
the run stays cached). `temporalio.contrib.pydantic`'s makes its own JSON converter each time,
with its own serializer and cache of type adapters, so every cached run rebuilt and kept the
adapters of its input, its results and its queries: several KB of a paused run, and the CPU
to build them on its first workflow task. Here every converter shares one JSON converter,
whose adapters are built once; the payloads are byte for byte the same.
"""

from __future__ import annotations

from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
)
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

_JSON = PydanticJSONPlainPayloadConverter()


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` over the process's one JSON converter (its lru cache of
    type adapters is thread-safe)."""

    def __init__(self) -> None:
        CompositePayloadConverter.__init__(
            self,
            *(
                _JSON if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            ),
        )


#: What every client and worker of OpenFlow speaks.
data_converter = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)

__all__ = ["SharedPydanticPayloadConverter", "data_converter"]
