"""What route handlers receive: the app's context, the caller's tenant, their runs and catalog."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from temporalio.client import Client

from openflow.activities.store import FileRunStore, RunStore
from openflow.api.auth import TenantKeys, tenant_home
from openflow.api.errors import ServiceUnavailable
from openflow.api.sse import LiveSource
from openflow.catalog import Catalog
from openflow.client import Runs
from openflow.connect import ConnectError, TemporalTarget, connect, load_target

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = timedelta(seconds=5)


@dataclass
class ApiContext:
    """Everything the routes share: where files live, how to reach Temporal, who may call."""

    home: Path
    task_queue: str
    namespace: str
    address: str
    keys: TenantKeys
    target: TemporalTarget | None = None
    live: LiveSource | None = None
    poll_interval: float = 0.25
    keepalive_interval: float = 15.0
    client: Client | None = None
    #: The Temporal Web UI the pages link runs to (None: `OPENFLOW_UI_URL` or gRPC port + 1000).
    temporal_ui_url: str | None = None
    #: The run store handoffs, artifacts and transcripts are read from (files or PostgreSQL).
    store: RunStore = field(default_factory=FileRunStore)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    async def temporal(self) -> Client:
        """The Temporal client, connecting on first use; 503 (saying why) while it cannot."""
        if self.client is not None:
            return self.client
        async with self._lock:
            if self.client is None:
                try:
                    target = self.target if self.target is not None else load_target()
                    self.client = await connect(target, connect_timeout=CONNECT_TIMEOUT)
                except ConnectError as exc:
                    logger.warning("%s", exc)
                    raise ServiceUnavailable(str(exc)) from None
            return self.client


_bearer = HTTPBearer(
    auto_error=False,
    description="An API key from settings.json `api_keys` (not needed when none is configured)",
)


def get_context(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.openflow
    return context


ContextDep = Annotated[ApiContext, Depends(get_context)]


def get_tenant(
    context: ContextDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    return context.keys.tenant_for(credentials.credentials if credentials else None)


TenantDep = Annotated[str, Depends(get_tenant)]


async def get_runs(context: ContextDep, tenant: TenantDep) -> Runs:
    return Runs(await context.temporal(), context.task_queue, tenant, store=context.store)


RunsDep = Annotated[Runs, Depends(get_runs)]


def get_catalog(context: ContextDep, tenant: TenantDep) -> Catalog:
    return Catalog(tenant_home(context.home, tenant))


CatalogDep = Annotated[Catalog, Depends(get_catalog)]


__all__ = [
    "ApiContext",
    "CatalogDep",
    "ContextDep",
    "RunsDep",
    "TenantDep",
    "get_catalog",
    "get_context",
    "get_runs",
    "get_tenant",
]
