"""A minimal Chrome DevTools protocol client: headless Chromium for the HTML report's tests.

It starts Chromium with a fresh profile and `--remote-debugging-port=0`, reads the port Chromium
chose from `DevToolsActivePort`, and talks to the page over one websocket (websocket-client, the
test extra's only addition for this). What it offers is what the tests need: open a file, evaluate
JavaScript, click and hover with real input events, collect console errors and network requests,
take a screenshot.

Also a command for the docs' screenshots:
    python tests/browser.py REPORT.html OUT.png [--width 1280] [--height 2000]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

#: Chromium's flags: headless, and nothing that reaches the network or a first-run dialog.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--disable-dev-shm-usage",
         "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1"]
#: Names the browser goes by (Debian's package is `chromium`); ROOFLINEKIT_CHROMIUM overrides.
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """The Chromium executable: $ROOFLINEKIT_CHROMIUM, else the first of NAMES on PATH."""
    env = os.environ.get("ROOFLINEKIT_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900, timeout: float = 30.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="rk-chromium-")
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.events: list[dict] = []
        self._id = 0
        try:
            port = self._port()
            self.ws = websocket.create_connection(self._page_url(port), timeout=timeout, suppress_origin=True)
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable")
            self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                      mobile=False)
        except BaseException:
            self.close()
            raise

    # -- start-up --------------------------------------------------------------------------------

    def _port(self) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise BrowserError(f"chromium exited with {self.proc.returncode}: {err}")
            if marker.exists():
                lines = marker.read_text().split()
                if lines:
                    return int(lines[0])
            time.sleep(0.05)
        raise BrowserError(f"chromium did not open its DevTools port within {self.timeout:.0f} s")

    def _page_url(self, port: int) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout) as r:
                targets = json.loads(r.read())
            pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise BrowserError("chromium has no page target")

    # -- the protocol ----------------------------------------------------------------------------

    def send(self, method: str, **params) -> dict:
        """Call a DevTools method and return its result; events that arrive meanwhile are kept."""
        self._id += 1
        ident = self._id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == ident:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error'].get('message')}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise BrowserError(f"{method}: no answer within {self.timeout:.0f} s")

    def wait_for(self, method: str, since: int = 0) -> dict:
        """Wait for an event of `method` (one already received after index `since` counts)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for ev in self.events[since:]:
                if ev.get("method") == method:
                    return ev
            self.ws.settimeout(max(0.05, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise BrowserError(f"no {method} within {self.timeout:.0f} s")

    # -- what the tests do -------------------------------------------------------------------------

    def open(self, path: str | Path) -> None:
        """Load a local file and wait until its script has run (body[data-ready])."""
        since = len(self.events)
        self.send("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_for("Page.loadEventFired", since)
        deadline = time.monotonic() + self.timeout
        while not self.js("document.body && document.body.getAttribute('data-ready') === '1'"):
            if time.monotonic() > deadline:
                raise BrowserError(f"{path}: the page's script did not finish; console: {self.console_errors()}")
            time.sleep(0.05)

    def js(self, expression: str):
        """Evaluate JavaScript in the page and return its value (JSON-able values only)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result["result"].get("value")

    def center(self, selector: str) -> tuple[float, float]:
        """The viewport position of an element's centre, scrolled into view first."""
        box = self.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: 'nearest', inline: 'nearest'}});
            const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if box is None:
            raise BrowserError(f"no element matches {selector}")
        return box[0], box[1]

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the element's centre."""
        x, y = self.center(selector)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def hover(self, selector: str) -> None:
        """Move the mouse onto an element: its centre, or where it shows if something covers the centre."""
        x, y = self.center(selector)
        spot = self.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            const r = e.getBoundingClientRect();
            for (let i = 0; i <= 12; i++) for (let j = 0; j <= 12; j++) {{
                const x = r.left + r.width * (0.5 + (i % 2 ? -1 : 1) * Math.ceil(i / 2) / 13);
                const y = r.top + r.height * (0.5 + (j % 2 ? -1 : 1) * Math.ceil(j / 2) / 13);
                if (document.elementFromPoint(x, y) === e) return [x, y];
            }}
            return null; }})()""")
        if spot is None:
            raise BrowserError(f"{selector} is covered by other elements everywhere")
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=spot[0], y=spot[1])

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (CSP violations among them)."""
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        """The URLs of every request the page made."""
        return [ev["params"]["request"]["url"] for ev in self.events if ev.get("method") == "Network.requestWillBeSent"]

    def clear_events(self) -> None:
        self.events.clear()

    def screenshot(self, full_page: bool = False, clip: dict | None = None) -> bytes:
        """A PNG of the viewport, of the whole page, or of a clip {x, y, width, height}."""
        params: dict = {"format": "png"}
        if full_page:
            size = self.js("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": size[1],
                                                            "scale": 1})
        elif clip:
            params.update(captureBeyondViewport=True, clip={**clip, "scale": 1})
        return base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Screenshot an HTML report (for the docs)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html")
    ap.add_argument("png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=2000, help="the height of the picture (the page's top part)")
    ap.add_argument("--select", default=None, help="sweeps: BATCH,CONTEXT to select before the picture")
    ap.add_argument("--hover", default=None, help="a CSS selector to hover before the picture (shows its tooltip)")
    args = ap.parse_args(argv)
    exe = find_chromium()
    if exe is None:
        print("no chromium found (apt-get install chromium)", file=sys.stderr)
        return 1
    browser = Browser(exe, width=args.width, height=args.height)
    try:
        browser.open(args.html)
        if args.select:
            b, c = args.select.split(",")
            browser.js(f"window.rooflinekit.select({int(b)}, {int(c)})")
        if args.hover:
            browser.hover(args.hover)  # the picture's height is the viewport's: nothing scrolls
        errors = browser.console_errors()
        if errors:
            print("console errors: " + "; ".join(errors), file=sys.stderr)
            return 1
        Path(args.png).write_bytes(browser.screenshot(clip={"x": 0, "y": 0, "width": args.width,
                                                           "height": args.height}))
    finally:
        browser.close()
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def required_browser(what: str, width: int, height: int):
    """A headless Chromium for `what`'s tests (a pytest fixture's body: yields it, closes it):
    fails where ROOFLINEKIT_REQUIRE_BROWSER=1 and none is found, else skips."""
    import pytest

    exe = find_chromium()
    if exe is None:
        if os.environ.get("ROOFLINEKIT_REQUIRE_BROWSER") == "1":
            pytest.fail("ROOFLINEKIT_REQUIRE_BROWSER=1 and no Chromium found (apt-get install chromium)")
        pytest.skip(f"no Chromium on this machine: {what} needs one (apt-get install chromium, or set "
                    "ROOFLINEKIT_CHROMIUM)")
    b = Browser(exe, width=width, height=height)
    yield b
    b.close()
