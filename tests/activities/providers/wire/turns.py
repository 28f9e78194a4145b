"""What a fake model says in one turn, independent of the wire that carries it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class FakeCall:
    """A tool call; `arguments` is the raw JSON text the model writes (may be malformed)."""

    id: str
    name: str
    arguments: str


@dataclass
class FakeUsage:
    input: int = 120
    output: int = 30
    cached: int = 0
    cache_write: int = 0


@dataclass
class FakeTurn:
    """One streamed model turn."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: list[FakeCall] = field(default_factory=list)
    finish: Literal["stop", "length"] = "stop"
    usage: FakeUsage = field(default_factory=FakeUsage)
    model: str = ""
    cut_after_events: int | None = None
    gate_after_first_delta: bool = False


@dataclass
class FakeError:
    """An HTTP error response."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    error_type: str = ""
