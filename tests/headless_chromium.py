"""A tiny Chrome DevTools Protocol client over `--remote-debugging-pipe` (stdlib only, no websocket, no driver):
open a local HTML file in headless Debian chromium, wait for the load, and return what the page did: the DOM after
its scripts ran, console messages and errors, uncaught exceptions, network requests, JavaScript dialogs (an
`alert()` that ran), plus a full-page screenshot."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
MAX_SCREENSHOT_HEIGHT = 12000


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageRun:
    dom: str = ""
    console: list[dict] = field(default_factory=list)  # {"level", "text"} from console.* and the browser log
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL requested besides the page itself
    dialogs: list[str] = field(default_factory=list)
    values: dict = field(default_factory=dict)  # results of the `evaluate` expressions

    @property
    def errors(self) -> list[str]:
        return [m["text"] for m in self.console if m["level"] in ("error", "assert")] + self.exceptions


class Chromium:
    def __init__(self, binary: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="mpdoctor-chromium-")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def remap():  # the browser reads commands on fd 3 and writes replies on fd 4
            high_read = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            high_write = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        self._process = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--mute-audio",
                "--hide-scrollbars",
                f"--user-data-dir={self._profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=remap,
            pass_fds=(3, 4),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            self.events.append(self._receive(deadline))

    def run_page(
        self, path: Path, screenshot: Path | None = None, evaluate: dict[str, str] | None = None, width: int = 1280
    ) -> PageRun:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        url = path.resolve().as_uri()
        self.call("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session)
        run = PageRun()
        for name, expression in (evaluate or {}).items():
            # A promise is awaited: an expression may wait for what the page does after its load.
            result = self.call(
                "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session
            )
            run.values[name] = result.get("result", {}).get("value")
        run.dom = self.call(
            "Runtime.evaluate", {"expression": "document.documentElement.outerHTML", "returnByValue": True}, session
        )["result"]["value"]
        if screenshot is not None:
            size = self.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
            height = min(MAX_SCREENSHOT_HEIGHT, int(size["height"]) + 1)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session,
            )
            data = self.call("Page.captureScreenshot", {"format": "png"}, session)["data"]
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(data))
        self.call("Target.closeTarget", {"targetId": target})
        for event in self.events:
            if event.get("sessionId") != session:
                continue
            params = event.get("params", {})
            method = event.get("method")
            if method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                run.console.append({"level": params.get("type"), "text": text})
            elif method == "Log.entryAdded":
                run.console.append({"level": params["entry"].get("level"), "text": params["entry"].get("text")})
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                run.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Network.requestWillBeSent" and params.get("request", {}).get("url") != url:
                run.requests.append(params["request"]["url"])
            elif method == "Page.javascriptDialogOpening":
                run.dialogs.append(params.get("message", ""))
        return run
