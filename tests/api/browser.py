"""A headless Chromium driven by Selenium, over the API served on a loopback port.

The browser reaches only loopback: every other address goes to a proxy that does not exist, so
a page that needed the network would show it. Driver calls block, so tests make them through
`Page`, which runs each one in a thread and leaves the event loop to the worker.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from selenium import webdriver
    from selenium.common.exceptions import (
        StaleElementReferenceException,
        TimeoutException,
        WebDriverException,
    )
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the dev dependencies include selenium
    webdriver = None  # type: ignore[assignment]
    By = None  # type: ignore[assignment,misc]


def _skip_reason() -> str | None:
    if webdriver is None:
        return "selenium is not installed (pip install -e .[dev])"
    if CHROMIUM is None or not Path(CHROMEDRIVER).exists():
        return "no chromium and chromium-driver here (.ci/run installs them with apt-get)"
    return None


_driver: Any = None


def session_driver() -> Any:
    """One headless Chromium for the session (fresh profile, no network but loopback), or skip."""
    global _driver
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    if _driver is not None:
        return _driver
    profile = tempfile.mkdtemp(prefix="openflow-chromium-")
    options = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1400",
        f"--user-data-dir={profile}",
        "--proxy-server=http://127.0.0.1:9",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if CHROMIUM:
        options.binary_location = CHROMIUM
    try:
        _driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as exc:
        pytest.skip(f"chromium would not start: {exc.msg}")
    _driver.set_page_load_timeout(30)

    def close() -> None:
        _driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

    atexit.register(close)
    return _driver


class Page:
    """Async wrappers over the blocking driver, so the worker keeps running meanwhile."""

    def __init__(self, driver: Any, base: str) -> None:
        self.driver = driver
        self.base = base

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    async def open(self, path: str) -> None:
        await self.call(self.driver.get, self.base + path)

    async def wait(self, predicate: Callable[[Any], Any], timeout: float = 30.0) -> Any:
        """Poll `predicate(driver)` until it returns something truthy."""
        # The pages redraw as the run moves: an element found a moment ago may be gone; look again.
        waiter = WebDriverWait(
            self.driver,
            timeout,
            poll_frequency=0.05,
            ignored_exceptions=(StaleElementReferenceException,),
        )
        try:
            return await self.call(waiter.until, predicate)
        except TimeoutException:
            raise AssertionError(
                f"not reached in {timeout}s; the page:\n{await self.dump()}"
            ) from None

    async def dump(self) -> str:
        """What the page shows and what its console said, for a failing test's message."""

        def read() -> str:
            text = self.driver.find_element(By.TAG_NAME, "body").text
            logs = [e.get("message", "") for e in self.driver.get_log("browser")]
            return f"{self.driver.current_url}\n{text[:4000]}\nconsole:\n" + "\n".join(logs)

        return str(await self.call(read))

    async def css(self, selector: str, timeout: float = 30.0) -> Any:
        """The first visible element matching `selector`, once there is one."""

        def found(d: Any) -> Any:
            for e in d.find_elements(By.CSS_SELECTOR, selector):
                if e.is_displayed():
                    return e
            return None

        return await self.wait(found, timeout)

    async def click(self, selector: str, timeout: float = 30.0) -> None:
        """Click the first visible element matching `selector`, looking again if it was redrawn."""

        def clicked(d: Any) -> bool:
            for e in d.find_elements(By.CSS_SELECTOR, selector):
                if e.is_displayed():
                    e.click()
                    return True
            return False

        await self.wait(clicked, timeout)

    async def type(self, selector: str, text: str, timeout: float = 30.0) -> None:
        """Type into the first visible element matching `selector`."""

        def typed(d: Any) -> bool:
            for e in d.find_elements(By.CSS_SELECTOR, selector):
                if e.is_displayed():
                    e.send_keys(text)
                    return True
            return False

        await self.wait(typed, timeout)

    async def text_of(self, selector: str) -> str:
        return str(
            await self.call(lambda: self.driver.find_element(By.CSS_SELECTOR, selector).text)
        )

    async def wait_text(self, selector: str, text: str, timeout: float = 30.0) -> None:
        def has(d: Any) -> bool:
            return any(text in e.text for e in d.find_elements(By.CSS_SELECTOR, selector))

        await self.wait(has, timeout)

    async def script(self, source: str, *args: Any) -> Any:
        return await self.call(self.driver.execute_script, source, *args)

    async def reset(self) -> None:
        """A clean tab: no key in session storage."""
        await self.open("/ui/assets/ui.css")
        await self.script("sessionStorage.clear()")
