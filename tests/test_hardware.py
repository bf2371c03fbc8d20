"""Real-hardware tests (pytest marker ``hardware``), skipped without hardware.

Environment
-----------
``TORQUELOOP_HW_CONFIG``
    Path of a run config (e.g. a copy of ``hil_configs/hardware/3rrr_mit_can_socketcan.toml``
    with your CAN ids, signs and offsets) whose ``[driver] type`` is a hardware driver
    (``mit_can``, ``odrive_can``, ``odrive_ascii``).  Unset, or naming a simulated
    (``sim_*``) config: every test here is skipped.

Run them with the bus up and the robot supported (the drives are enabled and commanded
*zero torque* only: a joint not held by a brake or by its own friction may move under
gravity), the e-stop at hand::

    ip link set can0 up type can bitrate 1000000
    TORQUELOOP_HW_CONFIG=my_robot.toml python -m pytest -m hardware tests/test_hardware.py

What is checked
---------------
* ``test_zero_torque_cycles``: the driver built from the config enables, then 50 cycles of
  zero torque at the config's loop rate on the wall clock return fresh, finite feedback
  from every joint (no device fault, drives enabled, positions inside the model's limits,
  time stamps increasing); then disable and close.
* ``test_bus_load``: CAN drivers only: the configured bus-load budget fits
  (:func:`drivers.busload.driver_budget`), and over 500 zero-torque cycles the frames
  counted on the buses per second do not exceed the budget's estimate by more than 20 %,
  and the p99 of the driver cycle time stays below the loop period.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from controller.clock import WallClock
from controller.app.run import load_run
from drivers.base import Command
from dynamics.config import Section

pytestmark = pytest.mark.hardware

ENV = "TORQUELOOP_HW_CONFIG"


@pytest.fixture(scope="module")
def hw_spec():
    path = os.environ.get(ENV, "").strip()
    if not path:
        pytest.skip(f"{ENV} is not set: no hardware configured")
    spec = load_run(path)
    if not spec.hardware:
        pytest.skip(f"{path}: driver type {spec.driver_type!r} is simulated, not hardware")
    return spec


def _build(spec, clock):
    from drivers.registry import build_driver

    sec = spec.driver_section
    # a fresh Section per build (a Section tracks the keys read from it)
    return build_driver(Section(dict(sec.data), sec.file, sec.path), now=clock.now)


def _check_feedback(fb, spec, where: str) -> None:
    n = spec.model.dof
    q = np.asarray(fb.position_rad, dtype=float)
    assert q.shape == (n,), where
    assert np.all(fb.fresh), f"{where}: stale joints {np.flatnonzero(~np.asarray(fb.fresh)).tolist()}"
    assert np.all(np.isfinite(q)), f"{where}: non-finite position {q}"
    qd = np.asarray(fb.velocity_rad_s, dtype=float)
    assert not np.any(np.isinf(qd)), f"{where}: infinite velocity {qd}"  # NaN: not reported
    tau = np.asarray(fb.torque_nm, dtype=float)
    assert not np.any(np.isinf(tau)), f"{where}: infinite torque {tau}"
    assert not np.any(fb.fault), f"{where}: device fault codes {np.asarray(fb.fault).tolist()}"
    assert np.all(fb.enabled), f"{where}: drives not enabled {np.asarray(fb.enabled).tolist()}"
    lim = spec.model.limits
    assert np.all((q >= lim.position_min) & (q <= lim.position_max)), f"{where}: q {q} outside the limits"
    assert np.isfinite(fb.t_s), where


def test_zero_torque_cycles(hw_spec):
    clock = WallClock()
    drv = _build(hw_spec, clock)
    n, P = drv.n_joints, hw_spec.period_s
    try:
        fb = drv.enable()
        try:
            _check_feedback(fb, hw_spec, "enable")
            t_prev = fb.t_s
            t0 = clock.now()
            for k in range(1, 51):
                clock.wait_until(t0 + k * P)
                fb = drv.cycle(Command(np.zeros(n)))
                _check_feedback(fb, hw_spec, f"cycle {k}")
                assert fb.t_s > t_prev, f"cycle {k}: feedback time did not advance"
                t_prev = fb.t_s
        finally:
            drv.disable()
    finally:
        drv.close()


def test_bus_load(hw_spec):
    from drivers.busload import driver_budget

    clock = WallClock()
    drv = _build(hw_spec, clock)
    try:
        if not hasattr(drv, "bus_flows") or not hasattr(drv, "transports"):
            pytest.skip(f"{hw_spec.driver_type}: not a CAN driver, no bus load to check")
        rate = hw_spec.rate_hz
        report = driver_budget(drv, rate)
        assert report.fits, str(report)
        n, P = drv.n_joints, hw_spec.period_s
        fb = drv.enable()
        cycle_s = []
        try:
            _check_feedback(fb, hw_spec, "enable")
            before = [(t.frames_sent, t.frames_received) for t in drv.transports]
            t0 = clock.now()
            n_cycles = 500
            for k in range(1, n_cycles + 1):
                clock.wait_until(t0 + k * P)
                c0 = clock.now()
                fb = drv.cycle(Command(np.zeros(n)))
                cycle_s.append(clock.now() - c0)
                assert np.all(np.isfinite(fb.position_rad)), f"cycle {k}"
            elapsed = clock.now() - t0
            after = [(t.frames_sent, t.frames_received) for t in drv.transports]
        finally:
            drv.disable()
        frames = sum((a[0] - b[0]) + (a[1] - b[1]) for a, b in zip(after, before))
        measured_fps = frames / elapsed
        budget_fps = sum(ld.frames_per_s for ld in report.loads)
        assert measured_fps <= 1.2 * budget_fps, (
            f"{measured_fps:.0f} frames/s on the bus(es), budget estimate {budget_fps:.0f}:\n{report}")
        p99 = float(np.percentile(cycle_s, 99))
        assert p99 < P, f"driver cycle p99 {1e6 * p99:.0f} us exceeds the period {1e6 * P:.0f} us"
    finally:
        drv.close()
