"""Headless Chromium for the tests that look at the MLflow UI (Debian's chromium and
chromium-driver, driven by selenium)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def chrome(width: int = 1600, height: int = 1000) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    with tempfile.TemporaryDirectory() as profile:
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--window-size={width},{height}", f"--user-data-dir={profile}",
                  "--no-first-run", "--disable-background-networking"):
            opts.add_argument(a)
        opts.binary_location = shutil.which("chromium") or "chromium"
        d = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"),
                             options=opts)
        try:
            yield d
        finally:
            d.quit()


def wait_text(d: Any, text: str, timeout: float) -> str:
    """The page's text once it contains `text` (the UI renders after its API calls)."""
    from selenium.webdriver.common.by import By

    end = time.monotonic() + timeout
    body = ""
    while time.monotonic() < end:
        body = d.find_element(By.TAG_NAME, "body").text
        if text in body:
            time.sleep(1)  # let the rest of the table land
            return str(d.find_element(By.TAG_NAME, "body").text)
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not on the page after {timeout:.0f} s: {body[:1500]}")
