"""Reaching Temporal: every client is built here, from Temporal's own environment configuration.

The settings come from `temporalio.envconfig`: `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`,
`TEMPORAL_API_KEY`, `TEMPORAL_TLS`, `TEMPORAL_TLS_CLIENT_CERT_PATH`,
`TEMPORAL_TLS_CLIENT_KEY_PATH`, `TEMPORAL_TLS_SERVER_CA_CERT_PATH`, `TEMPORAL_TLS_SERVER_NAME`,
and the profiles of the TOML file (`TEMPORAL_CONFIG_FILE`, else Temporal's default location)
chosen by `TEMPORAL_PROFILE`. `OPENFLOW_TEMPORAL_ADDRESS` and `OPENFLOW_NAMESPACE` win when set.
So Temporal Cloud (API key or mTLS) and self-hosted TLS clusters work like the local server.

A refused connection becomes one `ConnectError` line that says what failed and what to set.
API keys never appear in a message or a `repr`.

Errors::

    ConnectError            base: the connection could not be made
    ├── ConfigInvalid       the settings cannot be used (address, TOML file, profile, TLS files)
    ├── Unreachable         nothing answers at the address
    ├── TlsFailed           the TLS handshake failed (CA, server name, client certificate)
    ├── AuthFailed          the cluster refused the credentials (authentication, permission)
    └── NamespaceNotFound   the namespace does not exist on the cluster
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.bridge.temporal_sdk_bridge import envconfig as _bridge_envconfig
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from openflow.payloads import data_converter as pydantic_data_converter
from openflow.server import DEFAULT_ADDRESS, DEFAULT_NAMESPACE

CONNECT_TIMEOUT = timedelta(seconds=10)
FIRST_CALL_TIMEOUT_S = 30.0

__all__ = [
    "AuthFailed",
    "ConfigInvalid",
    "ConnectError",
    "NamespaceNotFound",
    "TemporalTarget",
    "TlsFailed",
    "Unreachable",
    "check_address",
    "connect",
    "load_target",
    "local_target",
]


class ConnectError(Exception):
    """Temporal could not be reached with these settings; the message is one line to act on."""


class ConfigInvalid(ConnectError, ValueError):
    """The connection settings cannot be used as they are."""


class Unreachable(ConnectError):
    """Nothing answers at the address."""


class TlsFailed(ConnectError):
    """The TLS handshake with the cluster failed."""


class AuthFailed(ConnectError):
    """The cluster refused the API key or client certificate."""


class NamespaceNotFound(ConnectError):
    """The namespace does not exist on the cluster."""


@dataclass(frozen=True)
class TemporalTarget:
    """Where and how to connect: address, namespace and the credentials, which never print."""

    address: str
    namespace: str = DEFAULT_NAMESPACE
    api_key: SecretStr | None = field(default=None, repr=False)
    tls: bool | TLSConfig | None = field(default=None, repr=False)
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)
    address_from: str = "the default"
    profile: str | None = None

    @property
    def secure(self) -> bool:
        """Whether the connection uses TLS."""
        return self.tls not in (None, False) or (self.api_key is not None and self.tls is None)

    def describe(self) -> str:
        """The address and namespace, and how the connection is secured (never the key)."""
        how = [w for w, on in (("TLS", self.secure), ("API key", self.api_key)) if on]
        return f"{self.address} (namespace {self.namespace!r}{''.join(', ' + w for w in how)})"

    def connect_kwargs(self) -> dict[str, Any]:
        """The arguments `Client.connect` takes for this target."""
        kwargs: dict[str, Any] = {"namespace": self.namespace}
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key.get_secret_value()
        if self.tls is not None:
            kwargs["tls"] = self.tls
        if self.rpc_metadata:
            kwargs["rpc_metadata"] = dict(self.rpc_metadata)
        return kwargs


_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


def check_address(address: str, source: str = "OPENFLOW_TEMPORAL_ADDRESS") -> str:
    """Return `address` if it is HOST:PORT (IPv6 in brackets), else raise `ConfigInvalid`."""
    text = address.strip()
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        try:
            ok_host = ipaddress.ip_address(host[1:-1]).version == 6
        except ValueError:
            ok_host = False
    else:
        ok_host = bool(_HOST.fullmatch(host))
    if not sep or not ok_host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigInvalid(
            f"Temporal address {address!r} (from {source}) is not HOST:PORT with a port from "
            f"1 to 65535; set it like {DEFAULT_ADDRESS!r} or 'my-ns.a1b2c.tmprl.cloud:7233'"
        )
    return text


def local_target(address: str, namespace: str = DEFAULT_NAMESPACE) -> TemporalTarget:
    """A plaintext target without credentials: the embedded server this process started."""
    return TemporalTarget(address=address, namespace=namespace, tls=False, address_from="server")


def _env_value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _config_problem(message: str, env: Mapping[str, str]) -> ConfigInvalid:
    """A one-line, secret-free error for what `temporalio.envconfig` refused."""
    where = _env_value(env, "TEMPORAL_CONFIG_FILE") or "Temporal's client configuration file"
    profile = re.search(r"[Pp]rofile '([^']*)' not found", message)
    if profile:
        return ConfigInvalid(
            f"Temporal profile {profile.group(1)!r} (TEMPORAL_PROFILE) is not in {where}; "
            "add a [profile.NAME] table to the file or set TEMPORAL_PROFILE to one it has"
        )
    toml = re.search(r"TOML parse error at line (\d+), column (\d+)", message)
    if toml:
        return ConfigInvalid(
            f"{where} is not valid TOML (line {toml.group(1)}, column {toml.group(2)}); fix it"
        )
    # Only the first line: later ones may quote the file, and the file may hold a key.
    first = message.strip().splitlines()[0] if message.strip() else "unreadable"
    return ConfigInvalid(f"{where} cannot be used ({first[:200]}); fix it")


def load_target(
    env: Mapping[str, str] | None = None,
    *,
    address: str | None = None,
    namespace: str | None = None,
) -> TemporalTarget:
    """The target from Temporal's environment configuration, with OpenFlow's variables on top.

    `address` and `namespace`, when given, win over everything (a caller that knows them).
    """
    # An empty variable is an unset one (compose's `${TEMPORAL_API_KEY:-}`), not "TLS on".
    env = {k: v for k, v in (os.environ if env is None else env).items() if v.strip()}
    config_file = _env_value(env, "TEMPORAL_CONFIG_FILE")
    if config_file is not None:
        path = Path(config_file).expanduser()
        if not path.is_file():
            raise ConfigInvalid(
                f"TEMPORAL_CONFIG_FILE {config_file!r}: no such file; give the path of a "
                "Temporal TOML configuration or unset it"
            )
    profile_name = _env_value(env, "TEMPORAL_PROFILE")
    try:
        profile = ClientConfigProfile.load(profile=profile_name, override_env_vars=env)
    except _bridge_envconfig.ConfigError as exc:
        raise _config_problem(str(exc), env) from None
    try:
        config = profile.to_client_connect_config()
    except OSError as exc:
        what = exc.filename if exc.filename is not None else "a TLS file"
        raise ConfigInvalid(
            f"cannot read TLS file {str(what)!r} ({exc.strerror or exc}); check "
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_CLIENT_CERT_PATH and "
            "TEMPORAL_TLS_CLIENT_KEY_PATH (or the profile's tls paths)"
        ) from None
    chosen, source = _pick(
        (address, "the caller"),
        (_env_value(env, "OPENFLOW_TEMPORAL_ADDRESS"), "OPENFLOW_TEMPORAL_ADDRESS"),
        (_env_value(env, "TEMPORAL_ADDRESS"), "TEMPORAL_ADDRESS"),
        (config.get("target_host"), f"profile {profile_name or 'default'!r}"),
        (DEFAULT_ADDRESS, "the default"),
    )
    chosen_namespace, _ = _pick(
        (namespace, ""),
        (_env_value(env, "OPENFLOW_NAMESPACE"), ""),
        (config.get("namespace") or None, ""),
        (DEFAULT_NAMESPACE, ""),
    )
    key = config.get("api_key")
    return TemporalTarget(
        address=check_address(chosen, source),
        namespace=chosen_namespace,
        api_key=SecretStr(key) if key else None,
        tls=config.get("tls"),
        rpc_metadata=dict(config.get("rpc_metadata") or {}),
        address_from=source,
        profile=profile_name,
    )


def _pick(*candidates: tuple[str | None, str]) -> tuple[str, str]:
    for value, source in candidates:
        if value:
            return value, source
    raise AssertionError("the last candidate is a default")


async def connect(
    target: TemporalTarget | None = None,
    *,
    data_converter: DataConverter = pydantic_data_converter,
    check_namespace: bool = True,
    **kwargs: Any,
) -> Client:
    """A client of `target` (default: `load_target()`) speaking the project's pydantic payloads.

    Raises a `ConnectError` whose message says in one line what failed and what to set.
    """
    target = target if target is not None else load_target()
    options = {**target.connect_kwargs(), "data_converter": data_converter, **kwargs}
    options.setdefault("connect_timeout", CONNECT_TIMEOUT)
    if "plugins" not in options:
        from openflow.telemetry import client_plugins

        options["plugins"] = client_plugins()
    try:
        client = await asyncio.wait_for(
            Client.connect(target.address, **options), FIRST_CALL_TIMEOUT_S
        )
    except TimeoutError:
        raise Unreachable(
            f"Temporal at {target.address!r} did not answer within {FIRST_CALL_TIMEOUT_S:.0f}s; "
            "check the address and that the cluster is up"
        ) from None
    except (RuntimeError, ValueError) as exc:
        raise classify(str(exc), target) from None
    if check_namespace:
        await _check_namespace(client, target)
    return client


async def _check_namespace(client: Client, target: TemporalTarget) -> None:
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=target.namespace),
            timeout=timedelta(seconds=FIRST_CALL_TIMEOUT_S),
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise NamespaceNotFound(
                f"namespace {target.namespace!r} does not exist on Temporal at "
                f"{target.address!r}; create it or set TEMPORAL_NAMESPACE (or OPENFLOW_NAMESPACE)"
                " to one that does"
            ) from None
        if exc.status in (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED):
            raise _auth_failed(exc.status, _scrub(exc.message, target), target) from None
        if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            raise Unreachable(
                f"Temporal at {target.address!r} stopped answering "
                f"({_scrub(exc.message, target)}); check that the cluster is up"
            ) from None
        # Anything else (an old server, a proxy that does not route the call) is not ours to
        # judge: the command's own calls will say what is wrong.


def _scrub(text: str, target: TemporalTarget) -> str:
    line = " ".join(text.split())
    if target.api_key is not None:
        secret = target.api_key.get_secret_value()
        if secret:
            line = line.replace(secret, "***")
    return line[:300]


def _auth_failed(status: RPCStatusCode, message: str, target: TemporalTarget) -> AuthFailed:
    if status == RPCStatusCode.PERMISSION_DENIED:
        return AuthFailed(
            f"Temporal at {target.address!r} denied permission for namespace "
            f"{target.namespace!r} ({message}); give the API key or certificate access to it, "
            "or set TEMPORAL_NAMESPACE"
        )
    offered = "the API key" if target.api_key is not None else "no API key"
    return AuthFailed(
        f"authentication failed at Temporal {target.address!r} with {offered} ({message}); "
        "check TEMPORAL_API_KEY (or the profile's api_key) and the client certificate"
    )


_TLS_HINTS: tuple[tuple[str, str], ...] = (
    (
        "UnknownIssuer",
        "the server's certificate is not signed by a CA this client trusts; set "
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH to the cluster's CA certificate",
    ),
    (
        "NotValidForName",
        "the server's certificate is not valid for the name it was reached by; set "
        "TEMPORAL_TLS_SERVER_NAME to a name the certificate holds",
    ),
    ("InvalidCertificate(Expired", "the server's certificate has expired"),
    (
        "InvalidContentType",
        "the server did not answer in TLS (a plaintext port?); unset TEMPORAL_TLS and "
        "TEMPORAL_API_KEY, or use the cluster's TLS address",
    ),
    (
        "CertificateRequired",
        "the server requires a client certificate; set TEMPORAL_TLS_CLIENT_CERT_PATH and "
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
    ),
    (
        "HandshakeFailure",
        "the server refused the handshake (a client certificate it does not accept?); check "
        "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH",
    ),
    (
        "BadCertificate",
        "the server refused the client certificate; check TEMPORAL_TLS_CLIENT_CERT_PATH and "
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
    ),
    (
        "KeyMismatch",
        "TEMPORAL_TLS_CLIENT_KEY_PATH is not the key of TEMPORAL_TLS_CLIENT_CERT_PATH; give the "
        "matching pair",
    ),
    (
        "UnknownCA",
        "the server does not trust the client certificate's CA; check "
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
    ),
)

_TLS_MARKS = (
    "InvalidCertificate",
    "InvalidMessage",
    "AlertReceived",
    "PeerMisbehaved",
    "InconsistentKeys",
    "tls",
)
_CLOSED = ("connection closed", "broken pipe", "transport error", "connection reset")
_AUTH = re.compile(r"code:\s*(Unauthenticated|PermissionDenied)[^\n]*?message:\s*\"([^\"]*)\"")


def classify(message: str, target: TemporalTarget) -> ConnectError:
    """The `ConnectError` a failed `Client.connect` means, from the SDK's error text."""
    text = message
    auth = _AUTH.search(text)
    if auth:
        status = (
            RPCStatusCode.PERMISSION_DENIED
            if auth.group(1) == "PermissionDenied"
            else RPCStatusCode.UNAUTHENTICATED
        )
        return _auth_failed(status, _scrub(auth.group(2), target), target)
    if "invalid target URL" in text or "invalid port" in text:
        return ConfigInvalid(
            f"Temporal address {target.address!r} (from {target.address_from}) is not a valid "
            f"HOST:PORT; set it like {DEFAULT_ADDRESS!r}"
        )
    hint = next((h for mark, h in _TLS_HINTS if mark in text), None)
    if hint is not None:
        return TlsFailed(f"TLS handshake with Temporal at {target.address!r} failed: {hint}")
    if "dns error" in text or "lookup address" in text:
        host = target.address.rpartition(":")[0]
        return Unreachable(
            f"cannot reach Temporal at {target.address!r} (host {host!r} not found); "
            "check TEMPORAL_ADDRESS or OPENFLOW_TEMPORAL_ADDRESS"
        )
    if "tcp connect error" in text or "refused" in text.lower() or "timed out" in text.lower():
        reason = "connection refused" if "refused" in text.lower() else "connection timed out"
        return Unreachable(
            f"cannot reach Temporal at {target.address!r} ({reason}); {_start(target)}"
        )
    if "after connection" in text and any(mark in text.lower() for mark in _CLOSED):
        # The handshake looked fine to the client but the server hung up at the first call:
        # a TLS server reached in plaintext, or (TLS 1.3) a client certificate it refused.
        if target.secure:
            return TlsFailed(
                f"TLS handshake with Temporal at {target.address!r} failed: the server closed "
                "the connection (it may require a client certificate it trusts); check "
                "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"
            )
        return TlsFailed(
            f"Temporal at {target.address!r} closed the connection at the first call; if it "
            "expects TLS set TEMPORAL_TLS=true (and TEMPORAL_TLS_SERVER_CA_CERT_PATH for a "
            "private CA)"
        )
    if any(mark.lower() in text.lower() for mark in _TLS_MARKS):
        return TlsFailed(
            f"TLS handshake with Temporal at {target.address!r} failed "
            f"({_scrub(_tail(text), target)}); check the TEMPORAL_TLS_* settings"
        )
    return Unreachable(
        f"cannot reach Temporal at {target.address!r} ({_scrub(_tail(text), target)}); "
        f"{_start(target)}"
    )


def _tail(text: str) -> str:
    """The SDK's message without its wrapper: 'Failed client connect: ...' and Rust debug."""
    line = text.strip().splitlines()[0] if text.strip() else "no detail"
    return line.removeprefix("Failed client connect: ")[:200]


def _start(target: TemporalTarget) -> str:
    host = target.address.rpartition(":")[0].strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return (
            "start it with `openflow server` or `openflow dev`, or set TEMPORAL_ADDRESS "
            "(or OPENFLOW_TEMPORAL_ADDRESS)"
        )
    return "check TEMPORAL_ADDRESS (or OPENFLOW_TEMPORAL_ADDRESS) and that the cluster is up"
