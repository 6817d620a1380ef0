"""Headless Chromium through the DevTools protocol: load a page, collect console errors and
uncaught exceptions, evaluate JavaScript, take a PNG screenshot (for the HTML report tests)."""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One Chromium process (started here, killed on close) with one page over CDP."""

    def __init__(self, width: int = 1400, height: int = 3000, timeout: float = 30.0):
        import websocket

        self.profile = tempfile.mkdtemp(prefix="cvflow-chromium-")
        self.proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={self.profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        while True:
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium has no page target")
            time.sleep(0.1)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                              suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.send(method)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def send(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        wanted = self.next_id
        self.ws.send(json.dumps({"id": wanted, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == wanted:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(method)

    def open(self, path: Path) -> None:
        self.send("Page.navigate", {"url": Path(path).absolute().as_uri()})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"javascript raised: {res['exceptionDetails']}")
        return res["result"].get("value")

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error-level log entries so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"Uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                         for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        Path(path).write_bytes(base64.b64decode(data["data"]))
        return Path(path)

    def close(self) -> None:
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# Counts canvases through shadow roots (bokeh renders into shadow DOM) and reads the names
# and titles of the figures in the rendered bokeh document.
RENDERED = """
(() => {
  let canvases = 0;
  const walk = (root) => root.querySelectorAll('*').forEach(el => {
    if (el.tagName === 'CANVAS' && el.width > 0 && el.height > 0) canvases += 1;
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  const doc = window.Bokeh && Bokeh.documents.length ? Bokeh.documents[0] : null;
  const figures = doc ? [...doc.all_models].filter(m => m.title !== undefined && m.name &&
                                                    m.renderers !== undefined) : [];
  return {bokeh: !!window.Bokeh, version: window.Bokeh ? Bokeh.version : null, canvases,
          figures: figures.map(f => ({name: f.name, title: f.title ? f.title.text : null,
                                      renderers: f.renderers.length}))};
})()
"""
