"""`/ui`: pages for the people in the loop, a server-rendered shell and one hand-written script.

The pages carry no data of their own: the script (`ui/ui.js`) reads and acts through the API's
JSON routes with the bearer key kept in session storage, so a page shows exactly what its caller
may see. Everything is served from the package (no CDN, no build step) under a strict
Content-Security-Policy: no inline script, no framing, nothing fetched from another origin.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse, Response

from openflow.api.deps import ContextDep
from openflow.api.errors import NotFound
from openflow.settings import runtime_settings

ASSETS = Path(__file__).with_name("ui")
ASSET_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
TEMPORAL_UI_VARIABLE = "OPENFLOW_UI_URL"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

router = APIRouter(prefix="/ui", include_in_schema=False)

RunId = Annotated[str, PathParam(min_length=1, max_length=1000)]


def temporal_ui_url(address: str) -> str:
    """The Temporal Web UI's base URL: `OPENFLOW_UI_URL` (the Web UI base URL `openflow run` uses too), else the gRPC port + 1000."""
    configured = runtime_settings(only=("ui_url",)).ui_url
    if configured:
        return configured.rstrip("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return ""
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{int(port) + 1000}"


def _page(context: ContextDep, page: str, title: str, **data: str) -> HTMLResponse:
    attrs = {"page": page, "namespace": context.namespace}
    attrs["temporal-ui"] = context.temporal_ui_url or temporal_ui_url(context.address)
    attrs.update({key.replace("_", "-"): value for key, value in data.items()})
    body_attrs = " ".join(f'data-{key}="{html.escape(value)}"' for key, value in attrs.items())
    nav = " ".join(
        f'<a href="{href}"{" aria-current=page" if page == name else ""}>{label}</a>'
        for name, href, label in (("runs", "/ui", "Runs"), ("inbox", "/ui/inbox", "Inbox"))
    )
    text = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · OpenFlow</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/ui/assets/ui.css">
<script src="/ui/assets/ui.js" defer></script>
</head>
<body {body_attrs}>
<header class="top"><a class="brand" href="/ui">OpenFlow</a><nav>{nav}</nav>
<span id="who"></span></header>
<main id="main"><noscript>These pages need JavaScript.</noscript></main>
</body>
</html>
"""
    return HTMLResponse(text, headers=SECURITY_HEADERS)


@router.get("")
async def runs_page(context: ContextDep) -> HTMLResponse:
    """The caller's runs, newest first, and a form to start one."""
    return _page(context, "runs", "Runs")


@router.get("/inbox")
async def inbox_page(context: ContextDep) -> HTMLResponse:
    """Every pause waiting for a person, answerable in place."""
    return _page(context, "inbox", "Inbox")


@router.get("/runs/{run_id}")
async def run_page(run_id: RunId, context: ContextDep) -> HTMLResponse:
    """One run, live."""
    return _page(context, "run", f"Run {run_id}", run_id=run_id, run_path=quote(run_id, safe=""))


@router.get("/assets/{name}")
async def asset(name: str) -> Response:
    """The pages' script and style sheet, from the package."""
    path = ASSETS / name
    media = ASSET_TYPES.get(path.suffix)
    if media is None or path.parent != ASSETS or not path.is_file():
        raise NotFound(f"no page asset {name!r}")
    return FileResponse(path, media_type=media, headers=SECURITY_HEADERS)


__all__ = ["CSP", "router", "temporal_ui_url"]
