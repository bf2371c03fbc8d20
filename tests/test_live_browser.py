"""The live page in a real browser: ``torqueloop run --live --wait-viewer`` prints the page's
``http://127.0.0.1`` address, headless Chromium loads it (driven through the Chrome DevTools
Protocol with the ``websockets`` package), the page connects to the live server, subscribes
(which starts the run) and decodes the ROS 2 CDR messages itself; the test reads what the page
received (``window.torqueloopLive``) and compares it with the run's ``log.npy`` and
``meta.json``, checks every plot panel was drawn, and keeps a screenshot:
``RUN_DIR/live_page.png`` in the test's tmp dir and a copy at ``tests/artifacts/live_page.png``
(ignored by git; the test prints both paths).

Skipped only when no Chromium is installed (``.ci/install-browser`` installs the Debian
package ``chromium`` where apt-get runs as root; ``TORQUELOOP_CHROMIUM`` names another binary).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("foxglove")
ws_client = pytest.importorskip("websockets.sync.client")

from controller.telemetry import read_log, read_meta, utc_ns  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "hil_configs" / "runs" / "3rrr_circle.toml"
ARTIFACTS = ROOT / "tests" / "artifacts"
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
RATE_HZ = 40.0
#: upper bounds for a slow, loaded machine (not expectations)
TIMEOUT_S = 600.0


def _chromium() -> str:
    for name in (os.environ.get("TORQUELOOP_CHROMIUM"), "chromium", "chromium-browser"):
        path = name and shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (no `chromium` on PATH) and cannot be installed from here: "
                ".ci/install-browser installs the Debian package `chromium` where apt-get runs as root")


class Cdp:
    """A Chrome DevTools Protocol session with one page (JSON commands over its WebSocket)."""

    def __init__(self, url: str):
        self.ws = ws_client.connect(url, max_size=None, open_timeout=120, proxy=None, compression=None)
        self._id = 0

    def call(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=TIMEOUT_S))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")


def _page_target(profile: Path, page_url: str, browser: subprocess.Popen) -> str:
    """The DevTools WebSocket address of the browser's tab showing ``page_url`` (the port from
    the profile's DevToolsActivePort file: ``--remote-debugging-port=0`` lets Chromium choose)."""
    port_file = profile / "DevToolsActivePort"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert browser.poll() is None, f"chromium exited with {browser.returncode}"
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text().split()[0])
            try:
                targets = json.loads(opener.open(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
            except OSError:
                targets = []
            for t in targets:
                if t.get("type") == "page" and t.get("url", "").startswith(page_url):
                    return t["webSocketDebuggerUrl"]
        time.sleep(0.2)
    pytest.fail(f"chromium showed no tab with {page_url} within {TIMEOUT_S:g} s")


#: per plot panel (canvas), the pixels drawn
INK = """Object.fromEntries([...document.querySelectorAll('#plots canvas')].map((c) => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
  return [c.parentElement.id, n]; }))"""


def _floats(values) -> np.ndarray:
    """JSON numbers as float64 (JSON has no NaN: the page's null)."""
    return np.array([np.nan if v is None else v for v in values], float)


def test_headless_chromium_shows_the_run_live_with_the_logs_values(tmp_path):
    chromium = _chromium()
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = subprocess.Popen([sys.executable, "-m", "controller.app.cli", "run", str(DEMO), "--live", "--wait-viewer",
                            str(int(TIMEOUT_S)), "--duration", "2", "--set", f"telemetry.live_rate_hz={RATE_HZ:g}",
                            "--no-plots", "--no-progress", "-o", str(out)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    browser = None
    try:
        ws_address = page_url = None
        for line in cli.stdout:
            if "live view at ws://" in line:
                ws_address = line.split("live view at ")[1].split()[0]
            if "live page at http://" in line:
                page_url = line.split("live page at ")[1].split()[0]
                break
        else:
            cli.wait(60)
            pytest.fail(f"no live page address printed: {cli.stderr.read()}")
        assert page_url.startswith("http://127.0.0.1:") and ws_address.startswith("ws://127.0.0.1:")
        profile = tmp_path / "chromium-profile"
        with open(tmp_path / "chromium.log", "wb") as log_file:
            browser = subprocess.Popen(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-proxy-server", f"--user-data-dir={profile}", "--remote-debugging-port=0",
                 "--window-size=1200,1000", page_url], stdout=log_file, stderr=subprocess.STDOUT)
        cdp = Cdp(_page_target(profile, page_url, browser))
        # the page subscribes (the run starts), receives, and sees the server close at the end
        deadline = time.monotonic() + TIMEOUT_S
        state = None
        while time.monotonic() < deadline:
            state = cdp.evaluate("JSON.stringify(window.torqueloopLive || null)")
            state = state and json.loads(state)
            if state and state["status"] == "closed":
                break
            time.sleep(0.5)
        cli_out, cli_err = cli.communicate(timeout=TIMEOUT_S)
        ink = cdp.evaluate(INK)
        cdp.call("Emulation.setDeviceMetricsOverride", width=1200, height=1000, deviceScaleFactor=1, mobile=False)
        png = base64.b64decode(cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
    finally:
        for proc in (browser, cli):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(60)
    shot = out / "live_page.png"
    shot.write_bytes(png)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "live_page.png")
    print(f"live page screenshot: {shot} (copy: {ARTIFACTS / 'live_page.png'})")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.returncode == 0, cli_err
    assert state is not None and state["status"] == "closed", state
    assert state["errors"] == [], state["errors"]
    assert state["info"]["ws"] == ws_address
    log, meta = read_log(out), read_meta(out)
    start_ns = utc_ns(meta["start_time_utc"])
    # every row the server sent reached the page: about duration x rate of them
    sent = meta["live"]["rows_sent"]
    duration_s = float(log["t"][-1] - log["t"][0])
    assert 0.8 * duration_s * RATE_HZ <= sent <= 1.2 * duration_s * RATE_HZ + 2, (sent, duration_s)
    assert state["counts"]["/joint_states"] == state["counts"]["/torqueloop/cycle"] == sent, state["counts"]
    assert state["counts"]["/tf"] >= 1 and state["counts"]["/rosout"] >= 2
    # the last messages: the last row sent (the last one that starts a 1/rate interval), its values
    bins = np.floor(log["t"] * RATE_HZ + 1e-6)
    last = int(np.flatnonzero(np.diff(bins, prepend=-1) > 0)[-1])
    row = log[last]
    js, cyc = state["joint_states"], state["cycle"]
    for stamp in (js["stamp"], cyc["stamp"]):
        assert abs((stamp["sec"] * 10**9 + stamp["nanosec"] - start_ns) * 1e-9 - row["t"]) < 2e-6, (stamp, row["t"])
    assert js["name"] == list(meta["joint_names"])
    for got, column in ((js["position"], "q"), (js["velocity"], "qd"), (js["effort"], "tau_meas"),
                        (cyc["ref_pos"], "ref_pos"), (cyc["err"], "err"), (cyc["tau_cmd"], "tau_cmd"),
                        (cyc["tau_meas"], "tau_meas")):
        np.testing.assert_allclose(_floats(got), row[column], rtol=1e-12, atol=0, err_msg=column)
    assert cyc["t_s"] == pytest.approx(float(row["t"]), rel=1e-12, abs=0)
    np.testing.assert_allclose(_floats(cyc["tau_limit"]), np.asarray(meta["torque_limit"], float), rtol=1e-12)
    assert "disabled" in state["rosout"]["msg"]         # the loop's last safety change
    assert {"platform", "proximal1", "distal3"} <= {x["child"] for x in state["tf"]["transforms"]}
    # every panel drawn: reference vs measured per axis, torque vs limit per joint, positions, /tf
    n, dim = len(meta["joint_names"]), log.dtype["err"].shape[0]
    panels = {f"panel-axis{i}" for i in range(dim)} | {f"panel-tau{i}" for i in range(n)} | {"panel-q", "panel-tf"}
    assert set(ink) == panels, ink
    assert all(v > 500 for v in ink.values()), ink


def test_the_page_server_serves_the_page_and_the_live_address_only():
    """The page, its script and info.json (the WebSocket address, the names) on 127.0.0.1; any
    other path 404; nothing served once the live server closed."""
    from urllib.error import HTTPError, URLError

    from controller.telemetry import log_dtype
    from controller.telemetry_live import LiveServer

    srv = LiveServer(log_dtype(3, 3), ["a", "b", "c"], ["x", "y", "phi"], start_ns=0, rate_hz=50.0)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    page = srv.page_address
    try:
        assert page.startswith("http://127.0.0.1:") and page.endswith("/") and page != srv.address
        html = opener.open(page, timeout=60).read().decode()
        assert '<script src="live.js">' in html and 'id="received"' in html
        js = opener.open(page + "live.js", timeout=60)
        assert js.headers["Content-Type"].startswith("text/javascript") and b"foxglove.sdk.v1" in js.read()
        info = json.loads(opener.open(page + "info.json", timeout=60).read())
        assert info["ws"] == srv.address and info["joint_names"] == ["a", "b", "c"]
        assert info["axis_names"] == ["x", "y", "phi"]
        for path in ("../pyproject.toml", "live.html/..", "telemetry_live.py", "web/live.js"):
            with pytest.raises(HTTPError) as err:
                opener.open(page + path, timeout=60)
            assert err.value.code == 404, path
    finally:
        srv.close(linger_s=0.0)
    with pytest.raises(URLError):
        opener.open(page, timeout=60)
