"""`/docs` and `/redoc` with their assets served from the package, so they work offline.

FastAPI's default docs pages load their scripts from a CDN. This is FastAPI's documented way to
self-host them: turn the defaults off, mount the assets, and serve the pages with
`get_swagger_ui_html` / `get_redoc_html` pointing at them. The assets (Swagger UI 5, which reads
OpenAPI 3.1, and ReDoc) come from the `fastapi-offline` wheel, with their licences.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs/assets"
ASSETS = Path(fastapi_offline.__file__).with_name("static")


def install(app: FastAPI) -> None:
    """Serve `/docs`, `/redoc` and their assets from the package."""
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
        )

    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API reference",
            redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )

    app.add_api_route("/docs", swagger_ui, methods=["GET"], include_in_schema=False)
    app.add_api_route("/redoc", redoc, methods=["GET"], include_in_schema=False)


__all__ = ["ASSETS_PATH", "install"]
