"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, for the report tests.

Real browser, no network: the flags turn off everything Chromium would fetch
by itself, and each driver gets a fresh profile directory, removed on quit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CHROMEDRIVER", "CHROMIUM", "chromium", "missing_reason"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or ``None`` when they can."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} not found: apt-get install {package}"
    try:
        import selenium  # noqa: F401
    except ModuleNotFoundError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Selenium WebDriver for headless Chromium; quit and its profile removed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="memtrace-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
