"""CiA 402 on real drives (pytest marker ``hardware``), skipped without hardware.

``TORQUELOOP_HW_CONFIG`` must name a run config whose driver type is ``cia402_can``
(e.g. a filled-in copy of ``hil_configs/hardware/3rrr_cia402_can_socketcan.toml``)::

    TORQUELOOP_HW_CONFIG=my_robot.toml python -m pytest -m hardware tests/test_hardware_cia402.py

Zero torque only: enable (SDO configuration, PDO mapping, state machine), cycles, the
drives' heartbeats, quick stop and back, disable.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from controller.clock import WallClock
from controller.app.run import load_run
from drivers.base import Command
from drivers.codecs.cia402 import State
from dynamics.config import Section

pytestmark = pytest.mark.hardware


@pytest.fixture(scope="module")
def spec():
    path = os.environ.get("TORQUELOOP_HW_CONFIG", "").strip()
    if not path:
        pytest.skip("TORQUELOOP_HW_CONFIG is not set: no hardware configured")
    s = load_run(path)
    if s.driver_type != "cia402_can":
        pytest.skip(f"{path}: driver type {s.driver_type!r} is not cia402_can")
    return s


def test_cia402_enable_cycle_quick_stop_disable(spec):
    from drivers.registry import build_driver

    clock = WallClock()
    sec = spec.driver_section
    drv = build_driver(Section(dict(sec.data), sec.file, sec.path), now=clock.now)
    n, P = drv.n_joints, spec.period_s
    try:
        fb = drv.enable()
        assert fb.enabled.all() and fb.fresh.all() and not fb.fault.any()
        t0 = clock.now()
        for k in range(1, 201):
            clock.wait_until(t0 + k * P)
            fb = drv.cycle(Command(np.zeros(n)))
            assert fb.fresh.all() and not fb.fault.any(), f"cycle {k}: {fb.info}"
        assert (fb.info["heartbeat_age_s"] < drv.heartbeat_timeout_s).all()
        fb = drv.quick_stop()
        states = {State(int(s)) for s in fb.info["state"]}
        assert states <= {State.QUICK_STOP_ACTIVE, State.SWITCH_ON_DISABLED}
        fb = drv.enable()
        assert fb.enabled.all()
        drv.disable()
        assert drv.disable_unconfirmed == []
    finally:
        drv.close()
