"""The one close sequence of the drivers that talk through transports (``drivers.base.TransportDriver``):
disable first (best effort), then close every owned transport whatever failed, then report every
failure as one CommsError; a second close does nothing and a closed driver refuses to cycle.
Table-driven: fault x protocol, on the real drivers of the shipped simulated runs (their
emulators answer on the same buses and ports)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.base import Command, TransportDriver
from dynamics.errors import CommsError, DriverError

RUNS = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"
CONFIGS = {"mit": "3rrr_circle.toml", "odrive_can": "stewart_motion.toml", "cia402": "3rrr_circle_cia402.toml",
           "dynamixel": "dxl_3dof_arm.toml"}
FAULTS = ("none", "disable_fails", "transport_fails", "both", "disable_bug")


def test_every_transport_driver_closes_through_the_one_sequence():
    from drivers.cia402 import Cia402Driver
    from drivers.dynamixel import DynamixelDriver
    from drivers.mit import MitCanDriver
    from drivers.odrive import OdriveAsciiDriver, OdriveCanDriver

    for cls in (MitCanDriver, OdriveCanDriver, OdriveAsciiDriver, Cia402Driver, DynamixelDriver):
        assert issubclass(cls, TransportDriver)
        assert "close" not in vars(cls) and "_check_open" not in vars(cls), cls


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("protocol", sorted(CONFIGS))
def test_close_disables_then_closes_every_transport(protocol, fault, monkeypatch):
    from controller.app.run import build_run, load_run

    run = build_run(load_run(RUNS / CONFIGS[protocol]), out_dir=None)
    try:
        drv = run.driver.inner
        assert drv._owns
        calls = []
        disable = drv.disable

        def failing_disable():
            calls.append("disable")
            if fault in ("disable_fails", "both"):
                raise DriverError("disable refused")
            if fault == "disable_bug":
                raise RuntimeError("a bug while disabling")
            disable()

        monkeypatch.setattr(drv, "disable", failing_disable)
        transports = drv.transports
        for i, t in enumerate(transports):
            def failing_close(_i=i, _close=t.close):
                calls.append(f"close {_i}")
                _close()
                if fault in ("transport_fails", "both") and _i == 0:
                    raise CommsError("bus gone")
            monkeypatch.setattr(t, "close", failing_close)
        expected = {"none": 0, "disable_fails": 1, "transport_fails": 1, "both": 2,
                    "disable_bug": 1 if protocol == "cia402" else None}[fault]
        if expected == 0:
            drv.close()
        elif expected is None:          # not a driver error: raised, after the transports closed
            with pytest.raises(RuntimeError, match="a bug"):
                drv.close()
        else:                           # CiA 402 also collects what canopen raises while disabling
            with pytest.raises(CommsError, match=rf"{type(drv).__name__}\.close: {expected} error\(s\)"):
                drv.close()
        assert calls == ["disable"] + [f"close {i}" for i in range(len(transports))]
        assert all(t.closed for t in transports)
        drv.close()                     # a second close does nothing
        assert len(calls) == 1 + len(transports)
        with pytest.raises(DriverError, match="closed"):
            drv.cycle(Command(np.zeros(drv.n_joints)))
    finally:
        run.close()
