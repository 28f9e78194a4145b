"""`deliver_webhook`: post one run notice to one settings.json webhook, signed.

The notice names its webhook by its place in settings.json; the URL and the secret are read
here, on the worker, at each attempt, so neither ever enters Temporal history. Temporal retries
the activity with backoff (the notice child workflow sets the policy): a receiver that is down
or answers 5xx, 408 or 429 is tried again; one that refuses the notice (another 4xx) is not.

Errors (all `ApplicationError`, messages without URL or secret):
    WebhookUnreachable   the receiver could not be reached or did not answer in time (retried)
    WebhookFailed        the receiver answered 5xx, 408 or 429 (retried)
    WebhookRefused       the receiver answered another 4xx (not retried)
    WebhookSettings      settings.json cannot be read now (retried)
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from openflow import contracts as c
from openflow.settings import SettingsError, Webhook, load_settings, runtime_settings

SIGNATURE_HEADER = "X-OpenFlow-Signature"
DELIVERY_HEADER = "X-OpenFlow-Delivery"
EVENT_HEADER = "X-OpenFlow-Event"
#: Where run pages live when OPENFLOW_API_URL is not set: `openflow api`'s default address.
DEFAULT_API_URL = "http://127.0.0.1:8000"
#: How long one attempt may take, connecting included.
ATTEMPT_TIMEOUT = httpx.Timeout(10.0)
RETRIED_STATUSES = frozenset({408, 425, 429})


def sign(body: bytes, secret: str) -> str:
    """The signature header's value: `sha256=` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def notice_body(notice: c.RunNotice, api_url: str) -> bytes:
    """The JSON a webhook receives, with the link to the run's page."""
    page_url = f"{api_url.rstrip('/')}/ui/runs/{quote(notice.run_id, safe='')}"
    data: dict[str, Any] = {
        "run_id": notice.run_id,
        "workflow_id": notice.workflow_id,
        "status": notice.status,
        "event": notice.event,
        "awaiting": [p.model_dump(mode="json") for p in notice.awaiting],
        "page_url": page_url,
    }
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookActivities:
    """The delivery activity, reading settings.json under `home` at each attempt."""

    def __init__(
        self,
        home: Path,
        api_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.home = Path(home)
        self.api_url = api_url or runtime_settings().api_url or DEFAULT_API_URL
        self._transport = transport

    def all(self) -> list[Any]:
        return [self.deliver_webhook, self.list_webhooks]

    @activity.defn(name=c.ACTIVITY_LIST_WEBHOOKS)
    async def list_webhooks(self, inp: c.ListWebhooksInput) -> c.ListWebhooksResult:
        """The webhooks by place and events, for a run whose preparation failed."""
        try:
            hooks = await asyncio.to_thread(load_settings, self.home)
        except SettingsError as exc:
            raise ApplicationError(f"{exc}", type="WebhookSettings", non_retryable=True) from None
        return c.ListWebhooksResult(webhooks=webhook_refs(hooks.webhooks))

    @activity.defn(name=c.ACTIVITY_WEBHOOK)
    async def deliver_webhook(self, inp: c.WebhookInput) -> c.WebhookResult:
        hook = await asyncio.to_thread(self._webhook, inp.hook)
        where = f"webhooks[{inp.hook}]"
        if hook is None or inp.notice.event not in hook.events:
            activity.logger.info(
                "settings.json %s no longer takes %r notices; skipped", where, inp.notice.event
            )
            return c.WebhookResult(outcome="skipped")
        body = notice_body(inp.notice, self.api_url)
        info = activity.info()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "openflow-webhooks",
            EVENT_HEADER: inp.notice.event,
            # The same for every attempt, so a receiver can drop a repeat.
            DELIVERY_HEADER: f"{info.workflow_id}:{inp.hook}",
        }
        secret = hook.secret.get_secret_value() if hook.secret is not None else ""
        if secret:
            headers[SIGNATURE_HEADER] = sign(body, secret)
        try:
            async with httpx.AsyncClient(
                timeout=ATTEMPT_TIMEOUT, follow_redirects=False, transport=self._transport
            ) as http:
                response = await http.post(hook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            # The exception's text may quote the URL: only its kind is told.
            raise ApplicationError(
                f"{where} could not be reached ({type(exc).__name__}); trying again",
                type="WebhookUnreachable",
            ) from None
        status = response.status_code
        if 200 <= status < 300:
            return c.WebhookResult(outcome="delivered", http_status=status)
        if status >= 500 or status in RETRIED_STATUSES:
            raise ApplicationError(
                f"{where} answered HTTP {status}; trying again", type="WebhookFailed"
            )
        raise ApplicationError(
            f"{where} answered HTTP {status}; the notice is not sent again",
            type="WebhookRefused",
            non_retryable=True,
        )

    def _webhook(self, index: int) -> Webhook | None:
        try:
            hooks = load_settings(self.home).webhooks
        except SettingsError as exc:
            raise ApplicationError(f"{exc}", type="WebhookSettings") from None
        return hooks[index] if 0 <= index < len(hooks) else None


def webhook_refs(hooks: list[Webhook]) -> list[c.WebhookRef]:
    """The webhooks a run keeps in its history: places and events, no URLs or secrets."""
    return [c.WebhookRef(index=i, events=list(h.events)) for i, h in enumerate(hooks) if h.events]


__all__ = [
    "DEFAULT_API_URL",
    "SIGNATURE_HEADER",
    "WebhookActivities",
    "notice_body",
    "sign",
    "webhook_refs",
]
