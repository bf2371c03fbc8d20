"""A bad command never reaches a motor: bad command x protocol, on the real drivers of the
shipped simulated runs (their emulators answer on the same buses and ports).

Each bad command is refused with a DriverError before anything is written to a bus or a port,
the driver's cycle count does not move, and the next good command goes out and is answered as
usual.  The torque-only drivers share one check (``drivers.base.torque_only``) and one
``cycle()`` (``drivers.base.TransportDriver.cycle``); the MIT driver, which also takes
drive-side PD gains, has its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.base import Command, TransportDriver, torque_only
from dynamics.errors import DriverError

RUNS = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"
CONFIGS = {"mit": "3rrr_circle.toml", "odrive_can": "stewart_motion.toml", "cia402": "3rrr_circle_cia402.toml",
           "dynamixel": "dxl_3dof_arm.toml"}
TORQUE_ONLY = {"odrive_can", "cia402", "dynamixel"}


def _bad(kind: str, n: int) -> Command:
    z = np.zeros(n)
    one = np.ones(n)
    nan_at_1 = z.copy()
    nan_at_1[min(1, n - 1)] = np.nan
    return {
        "torque_none": lambda: Command(None),
        "torque_nan": lambda: Command(nan_at_1),
        "torque_inf": lambda: Command(np.full(n, np.inf)),
        "torque_short": lambda: Command(np.zeros(n - 1)),
        "torque_2d": lambda: Command(np.zeros((1, n))),
        "torque_text": lambda: Command(["a"] * n),
        "kp_nan": lambda: Command(z, position_rad=z, velocity_rad_s=z, kp_nm_per_rad=np.full(n, np.nan),
                                  kd_nm_s_per_rad=z),
        "kd_short": lambda: Command(z, position_rad=z, velocity_rad_s=z, kp_nm_per_rad=z,
                                    kd_nm_s_per_rad=np.zeros(n - 1)),
        "kp_nonzero": lambda: Command(z, position_rad=z, velocity_rad_s=z, kp_nm_per_rad=one,
                                      kd_nm_s_per_rad=z),
    }[kind]()


#: (bad command, protocol) pairs that are a valid command for that protocol: the MIT drive has
#: a PD of its own
VALID = {("kp_nonzero", "mit")}
KINDS = ("torque_none", "torque_nan", "torque_inf", "torque_short", "torque_2d", "torque_text", "kp_nan",
         "kd_short", "kp_nonzero")


def _count_writes(drv, monkeypatch) -> list:
    """Wrap what each transport writes through (a CAN bus's send, a serial port's write; an
    inline port to emulated servos is its own wire)."""
    sent: list = []
    for t in drv.transports:
        low = getattr(t, "_bus", None) or getattr(t, "_port", t)
        names = ["send"] if hasattr(t, "_bus") else ["write"]
        if getattr(t, "_fields_bus", None) is not None:
            names.append("send_fields")     # an in-process emulator's bus: frames handed over as fields
        for name in names:
            orig = getattr(low, name)

            def wrapped(*a, _orig=orig, **k):
                sent.append(a)
                return _orig(*a, **k)
            monkeypatch.setattr(low, name, wrapped)
    return sent


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def enabled(request):
    from controller.app.run import build_run, load_run

    run = build_run(load_run(RUNS / CONFIGS[request.param]), out_dir=None)
    drv = run.driver.inner
    drv.enable()
    yield request.param, drv
    run.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_command_is_refused_before_anything_is_sent(enabled, kind, monkeypatch):
    protocol, drv = enabled
    n = drv.n_joints
    cmd = _bad(kind, n)
    sent = _count_writes(drv, monkeypatch)
    cycles = drv.cycles
    if (kind, protocol) in VALID:
        fb = drv.cycle(cmd)
        assert sent and drv.cycles == cycles + 1 and fb.position_rad.shape == (n,)
        return
    with pytest.raises(DriverError, match="command"):
        drv.cycle(cmd)
    assert sent == [], f"{protocol}: {kind} put {len(sent)} write(s) on the wire"
    assert drv.cycles == cycles
    fb = drv.cycle(Command(np.zeros(n)))          # the driver goes on with a good command
    assert sent and drv.cycles == cycles + 1
    assert np.all(np.isfinite(fb.position_rad))


def test_the_torque_only_drivers_share_one_cycle():
    from drivers.cia402 import Cia402Driver
    from drivers.dynamixel import DynamixelDriver
    from drivers.odrive import OdriveAsciiDriver, OdriveCanDriver

    for cls in (OdriveCanDriver, OdriveAsciiDriver, Cia402Driver, DynamixelDriver):
        assert "cycle" not in vars(cls) and cls.cycle is TransportDriver.cycle, cls


@pytest.mark.parametrize("gain", [None, [0.0, 0.0], [0.0, -0.0]])
def test_torque_only_passes_torques_and_zero_gains(gain):
    cmd = Command(np.array([0.5, -1.25]), kp_nm_per_rad=gain, kd_nm_s_per_rad=gain)
    assert torque_only(cmd, 2, "X") == [0.5, -1.25]
    assert torque_only(Command((1, 2)), 2, "X") == [1.0, 2.0]          # any sequence of numbers


@pytest.mark.parametrize("cmd, match", [
    (Command(None), "torque_nm is required"),
    (Command(np.array([0.0, np.nan])), "non-finite"),
    (Command(np.array([0.0, -np.inf])), "non-finite"),
    (Command(np.zeros(3)), r"shape \(2,\)"),
    (Command(object()), "2 numbers"),
    (Command(["x", "y"]), "torque_nm must be 2 numbers"),
    (Command(np.zeros(2), kp_nm_per_rad=[1.0, 0.0]), "X does torque control only; command.kp_nm_per_rad"),
    (Command(np.zeros(2), kd_nm_s_per_rad=[0.0, np.nan]), "command.kd_nm_s_per_rad holds non-finite"),
    (Command(np.zeros(2), kd_nm_s_per_rad=[0.0]), r"command.kd_nm_s_per_rad must have shape \(2,\)"),
    (Command(np.zeros(2), kp_nm_per_rad=["a", "b"]), "command.kp_nm_per_rad must be 2 numbers"),
])
def test_torque_only_refuses(cmd, match):
    with pytest.raises(DriverError, match=match):
        torque_only(cmd, 2, "X")
