"""The emulator server (python -m drivers.sim.serve): in-process and cross-process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from dynamics.config import Section
from dynamics.errors import CommsError
from drivers.base import Command
from drivers.registry import build_driver
from drivers.sim.serve import build_server
from dynamics.errors import ConfigError

try:
    from tests.serve_process import served
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from serve_process import served

REPO = Path(__file__).resolve().parents[1]

JOINTS = {"sim_mit_can": """
[[driver.joints]]
can_id = 1
model = "AK80-9"
gear_ratio = 6.0
[[driver.joints]]
can_id = 2
model = "AK80-9"
""", "sim_odrive_can": """
[[driver.joints]]
node_id = 1
gear_ratio = 6.0
[[driver.joints]]
node_id = 2
"""}


def _write(tmp_path, server: str, sim_type="sim_mit_can") -> Path:
    p = tmp_path / "serve.toml"
    p.write_text(f"""
[server]
{server}
[driver]
type = "{sim_type}"
reply_timeout_s = 0.25
[driver.plant]
q0 = [0.1, 0.2]
mass_factor = 1.1
{JOINTS[sim_type]}
""")
    return p


def _client_cfg(bus: dict, kind="mit_can") -> dict:
    if kind == "mit_can":
        joints = [{"can_id": 1, "model": "AK80-9", "gear_ratio": 6.0},
                  {"can_id": 2, "model": "AK80-9"}]
    else:
        joints = [{"node_id": 1, "gear_ratio": 6.0}, {"node_id": 2}]
    # enable_timeout_s: the ODrive server answered the closed-loop request of the cross-process
    # session 0.7 s late in some runs (the heartbeats after Set_Axis_State; measured 2026-11-28,
    # cause not found yet), past the 1 s default in half the runs: the session is the point here
    return {"type": kind, "reply_timeout_s": 0.25, "enable_timeout_s": 5.0, "bus": bus, "joints": joints}


def _session(drv, n=30):
    fb = drv.enable()
    assert fb.fresh.all(), ("enable", fb.fresh, fb.info)
    for k in range(n):
        t0 = time.monotonic()
        fb = drv.cycle(Command(np.array([0.2, -0.1])))
        assert fb.fresh.all(), (f"cycle {k}", fb.fresh, time.monotonic() - t0, fb.info)
    return fb


def test_server_builds_and_serves_in_process_on_a_virtual_bus(tmp_path):
    ch = "srv-" + uuid.uuid4().hex
    cfg = _write(tmp_path, f'interface = "virtual"\nchannel = "{ch}"\ntoy_model = "planar_two_link"')
    host, duration, where, _ = build_server(cfg)
    try:
        assert duration is None and where[:2] == ("virtual", ch)
        drv = build_driver(Section(_client_cfg({"interface": "virtual", "channel": ch}), "client"),
                           now=time.monotonic)
        try:
            fb = _session(drv)
            # the serving thread steps the plant on the wall clock: stop it, then allow for the
            # motion since the reply (a loaded machine stalled 0.1-0.5 s here while the arm swung)
            host.stop()
            state = host.plant.state
            dt_s = time.monotonic() - fb.t_s
            speed = np.maximum(abs(fb.velocity_rad_s), abs(state.qd))
            assert np.all(abs(fb.position_rad - state.q) <= 0.05 + 1.5 * speed * dt_s), (fb, state, dt_s)
            assert host.plant.t_s > 0
        finally:
            drv.close()
    finally:
        host.close()


def _run_cli(*args, timeout=30):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "drivers.sim.serve", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_config_error_exit_code(tmp_path):
    cfg = _write(tmp_path, 'rehearsal = "bogus-key-test"\ntoy_model = "planar_two_link"\nbogus = 1')
    r = _run_cli(str(cfg))
    assert r.returncode == 2
    assert "server.bogus" in r.stderr and str(cfg) in r.stderr


def test_set_overrides_the_server_config_and_a_bad_one_is_named(tmp_path):
    """``--set`` (the pose a bring-up's robot waits in: the arm rehearsal's upright reference pose)
    reaches the plant; a bad one exits with the config error code, naming the key."""
    ch = "srv-" + uuid.uuid4().hex
    cfg = _write(tmp_path, f'interface = "virtual"\nchannel = "{ch}"\ntoy_model = "planar_two_link"')
    host, *_ = build_server(cfg, start=False, overrides={"driver.plant.q0": [0.25, -0.5]})
    try:
        assert np.allclose(host.plant.state.q, [0.25, -0.5])
    finally:
        host.close()
    r = _run_cli(str(cfg), "--set", "driver.plant.q0")
    assert r.returncode == 2 and "--set needs KEY=VALUE" in r.stderr
    r = _run_cli(str(cfg), "--set", "driver.plant.q0=[1.0]")
    assert r.returncode == 2 and "driver.plant.q0" in r.stderr and str(cfg) in r.stderr, r.stderr


@pytest.mark.exclusive     # a wall-clock session against another process (tests/conftest.py)
@pytest.mark.parametrize("kind", ["mit_can", "odrive_can"])
def test_cross_process_udp_multicast_session(tmp_path, kind):
    port = 43000 + (os.getpid() % 1000) + (kind == "odrive_can")
    group = "239.74.163.2"
    cfg = _write(tmp_path, f'interface = "udp_multicast"\nchannel = "{group}"\nport = {port}\n'
                           f'hop_limit = 0\ntoy_model = "planar_two_link"\nduration_s = 30.0',
                 sim_type="sim_" + kind)
    with served(cfg) as proc:
        try:
            drv = build_driver(Section(_client_cfg({
                "interface": "udp_multicast", "channel": group,
                "options": {"port": port, "hop_limit": 0}}, kind), "client"), now=time.monotonic)
        except CommsError as err:
            pytest.skip(f"udp_multicast client cannot bind: {err}")
        try:
            _session(drv)
        finally:
            drv.close()
    assert proc.returncode == 0


@pytest.mark.parametrize("table, error", [
    ("sched_fifo_priority = 70\ncpu = 0", None),
    ("sched_fifo_priority = 0", "server.realtime.sched_fifo_priority"),
    ("sched_fifo_priority = 100", "server.realtime.sched_fifo_priority"),
    ("cpu = -1", "server.realtime.cpu"),
    ("priority = 70", "server.realtime"),
])
def test_server_realtime_settings_are_read_and_bad_ones_named(tmp_path, table, error):
    ch = f"srv-rt-{os.getpid()}"
    cfg = _write(tmp_path, f'interface = "virtual"\nchannel = "{ch}"\ntoy_model = "planar_two_link"\n'
                           f'[server.realtime]\n{table}')
    if error is not None:
        with pytest.raises(ConfigError) as exc:
            build_server(cfg, start=False)
        assert error in str(exc.value) and str(cfg) in str(exc.value)
        return
    srv = build_server(cfg, start=False)
    try:
        assert srv.realtime == {"sched_fifo_priority": 70, "cpu": 0}
    finally:
        srv.host.close()
