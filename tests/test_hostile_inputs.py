"""Inputs from outside that used to hang the command or end in a traceback (issue 37 item 6).

``/dev/zero`` as a config was read until memory ran out, a FIFO hung in ``open``, deeply nested
TOML (in a file or a ``--set``) raised RecursionError, an emulated ODrive's
``encoder_period_s``/``heartbeat_period_s`` of 1e-300 s hung inside ``enable()``.  Each is now a
config error: exit 2, one line naming the file (and the field), no traceback, in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    from tests.serve_process import loosest_timing_sets
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from serve_process import loosest_timing_sets

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"


def _tl(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "controller.app.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _refused(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr, r.stderr[-1500:]
    for w in words:
        assert w in r.stderr, (w, r.stderr[-500:])


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_device_a_fifo_or_a_directory_is_not_read_as_a_config(tmp_path, command):
    fifo = tmp_path / "cfg.toml"
    os.mkfifo(fifo)
    for path, what in (("/dev/zero", "a device"), (fifo, "a FIFO"), (tmp_path, "a directory")):
        _refused(_tl(command, path, timeout=60), str(path), what)


def test_an_oversized_config_is_refused_unread(tmp_path):
    big = tmp_path / "big.toml"
    with open(big, "wb") as f:
        f.truncate(64 * 1024 * 1024)          # sparse: 64 MiB of zeros, nothing written
    _refused(_tl("check", big, timeout=60), str(big), "larger than any config file")


def test_deep_nesting_is_a_config_error(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text('name = "x"\na = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    _refused(_tl("run", deep, timeout=60), str(deep), "nested too deeply")
    deep.write_text('name = "x"\na = ' + "{b = " * 5000 + "1" + "}" * 5000 + "\n")
    _refused(_tl("check", deep, timeout=60), "nested too deeply")
    _refused(_tl("check", RUNS / "seed003_2r.toml", "--set", "driver.x=" + "[" * 50_000 + "]" * 50_000),
             "driver.x", "nested too deeply")


@pytest.mark.parametrize("key", ["encoder_period_s", "heartbeat_period_s"])
def test_an_emulated_drive_period_that_would_hang_enable_is_refused(tmp_path, key):
    r = _tl("run", RUNS / "stewart_motion.toml", "--duration", "0.05", "--no-plots", "-o", tmp_path / "o",
            "--set", f"driver.emulator.{key}=1e-300", timeout=300)
    _refused(r, f"driver.emulator.{key}")


def test_a_serial_baud_rate_of_1e18_is_a_config_error(tmp_path):
    from tests.test_bringup import write_clean_calibration

    src = ROOT / "hil_configs" / "hardware" / "seed003_2r_odrive_ascii_serial.toml"
    text = (src.read_text().replace('file = "../robots/', f'file = "{(ROOT / "hil_configs" / "robots").as_posix()}/')
            .replace('port = "/dev/ttyACM0"', 'port = "loop://"').replace("baudrate = 115200", "baudrate = 1000000000000000000"))
    cfg = tmp_path / "hw.toml"
    cfg.write_text(text)
    write_clean_calibration(cfg)            # a hardware run needs one (tests/test_bringup.py)
    _refused(_tl("run", cfg, "--yes-hardware", "--no-plots", "-o", tmp_path / "o"), "driver.baudrate")


@pytest.mark.exclusive
def test_inherited_ignored_signals_are_handled_or_warned_about(tmp_path):
    """Started as a background job under nohup (SIGINT and SIGHUP inherited ignored): the command
    warns at start that SIGHUP will not stop the robot, and SIGINT still stops it safely (exit 1).
    Before, both were silently ignored: the run went on to the end (exit 0)."""
    import signal
    import time

    def ignore():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "o"
    p = subprocess.Popen([sys.executable, "-m", "controller.app.cli", "run", str(RUNS / "3rrr_circle_direct.toml"),
                          "--duration", "20", "--no-plots", "--no-progress", "-o", str(out),
                          "--set", 'loop.clock="wall"', *loosest_timing_sets()],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=ignore)
    try:
        line = p.stdout.readline()              # "torqueloop: running ..." (after the warnings)
        assert "running" in line, line
        time.sleep(2.0)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert "SIGHUP is ignored" in stderr and "will NOT stop" in stderr, stderr
    assert "SIGINT was inherited ignored" in stderr, stderr
    assert p.returncode == 1, (stdout[-800:], stderr[-800:])
    assert "STOPPED" in stdout and "SIGINT" in stdout, stdout[-800:]
