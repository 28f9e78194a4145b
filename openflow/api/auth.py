"""Tenants: bearer keys from settings.json `api_keys` and `OPENFLOW_API_KEYS`, compared in
constant time, never logged.

`OPENFLOW_API_KEYS` adds keys without editing settings.json (a container's environment or a
mounted secret): `key=tenant` pairs separated by commas, or `@PATH` of a file with one pair a
line (blank lines and `#` comments allowed). A key may contain `=`; the tenant after the last
`=` may not. For a key in both places the variable wins.

With no keys configured every caller is the tenant "" (the API then serves loopback only).
settings.json and the `@PATH` file are read on every request (they are small), so adding or
revoking a key needs no restart.

Errors::

    ApiKeysInvalid   OPENFLOW_API_KEYS cannot be read or parsed (a SettingsError)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
from pathlib import Path

from openflow.api.errors import Unauthorized
from openflow.settings import SETTINGS_FILE, SettingsError, load_settings, runtime_settings

API_KEYS_VARIABLE = "OPENFLOW_API_KEYS"
_UNREAD = object()


def _env_keys() -> str:
    keys = runtime_settings(only=("api_keys",)).api_keys
    return keys.get_secret_value() if keys is not None else ""


_FORMS = "give KEY=TENANT pairs separated by commas, or @PATH of a file with one pair a line"


class ApiKeysInvalid(SettingsError):
    """OPENFLOW_API_KEYS cannot be read or parsed; the message never quotes a key."""


def parse_api_keys(value: str) -> dict[str, str]:
    """The keys `OPENFLOW_API_KEYS` gives, by key; raises ApiKeysInvalid naming the variable."""
    text = value.strip()
    if not text:
        return {}
    if text.startswith("@"):
        where = text[1:].strip()
        if not where:
            raise ApiKeysInvalid(f"{API_KEYS_VARIABLE}=@ names no file; {_FORMS}")
        path = Path(where).expanduser()
        try:
            content = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ApiKeysInvalid(
                f"{API_KEYS_VARIABLE} file {where!r}: no such file; {_FORMS}"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ApiKeysInvalid(
                f"{API_KEYS_VARIABLE} file {where!r} cannot be read ({reason})"
            ) from None
        entries = [
            (f"line {number} of {where!r}", line.strip())
            for number, line in enumerate(content.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    else:
        parts = text.split(",")
        entries = [(f"entry {n} of {len(parts)}", p.strip()) for n, p in enumerate(parts, 1)]
        entries = [(where, part) for where, part in entries if part]
    keys: dict[str, str] = {}
    for where, entry in entries:
        key, sep, tenant = entry.rpartition("=")
        key, tenant = key.strip(), tenant.strip()
        if not sep or not key or not tenant:
            raise ApiKeysInvalid(f"{API_KEYS_VARIABLE}: {where} is not KEY=TENANT; {_FORMS}")
        if keys.get(key, tenant) != tenant:
            raise ApiKeysInvalid(
                f"{API_KEYS_VARIABLE}: {where} gives a key already given to another tenant; "
                "each key belongs to one tenant"
            )
        keys[key] = tenant
    return keys


_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_SAFE_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class TenantKeys:
    """Maps a bearer key to its tenant, following settings.json as it changes."""

    def __init__(
        self, home: Path, *, require_keys: bool = False, env_keys: str | None = None
    ) -> None:
        self.home = home
        self.require_keys = require_keys
        self.env_keys = _env_keys() if env_keys is None else env_keys
        self._lock = threading.Lock()
        self._text: object = _UNREAD
        self._digests: list[tuple[bytes, str]] = []

    def _env_text(self) -> str | bytes:
        """What OPENFLOW_API_KEYS says now: its value, or the bytes of its `@PATH` file."""
        value = self.env_keys.strip()
        if not value.startswith("@"):
            return value
        try:
            return Path(value[1:].strip()).expanduser().read_bytes()
        except OSError:
            return value  # parse_api_keys says what is wrong with it

    def _keys(self) -> list[tuple[bytes, str]]:
        path = self.home / SETTINGS_FILE
        try:
            text: bytes | None = path.read_bytes()
        except FileNotFoundError:
            text = None
        except OSError as exc:
            raise SettingsError(f"cannot read {str(path)!r}: {exc.strerror}") from None
        seen = (text, self._env_text())
        with self._lock:
            if seen != self._text:
                keys = load_settings(self.home).api_keys if text is not None else {}
                keys = {**keys, **parse_api_keys(self.env_keys)}
                self._digests = [(_digest(key), tenant) for key, tenant in keys.items() if key]
                self._text = seen
            return self._digests

    @property
    def configured(self) -> bool:
        """Whether settings.json or OPENFLOW_API_KEYS holds at least one API key."""
        return bool(self._keys())

    def tenant_for(self, bearer_key: str | None) -> str:
        """The caller's tenant; raises Unauthorized for a missing or unknown key."""
        keys = self._keys()
        if not keys:
            if self.require_keys:
                raise Unauthorized(
                    "this API listens beyond loopback but settings.json has no api_keys and "
                    "OPENFLOW_API_KEYS is unset; the operator must add keys",
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
                "the API key is not valid; check it against settings.json api_keys or "
                "OPENFLOW_API_KEYS",
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


__all__ = ["API_KEYS_VARIABLE", "ApiKeysInvalid", "TenantKeys", "parse_api_keys", "tenant_home"]
