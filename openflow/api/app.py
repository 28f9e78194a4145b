"""The FastAPI application over the Temporal client, and `serve` for `openflow api`."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import sys
from collections.abc import AsyncIterator
from importlib import metadata
from pathlib import Path

from fastapi import FastAPI
from temporalio.client import Client

from openflow.activities.store import RunStore
from openflow.api import docs, files, health, inbox, pages, runs, schedules, workflows
from openflow.api.auth import TenantKeys
from openflow.api.deps import ApiContext
from openflow.api.errors import ServiceUnavailable, UnsafeBind, install_error_handlers
from openflow.api.middleware import BodyLimit, ErrorBoundary
from openflow.api.sse import LiveSource
from openflow.backends import Backends
from openflow.connect import ConnectError, connect, load_target
from openflow.engine.limits import MAX_REQUEST_BYTES
from openflow.paths import openflow_home
from openflow.server import task_queue as default_task_queue
from openflow.server import temporal_address, temporal_namespace
from openflow.settings import check_webhooks

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_BODY_BYTES = MAX_REQUEST_BYTES.value

DESCRIPTION = """\
Start OpenFlow runs, follow them live, answer their pauses and manage the workflow catalog.

Authenticate with `Authorization: Bearer <key>` using a key from settings.json `api_keys` or
`OPENFLOW_API_KEYS` (with no keys configured the API serves loopback only and needs none). Every error is
`{"error": {"code", "message", "details"?}}`.
"""


def create_app(
    client: Client | None = None,
    *,
    home: Path | None = None,
    task_queue: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    live: LiveSource | None = None,
    require_keys: bool = False,
    poll_interval: float = 0.25,
    keepalive_interval: float = 15.0,
    store: RunStore | None = None,
    temporal_ui_url: str | None = None,
) -> FastAPI:
    """The API app; without `client` it connects to the configured Temporal at start-up."""
    home = home if home is not None else openflow_home()
    address, namespace = temporal_address(), temporal_namespace()
    with contextlib.suppress(ConnectError):  # said again, with the reason, on first use
        target = load_target()
        address, namespace = target.address, target.namespace
    if live is None or store is None:
        from openflow.backends import open_backends

        backends = open_backends(home)
        live = live if live is not None else backends.live
        store = store if store is not None else backends.store
    context = ApiContext(
        home=home,
        task_queue=task_queue or default_task_queue(),
        namespace=client.namespace if client is not None else namespace,
        address=address,
        keys=TenantKeys(home, require_keys=require_keys),
        live=live,
        store=store,
        poll_interval=poll_interval,
        keepalive_interval=keepalive_interval,
        client=client,
        temporal_ui_url=temporal_ui_url,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if context.client is None:
            with contextlib.suppress(ServiceUnavailable):
                await context.temporal()
        yield

    app = FastAPI(
        title="OpenFlow",
        description=DESCRIPTION,
        version=_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.openflow = context
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(workflows.router)
    app.include_router(runs.router)
    app.include_router(schedules.router)
    app.include_router(files.router)
    app.include_router(inbox.router)
    app.include_router(pages.router)
    docs.install(app)
    app.add_middleware(ErrorBoundary)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, home: Path | None = None) -> None:
    """Serve the API with uvicorn until interrupted.

    Raises UnsafeBind for an open, keyless bind, ApiKeysInvalid for a bad OPENFLOW_API_KEYS and
    ConnectError when Temporal refuses the connection: the API does not start half-configured.
    """
    home = home if home is not None else openflow_home()
    check_webhooks(home)  # a bad webhooks entry stops the API here, in one line
    loopback = is_loopback(host)
    keys = TenantKeys(home)
    if not keys.configured and not loopback:
        raise UnsafeBind(
            f"refusing to serve the API on {host!r}: no API keys are configured, so anyone "
            f"who reaches the port could drive every run; set OPENFLOW_API_KEYS=KEY=TENANT "
            f"or add api_keys to {home / 'settings.json'} or use --host 127.0.0.1"
        )
    from openflow.backends import open_backends

    # A database that cannot be used stops the API here, before it connects to Temporal.
    backends = open_backends(home)
    asyncio.run(_serve(host, port, home, backends, loopback=loopback, keyless=not keys.configured))


async def _serve(
    host: str, port: int, home: Path, backends: Backends, *, loopback: bool, keyless: bool
) -> None:
    import uvicorn

    client = await connect(load_target())
    app = create_app(
        client,
        home=home,
        require_keys=not loopback,
        live=backends.live,
        store=backends.store,
    )
    if keyless:
        print(
            f"OpenFlow API: no API keys configured, serving loopback only "
            f"(http://{host}:{port}, pages at /ui, docs at /docs)",
            file=sys.stderr,
            flush=True,
        )
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info"))
    await server.serve()


def _version() -> str:
    try:
        return metadata.version("openflow-temporal")
    except metadata.PackageNotFoundError:
        return "0.0.0"


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "is_loopback", "serve"]
