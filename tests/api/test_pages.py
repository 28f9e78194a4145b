"""The pages' HTTP surface: a strict CSP, assets from the package, docs assets served locally."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_pages_carry_a_strict_policy_and_load_only_local_assets(
    make_app: Callable[..., FastAPI],
) -> None:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        for path in ("/ui", "/ui/inbox", "/ui/runs/run-1%22%3E%3Cscript%3E"):
            response = await http.get(path)
            assert response.status_code == 200
            policy = response.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert "<script>" not in response.text.split("</head>")[1]
            assert 'src="/ui/assets/ui.js"' in response.text
            assert 'href="/ui/assets/ui.css"' in response.text
            assert 'src="http' not in response.text and 'href="http' not in response.text
        script = await http.get("/ui/assets/ui.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in script.text
        for bad in ("/ui/assets/..%2Fpages.py", "/ui/assets/nope.js", "/ui/assets/pages.py"):
            assert (await http.get(bad)).status_code == 404
        docs = await http.get("/docs")
        assert "cdn." not in docs.text and "/docs/assets/swagger-ui-bundle.js" in docs.text
        redoc = await http.get("/redoc")
        assert "cdn." not in redoc.text and "/docs/assets/redoc.standalone.js" in redoc.text
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            assert (await http.get(f"/docs/assets/{asset}")).status_code == 200
