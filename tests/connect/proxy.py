"""A TLS front door for the test server: certificates made here, an API key checked per call.

`TlsProxy` terminates TLS (optionally mTLS) with a certificate signed by a CA made in the test,
checks each call's `authorization` metadata like Temporal Cloud does, and forwards the call's
bytes unchanged to the plaintext dev server behind it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The handshakes the tests fail on purpose would otherwise be logged by gRPC's C core.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import grpc  # noqa: E402
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DROPPED = ("authorization", "user-agent", "grpc-", ":")


@dataclass(frozen=True)
class Pem:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    pem = Pem(folder / f"{stem}.crt", folder / f"{stem}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pem


class Authority:
    """A self-signed CA that issues server and client certificates into `folder`."""

    def __init__(self, folder: Path, name: str = "OpenFlow Test CA") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pem = _write(folder, name.lower().replace(" ", "-"), self._cert, self._key)

    def issue(self, stem: str, *, server: bool, names: Sequence[str] = ("localhost",)) -> Pem:
        """A certificate for a server (with `names` and 127.0.0.1 as SANs) or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(stem))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if server:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
            sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _write(self.folder, stem, builder.sign(self._key, hashes.SHA256()), key)


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, channel: grpc.aio.Channel, api_key: str | None) -> None:
        self.channel = channel
        self.api_key = api_key
        self.seen_keys: list[str] = []

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method

        async def forward(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            metadata = list(context.invocation_metadata() or ())
            offered = next((v for k, v in metadata if k == "authorization"), None)
            if self.api_key is not None:
                if isinstance(offered, str):
                    self.seen_keys.append(offered)
                if offered != f"Bearer {self.api_key}":
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "Request unauthorized")
            kept = [(k, v) for k, v in metadata if not k.startswith(_DROPPED)]
            call = self.channel.unary_unary(method)
            try:
                response: bytes = await call(
                    request, metadata=kept, timeout=context.time_remaining()
                )
            except grpc.aio.AioRpcError as exc:
                trailing = tuple(exc.trailing_metadata() or ())
                await context.abort(exc.code(), exc.details() or "", trailing)
            return response

        return grpc.unary_unary_rpc_method_handler(forward)


class TlsProxy:
    """`async with TlsProxy(backend, server_pem, api_key=...) as proxy:` then dial proxy.address."""

    def __init__(
        self,
        backend: str,
        server: Pem,
        *,
        api_key: str | None = None,
        client_ca: Path | None = None,
    ) -> None:
        self.backend = backend
        self.server_pem = server
        self.api_key = api_key
        self.client_ca = client_ca
        self.address = ""
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self._handler: _Forward | None = None

    @property
    def seen_keys(self) -> list[str]:
        """Every authorization value a call offered (to prove where keys went)."""
        return self._handler.seen_keys if self._handler else []

    async def __aenter__(self) -> TlsProxy:
        self._channel = grpc.aio.insecure_channel(self.backend)
        self._handler = _Forward(self._channel, self.api_key)
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers([self._handler])
        credentials = grpc.ssl_server_credentials(
            [(self.server_pem.key.read_bytes(), self.server_pem.cert.read_bytes())],
            root_certificates=self.client_ca.read_bytes() if self.client_ca else None,
            require_client_auth=self.client_ca is not None,
        )
        port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self.address = f"127.0.0.1:{port}"
        await self._server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
        if self._channel is not None:
            await self._channel.close()
