"""Per-cycle encode cost of the real CAN drivers (no I/O): ``make_commands`` for 3 and 6 motors.

``run(quick) -> list[dict]`` rows with ``case``, ``median_us``, ``p99_us``, ``note`` (protocol of
``benchmarks/run.py``).  The full driver <-> emulator cycle is benchmarked in ``bench_sim.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def _time_call(fn, *args, repeat: int, number: int) -> tuple[float, float]:
    """Median and 99th percentile [us] of ``repeat`` samples, each the mean of ``number`` calls."""
    try:
        from benchmarks._timing import time_call  # shared helper when present
    except ImportError:
        time_call = None
    if time_call is not None:
        return time_call(fn, *args, repeat=repeat, number=number)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args)
        samples.append((time.perf_counter() - t0) / number * 1e6)
    return float(np.median(samples)), float(np.percentile(samples, 99))


class _NullBus:
    def send(self, msg, timeout=None):
        pass

    def recv(self, timeout=None):
        return None

    def shutdown(self):
        pass


def run(quick: bool = False) -> list[dict]:
    from drivers.base import Command, JointMapping
    from drivers.codecs import mit as mc
    from drivers.codecs import odrive as oc
    from drivers.mit import MitCanDriver, MitJoint
    from drivers.odrive import OdriveAxis, OdriveCanDriver
    from drivers.transport import CanTransport

    repeat, number = (50, 20) if quick else (300, 50)
    rng = np.random.default_rng(0)
    rows = []
    lim = mc.MIT_MODELS["AK80-9"]
    med, p99 = _time_call(mc.encode_command, 0.1, 0.2, 10.0, 0.5, 1.0, lim, repeat=repeat, number=number * 5)
    rows.append({"case": "mit encode_command (1 frame)", "median_us": med, "p99_us": p99})
    data = mc.encode_reply(1, 0.1, 0.2, 1.0, lim)
    med, p99 = _time_call(mc.decode_reply, data, lim, repeat=repeat, number=number * 5)
    rows.append({"case": "mit decode_reply (1 frame)", "median_us": med, "p99_us": p99})
    for n in (3, 6):
        t = CanTransport.from_bus(_NullBus(), name="null")
        mapping = JointMapping(gear_ratio=1.0)
        mit = MitCanDriver([MitJoint(t, i + 1, lim, mapping) for i in range(n)], now=time.monotonic,
                           owns_transports=False)
        cmd = Command(torque_nm=rng.uniform(-5, 5, n), position_rad=rng.uniform(-1, 1, n),
                      velocity_rad_s=rng.uniform(-1, 1, n), kp_nm_per_rad=np.full(n, 20.0),
                      kd_nm_s_per_rad=np.full(n, 1.0))
        med, p99 = _time_call(mit.make_commands, cmd, repeat=repeat, number=number)
        rows.append({"case": f"mit make_commands, {n} motors (PD + torque)", "median_us": med, "p99_us": p99})
        od = OdriveCanDriver([OdriveAxis(t, i, mapping) for i in range(n)], now=time.monotonic,
                             owns_transports=False)
        tcmd = Command(torque_nm=rng.uniform(-5, 5, n))
        med, p99 = _time_call(od.make_commands, tcmd, repeat=repeat, number=number)
        rows.append({"case": f"odrive make_commands, {n} axes", "median_us": med, "p99_us": p99})
    rows += _dynamixel_rows(repeat, number)
    rows += _cia402_rows(rng, repeat, number)
    est = oc.encode_encoder_estimates(1.0, 2.0)
    med, p99 = _time_call(oc.decode_encoder_estimates, est, repeat=repeat, number=number * 5)
    rows.append({"case": "odrive decode_encoder_estimates", "median_us": med, "p99_us": p99})
    return rows


def _dynamixel_rows(repeat: int, number: int) -> list[dict]:
    """Dynamixel: make_commands (Sync Write) and a full cycle against emulated servos on a pty."""
    from drivers.base import Command, JointMapping
    from drivers.codecs import dynamixel as dx
    from drivers.dynamixel import DynamixelDriver, DynamixelServo
    from drivers.serial_port import SerialTransport
    from drivers.sim.dynamixel_emulator import DynamixelBusEmulator, ServoConfig
    from drivers.sim.plant import SimulatedPlant
    from dynamics import load_model
    from pathlib import Path

    rows = []
    xm = dx.DXL_MODELS["XM430-W350"]
    mapping = JointMapping(torque_constant_nm_per_a=xm.torque_constant_nm_per_a)
    root = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
    for n in (3, 6):
        model = load_model(root / ("dxl_3dof_arm.toml" if n == 3 else "arm6_demo.toml"))
        servos = [DynamixelServo(i + 1, xm, mapping) for i in range(n)]
        drv = DynamixelDriver(None, servos, now=time.monotonic, owns_port=False)
        cmd = Command(torque_nm=np.linspace(-1.0, 1.0, n))
        med, p99 = _time_call(drv.make_commands, cmd, repeat=repeat, number=number)
        rows.append({"case": f"dynamixel make_commands (Sync Write), {n} servos", "median_us": med, "p99_us": p99})
        t = [0.0]
        plant = SimulatedPlant(model, q0=np.zeros(n))
        with DynamixelBusEmulator([ServoConfig(i + 1, i, xm, mapping) for i in range(n)], plant,
                                  lambda: t[0], baudrate=4_000_000) as emu:
            port = SerialTransport(emu.port_path, baudrate=4_000_000, timeout_s=0.05)
            with DynamixelDriver(port, servos, now=lambda: t[0], reply_timeout_s=0.05, status_every=0) as d:
                d.enable()
                zero = Command(np.zeros(n))

                def one():
                    t[0] += 1e-3
                    d.cycle(zero)
                med, p99 = _time_call(one, repeat=max(20, repeat // 5), number=max(5, number // 5))
        rows.append({"case": f"dynamixel cycle vs emulated servos (pty, 4 Mbit/s modelled), {n} servos",
                     "median_us": med, "p99_us": p99,
                     "note": "includes the modelled wire time and the emulator thread"})
    return rows


def _cia402_rows(rng, repeat: int, number: int) -> list[dict]:
    """CiA 402 CST: pure make_commands (RPDO1 per drive) and one decode, for 3 and 6 drives."""
    from drivers.base import Command, JointMapping
    from drivers.cia402 import Cia402Axis, Cia402Driver
    from drivers.codecs import cia402 as cc
    from drivers.transport import CanTransport

    rows = []
    units = cc.Cia402Units(counts_per_rev=131072, rated_torque_nm=1.0)
    for n in (3, 6):
        t = CanTransport.from_bus(_NullBus(), name="null")
        drv = Cia402Driver([Cia402Axis(t, i + 1, units, JointMapping(gear_ratio=9.0)) for i in range(n)],
                           now=time.monotonic, owns_transports=False)
        tcmd = Command(torque_nm=rng.uniform(-5, 5, n))
        med, p99 = _time_call(drv.make_commands, tcmd, repeat=repeat, number=number)
        rows.append({"case": f"cia402 make_commands, {n} drives", "median_us": med, "p99_us": p99})
    data = cc.encode_tpdo1(0x1237, 123456, -250)
    med, p99 = _time_call(cc.decode_tpdo1, data, repeat=repeat, number=number * 5)
    rows.append({"case": "cia402 decode_tpdo1", "median_us": med, "p99_us": p99})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_drivers [--quick] [--json FILE]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_drivers", *sys.argv[1:]]))
