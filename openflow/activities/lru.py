"""A small bounded map for the caches a worker keeps of what runs stored."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """Values by key, dropping the least recently stored entry beyond `limit`; thread-safe
    (activities fill caches from the event loop and from worker threads)."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._items: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items.pop(key, None)
            while len(self._items) >= self.limit:
                self._items.pop(next(iter(self._items)))
            self._items[key] = value


__all__ = ["Lru"]
