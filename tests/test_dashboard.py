"""The dashboard of a running ``cvflow run``: its printed URL answers and headless Chromium
renders it, task stream included.

Chromium is driven through the DevTools protocol (tornado's websocket client, already a Dask
dependency): ``--dump-dom``/``--screenshot`` alone capture the page before Bokeh's websocket
has delivered the plots.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

import fault_helpers as fh

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                  "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """A ``cvflow run`` long enough to look at (48 fits of 0.5 s); killed afterwards."""
    tmp = tmp_path_factory.mktemp("dash")
    wf = fh.slow_workflow(tmp / "wf.yaml", alphas=[0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30],
                          delay=0.5)
    store = tmp / "s.zarr"
    proc = fh.start_run(wf, store, "--workers", "2")
    try:
        url = None
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise AssertionError(f"run ended (rc {proc.returncode}) before printing a URL")
            m = re.match(r"dashboard: (http://\S+)", line)
            url = m.group(1) if m else None
        assert url, "no dashboard URL printed"
        fh.wait_for_done(store, 1, proc)  # tasks are running
        yield proc, url, store
    finally:
        fh.reap(proc)


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read()


def test_printed_dashboard_answers_and_lists_tasks(running):
    proc, url, store = running
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/status", url), url
    status, body = _get(url)
    assert status == 200 and b"Dask" in body
    base = url.rsplit("/", 1)[0]
    status, body = _get(f"{base}/json/counts.json")
    counts = json.loads(body)
    print(f"{url}: 200; counts {counts}")
    assert status == 200 and counts["workers"] == 2 and counts["tasks"] > 0
    status, body = _get(f"{base}/info/main/workers.html")
    assert status == 200 and b"tls://127.0.0.1:" in body   # TLS by default (issue 23)


async def _devtools(url: str, expression: str, until, *, user_data: str, timeout: float):
    """Open ``url`` in headless Chromium; poll ``expression`` until ``until(value)``; screenshot."""
    from tornado.httpclient import AsyncHTTPClient
    from tornado.websocket import websocket_connect

    proc = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={user_data}",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        endpoint = None
        while endpoint is None:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError("chromium exited before opening DevTools")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            endpoint = m and m.group(1)
        targets = json.loads((await AsyncHTTPClient().fetch(
            f"http://127.0.0.1:{endpoint}/json/list")).body)
        page = next(t for t in targets if t["type"] == "page")
        ws = await websocket_connect(page["webSocketDebuggerUrl"], max_message_size=64 << 20)
        counter = iter(range(1, 1 << 30))

        async def call(method, **params):
            n = next(counter)
            await ws.write_message(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                message = json.loads(await ws.read_message())
                if message.get("id") == n:
                    return message.get("result", message)

        await call("Page.enable")
        await call("Page.navigate", url=url)
        value, deadline = None, time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = await call("Runtime.evaluate", expression=expression, returnByValue=True)
            value = result.get("result", {}).get("value")
            if until(value):
                break
            await asyncio.sleep(0.5)
        shot = await call("Page.captureScreenshot", format="png")
        ws.close()
        return value, base64.b64decode(shot["data"])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


# Bokeh documents of the page, their root count, and the task names drawn in task streams.
BOKEH_STATE = """(() => {
  const B = window.Bokeh;
  if (!B || !B.documents || !B.documents.length) return null;
  const names = new Set(); let rects = 0;
  for (const doc of B.documents) for (const model of doc._all_models.values()) {
    const data = model.data;
    if (data && data.name && data.duration) { rects += data.name.length;
                                              data.name.forEach(n => names.add(String(n))); }
  }
  return {documents: B.documents.length, roots: B.documents.map(d => d.roots().length),
          rects: rects, names: [...names], title: document.title};
})()"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")
def test_dashboard_renders_in_headless_chromium(running, tmp_path):
    from io import BytesIO

    from PIL import Image

    proc, url, store = running
    base = url.rsplit("/", 1)[0]
    state, png = asyncio.run(_devtools(
        url, BOKEH_STATE, lambda v: bool(v and sum(v["roots"])), user_data=str(tmp_path / "s"),
        timeout=60))
    image = Image.open(BytesIO(png)).convert("RGB")
    colours = len(image.getcolors(1 << 24))
    print(f"/status: {state}; screenshot {image.size} with {colours} colours")
    assert state and state["title"].startswith("Dask") and sum(state["roots"]) >= 1
    assert colours > 300  # plots drawn, not an empty page

    tasks, png = asyncio.run(_devtools(
        f"{base}/tasks", BOKEH_STATE,
        lambda v: bool(v and any(n.startswith("cvflow-block") for n in v["names"])),
        user_data=str(tmp_path / "t"), timeout=90))
    (tmp_path / "tasks.png").write_bytes(png)
    print(f"/tasks: {tasks}")
    assert tasks and any(n.startswith("cvflow-block") for n in tasks["names"]), tasks
    assert tasks["rects"] >= 1
