"""Tenants: bearer keys from settings.json `api_keys`, compared in constant time, never logged.

With no keys configured every caller is the tenant "" (the API then serves loopback only).
settings.json is read on every request (it is small), so adding or revoking a key needs no restart.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
from pathlib import Path

from openflow.api.errors import Unauthorized
from openflow.settings import SETTINGS_FILE, SettingsError, load_settings

_UNREAD = object()
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_SAFE_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class TenantKeys:
    """Maps a bearer key to its tenant, following settings.json as it changes."""

    def __init__(self, home: Path, *, require_keys: bool = False) -> None:
        self.home = home
        self.require_keys = require_keys
        self._lock = threading.Lock()
        self._text: bytes | None | object = _UNREAD
        self._digests: list[tuple[bytes, str]] = []

    def _keys(self) -> list[tuple[bytes, str]]:
        path = self.home / SETTINGS_FILE
        try:
            text: bytes | None = path.read_bytes()
        except FileNotFoundError:
            text = None
        except OSError as exc:
            raise SettingsError(f"cannot read {str(path)!r}: {exc.strerror}") from None
        with self._lock:
            if text != self._text:
                keys = load_settings(self.home).api_keys if text is not None else {}
                self._digests = [(_digest(key), tenant) for key, tenant in keys.items() if key]
                self._text = text
            return self._digests

    @property
    def configured(self) -> bool:
        """Whether settings.json holds at least one API key."""
        return bool(self._keys())

    def tenant_for(self, bearer_key: str | None) -> str:
        """The caller's tenant; raises Unauthorized for a missing or unknown key."""
        keys = self._keys()
        if not keys:
            if self.require_keys:
                raise Unauthorized(
                    "this API listens beyond loopback but settings.json has no api_keys; "
                    "the operator must add keys",
                    headers=_CHALLENGE,
                )
            return ""
        if not bearer_key:
            raise Unauthorized(
                "send your API key as 'Authorization: Bearer <key>'", headers=_CHALLENGE
            )
        offered = _digest(bearer_key)
        found: str | None = None
        for digest, tenant in keys:
            if hmac.compare_digest(digest, offered) and found is None:
                found = tenant
        if found is None:
            raise Unauthorized(
                "the API key is not valid; check it against settings.json api_keys",
                headers=_CHALLENGE,
            )
        return found


def _digest(key: str) -> bytes:
    """Equal-length digests, so comparing keys reveals nothing about their length."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def tenant_home(home: Path, tenant: str) -> Path:
    """Where a tenant's workflow catalog lives: `home` itself for "", else `home/tenants/<id>`."""
    if not tenant:
        return home
    if _SAFE_TENANT.fullmatch(tenant):
        name = tenant
    else:
        name = "t-" + hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return home / "tenants" / name


__all__ = ["TenantKeys", "tenant_home"]
