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
import urllib.error
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


def _status(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_printed_dashboard_answers_and_lists_tasks(running):
    proc, url, store = running
    m = re.fullmatch(r"http://127\.0\.0\.1:\d+/status\?token=([\w-]{32})", url)
    assert m, url
    status, body = _get(url)
    assert status == 200 and b"Dask" in body
    base, token = url.rsplit("/", 1)[0], m.group(1)
    status, body = _get(f"{base}/json/counts.json?token={token}")
    counts = json.loads(body)
    print(f"{url}: 200; counts {counts}")
    assert status == 200 and counts["workers"] == 2 and counts["tasks"] > 0
    status, body = _get(f"{base}/info/main/workers.html?token={token}")
    assert status == 200 and b"tls://127.0.0.1:" in body   # TLS by default (issue 23)


# what the scheduler's HTTP server serves, the dashboard's pages, data and websocket included
PATHS = ("/status", "/tasks", "/info/main/workers.html", "/json/counts.json", "/health",
         "/metrics", "/sitemap.json", "/statics/css/base.css", "/status/ws", "/cvflow",
         "/no/such/page")


def test_the_dashboard_answers_only_with_the_printed_secret(running):
    """Issue 44 item 2: every page of the server, with no secret, a wrong one, a cut one or a
    wrong cookie: 403; the printed URL's secret as a query or as the cookie its answer sets
    (HttpOnly, for this port): answered."""
    proc, url, store = running
    base, token = url.split("/status?token=")
    with urllib.request.urlopen(url, timeout=30) as response:
        cookie = response.headers["Set-Cookie"]
        assert response.headers["Referrer-Policy"] == "no-referrer"
    port = base.rsplit(":", 1)[1]
    assert re.fullmatch(rf"cvflow-dashboard-{port}={token}; HttpOnly; Path=/; SameSite=Strict",
                        cookie), cookie
    pair = cookie.split(";")[0]
    for path in PATHS:
        for tail, headers in (("", None), ("?token=", None), (f"?token={token[:-1]}", None),
                              (f"?token={token}x", None),
                              ("", {"Cookie": f"cvflow-dashboard-{port}={token[::-1]}"}),
                              ("", {"Cookie": f"cvflow-dashboard-1={token}"})):
            assert _status(base + path + tail, headers) == 403, (path, tail, headers)
    for path in ("/status", "/info/main/workers.html", "/json/counts.json", "/health"):
        assert _status(f"{base}{path}?token={token}") == 200, path
        assert _status(base + path, {"Cookie": pair}) == 200, path


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("curl"),
                    reason="needs root, useradd and curl: a second Unix user")
def test_another_user_reads_no_dashboard(running):
    """What another local user can do: reach the port, without the secret (only in the URL
    cvflow printed to its owner): 403 on every page; the owner's URL answers."""
    proc, url, store = running
    user = "cvflowother"
    if subprocess.run(["id", user], capture_output=True).returncode:
        subprocess.run(["useradd", "--no-create-home", user], check=True)
    base = url.split("/status?", 1)[0]

    def curl(target: str) -> str:
        return subprocess.run(["runuser", "-u", user, "--", "curl", "-s", "-o", "/dev/null",
                               "-w", "%{http_code}", target], capture_output=True, text=True,
                              timeout=60).stdout

    assert {path: curl(base + path) for path in PATHS} == {path: "403" for path in PATHS}
    assert curl(url) == "200"             # the port is reachable: the secret is what it lacks


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

    # a new browser profile (no cookie): the secret in the URL, as the printed one has it
    tasks, png = asyncio.run(_devtools(
        f"{base}/tasks?{url.split('?', 1)[1]}", BOKEH_STATE,
        lambda v: bool(v and any(n.startswith("cvflow-block") for n in v["names"])),
        user_data=str(tmp_path / "t"), timeout=90))
    (tmp_path / "tasks.png").write_bytes(png)
    print(f"/tasks: {tasks}")
    assert tasks and any(n.startswith("cvflow-block") for n in tasks["names"]), tasks
    assert tasks["rects"] >= 1
