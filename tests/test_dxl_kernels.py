"""The compiled Dynamixel paths against the Python paths they stand for (the reference).

* the driver's Sync Write of Goal Current (:func:`drivers._dxl_kernels.encode_goal_current`)
  against :meth:`DynamixelDriver.make_commands`, byte for byte, over random torques and mappings
  (LSB half-way points, saturation, signed zeros, huge values);
* the driver's Fast Sync Read decoding (:func:`drivers._dxl_kernels.decode_fast_status`): two
  drivers, one with the compiled paths switched off, against twin emulators over a random session
  with faults (overload, silent servo, corrupted replies, damaged and unexpected packets): the
  same traffic, the same feedback bit for bit;
* the emulated servos' compiled firmware (:mod:`drivers.sim._dxl_kernel`): twin buses, one
  served by the Python path only, given the same random byte sequences (Sync Writes, Fast Sync
  Reads and Sync Reads, some to unknown IDs or beyond Current Limit, mixed with Reads, Writes, Reboots, Sync
  Reads, damaged, split and noisy packets) and the same faults (hardware errors, supply voltage,
  temperature, Shutdown, silent servos, torque off, the bus watchdog expiring, corrupted
  replies): after every step the same replies, control tables, servo state, plant state and wire
  schedule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.base import Command, JointMapping
from drivers.codecs import dynamixel as dx
from drivers.dynamixel import DynamixelDriver, DynamixelServo
from drivers.sim.dynamixel_emulator import DynamixelBusEmulator, ServoConfig
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.errors import CommsTimeoutError, DriverError

try:
    from tests.conftest import Recorder
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from conftest import Recorder

ROBOT = Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "dxl_3dof_arm.toml"
MODELS = ("XM430-W350", "XM540-W270", "XH430-W350")
A = dx.Addr


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def model():
    return load_model(ROBOT)


def _mappings(rng) -> list[JointMapping]:
    return [JointMapping(sign=int(rng.choice([-1, 1])), gear_ratio=float(rng.choice([1.0, 2.5, 3.0])),
                         offset_rad=float(rng.uniform(-0.3, 0.3)), efficiency=float(rng.choice([1.0, 0.9, 0.73])),
                         torque_constant_nm_per_a=dx.DXL_MODELS[m].torque_constant_nm_per_a * float(rng.uniform(0.8, 1.2)))
            for m in MODELS]


def _servos(maps) -> list[DynamixelServo]:
    return [DynamixelServo(i + 1, dx.DXL_MODELS[m], maps[i]) for i, m in enumerate(MODELS)]


# --- the driver's Sync Write ---------------------------------------------------------------------
def test_compiled_sync_write_equals_make_commands(model):
    rng = np.random.default_rng(5)
    checked = 0
    for trial in range(30):
        maps = _mappings(rng)
        drv = DynamixelDriver(None, _servos(maps), now=lambda: 0.0, owns_port=False)
        if trial % 3 == 0:
            drv._limit_lsb = [int(x) for x in rng.integers(1, 1500, 3)]   # as enable() reads them
            drv._lim[:] = drv._limit_lsb
        for _ in range(200):
            kind = rng.integers(6)
            if kind == 0:       # exactly half an LSB (round half to even), both signs
                tau = np.array([(rng.integers(-300, 300) + 0.5) * drv._C[6, j] * drv._C[5, j] * drv._C[4, j] *
                                drv._C[0, j] for j in range(3)])
            elif kind == 1:
                tau = rng.choice([0.0, -0.0, 1e-300, -1e-300, 1e300, -1e300], 3)
            elif kind == 2:
                tau = rng.normal(0, 50, 3)          # mostly saturated
            else:
                tau = rng.normal(0, 1.5, 3)
            n_tx, sat = drv._dk.encode_goal_current(tau, drv._C, drv._lim, drv._ids_arr, drv._tx)
            ref = drv.make_commands(Command(tau))
            assert drv._tx[:n_tx].tobytes() == ref and sat == drv.last_saturated, (tau, maps)
            checked += 1
        for bad in (np.array([np.nan, 0, 0]), np.array([0, np.inf, 0]), np.zeros(2)):
            assert drv._dk.encode_goal_current(bad, drv._C, drv._lim, drv._ids_arr, drv._tx)[0] == -1
            with pytest.raises(DriverError):
                drv._request(Command(bad))
    assert checked == 6000


def test_sync_write_stuffing_and_crc_of_the_frame_helper():
    from drivers import _dxl_kernels as dk
    rng = np.random.default_rng(1)
    for _ in range(300):
        body = rng.choice([0xFF, 0xFD, 0x00, 0x12], int(rng.integers(1, 40))).astype(np.uint8)
        at = int(rng.integers(0, 5))
        out = np.zeros(at + 7 + 2 * len(body) + 2, dtype=np.uint8)
        out[at:at + 5] = (0xFF, 0xFF, 0xFD, 0, 0xFE)
        out[at + 7:at + 7 + len(body)] = body
        n = dk.frame_body(out, at, len(body))
        assert out[at:at + n].tobytes() == dx._frame(0xFE, body.tobytes())


# --- the driver's Fast Sync Read decoding, in sessions ----------------------------------------------
def _bus(model, clock, maps, *, fast: bool, baud: int = 1_000_000) -> DynamixelBusEmulator:
    plant = SimulatedPlant(model, q0=np.array([0.1, -0.2, 0.3]), t0_s=0.0, encoder_counts_per_rev=4096)
    emu = DynamixelBusEmulator([ServoConfig(i + 1, i, m, maps[i]) for i, m in enumerate(MODELS)], plant, clock,
                               baudrate=baud, serve="inline")
    emu.fast = fast
    return emu


def _driver_session(model, seed: int, fast: bool):
    rng = np.random.default_rng(seed)
    maps = _mappings(rng)
    clock = Clock()
    emu = _bus(model, clock, maps, fast=False)
    rec = Recorder(emu.inline_port(timeout_s=0.05, wire_time="count"))
    drv = DynamixelDriver(rec, _servos(maps), now=clock, reply_timeout_s=0.05, status_every=7, owns_port=False)
    drv.fast = fast
    out = [drv.enable()]
    for k in range(120):
        clock.t += 0.002
        ev = {30: 1, 50: 4, 70: 0, 90: 3}.get(k, rng.integers(40))
        if ev == 0:
            emu.inject_hardware_error(int(rng.integers(1, 4)), 0x20)
        elif ev == 1:
            emu.corrupt_replies(int(rng.integers(1, 3)))
        elif ev == 2:
            emu.set_silent(int(rng.integers(1, 4)), bool(rng.integers(2)))
        elif ev == 3:       # a stray status packet before the cycle's (another device's answer)
            emu._outq.append((0.0, -1, dx.encode_status(2, 0, b"\x01")))
        elif ev == 4:       # noise on the wire ahead of the status
            emu._outq.append((0.0, -1, bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8))))
        tau = rng.normal(0, 1.0, 3) if ev != 5 else rng.normal(0, 40, 3)
        try:
            out.append(drv.cycle(Command(tau)))
        except DriverError as err:          # a joint the follow check or a fault stops: recorded
            out.append(repr(err))
    return rec.log, out, drv.fast_decoded


def _same_feedback(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    for name in ("t_s", "position_rad", "velocity_rad_s", "torque_nm", "fault", "fresh", "enabled"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert {k: np.asarray(v).tolist() for k, v in a.info.items()} == {k: np.asarray(v).tolist() for k, v in b.info.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_driver_cycle_equals_the_python_path(model, seed):
    log_py, fb_py, n_py = _driver_session(model, seed, fast=False)
    log_c, fb_c, n_c = _driver_session(model, seed, fast=True)
    assert [w for w in log_c if w[0] == "w"] == [w for w in log_py if w[0] == "w"]
    assert len(fb_c) == len(fb_py)
    for a, b in zip(fb_py, fb_c):
        _same_feedback(a, b)
    assert n_py == 0 and n_c >= 60         # the compiled decoder took most cycles, not all
    assert any(not isinstance(f, str) and f.info["corrupt"] for f in fb_c)


# --- the servos' compiled firmware -------------------------------------------------------------------
def _state(emu: DynamixelBusEmulator):
    p = emu.plant
    servos = [(bytes(s._tab), s.instructions, s.last_instruction_t, s._env, s._brake_released, s.injected)
              for s in emu.servos]
    return (servos, p.t_s, p._q.tobytes(), p._qd.tobytes(), p._tau_applied.tobytes(), p._cmd.tobytes(),
            emu._bus_free, sorted(emu._outq), emu.packets_in, emu._corrupt, p._braked.tolist())


def _drain(port) -> list:
    out = []
    while True:
        try:
            out.append(port.read(1, 0.002))
        except CommsTimeoutError:
            return out


def _cycle_bytes(rng, read_ids) -> bytes:
    ids = [int(i) for i in rng.permutation([1, 2, 3])[:int(rng.integers(1, 4))]]
    if rng.integers(8) == 0:
        ids.append(9)                                            # nobody has ID 9
    goals = [int(rng.integers(-2100, 2100)) if rng.integers(6) == 0 else int(rng.integers(-400, 400)) for _ in ids]
    sw = dx.encode_sync_write(A.GOAL_CURRENT, 2, [(i, (g & 0xFFFF).to_bytes(2, "little")) for i, g in zip(ids, goals)])
    addr, size = (dx.PRESENT_BLOCK_ADDR, 10) if rng.integers(5) else (int(rng.integers(0, 150)), int(rng.integers(1, 12)))
    fsr = (dx.encode_fast_sync_read if rng.integers(3) else dx.encode_sync_read)(addr, size, read_ids)
    # mostly the driver's cycle; also packets in other orders (served by the Python path)
    return {0: sw, 1: fsr, 2: fsr + sw, 3: sw + sw, 4: fsr + fsr}.get(int(rng.integers(12)), sw + fsr)


def _firmware_steps(rng, n: int):
    """A random sequence of (what, args) the twin buses are given."""
    steps = [("write", dx.encode_write(i, A.TORQUE_ENABLE, b"\x00")) for i in (1, 2, 3)]
    steps += [("write", dx.encode_write(i, A.OPERATING_MODE, b"\x00")) for i in (1, 2, 3)]
    steps += [("write", dx.encode_write(i, A.RETURN_DELAY_TIME, bytes((int(rng.integers(0, 20)),)))) for i in (1, 2, 3)]
    steps += [("write", dx.encode_write(2, A.HOMING_OFFSET, int(rng.integers(-5000, 5000)).to_bytes(4, "little",
                                                                                                  signed=True)))]
    steps += [("write", dx.encode_write(i, A.TORQUE_ENABLE, b"\x01")) for i in (1, 2, 3)]
    steps += [("write", dx.encode_write(i, A.BUS_WATCHDOG, b"\x05")) for i in (1, 2, 3)]
    for _ in range(n):
        dt = 0.002 if rng.integers(30) else float(rng.choice([0.0, 0.15, 0.0021]))
        steps.append(("clock", dt))
        ev = int(rng.integers(60))
        i = int(rng.integers(1, 4))
        read_ids = [1, 2, 3] if rng.integers(6) else [int(x) for x in rng.permutation([1, 2, 3, 9])[:3]]
        if ev == 0:
            steps.append(("hw", (i, int(rng.choice([0x20, 0x04, 0x08])))))
        elif ev == 15:          # an error the firmware notices at its next refresh
            steps.append(("hw_later", (i, int(rng.choice([0x20, 0x04, 0x08])))))
        elif ev == 1:
            steps.append(("volts", float(rng.choice([12.0, 7.0, 17.5, 11.95]))))
        elif ev == 2:
            steps.append(("temp", (i, float(rng.choice([35.0, 90.0, 36.5])))))
        elif ev == 3:
            steps.append(("silent", (i, bool(rng.integers(2)))))
        elif ev == 4:
            steps.append(("corrupt", int(rng.integers(1, 3))))
        elif ev == 5:
            steps.append(("write", dx.encode_reboot(i)))
        elif ev == 6:
            steps.append(("write", dx.encode_write(i, A.TORQUE_ENABLE, bytes((int(rng.integers(2)),)))))
        elif ev == 7:
            steps.append(("write", dx.encode_write(i, A.BUS_WATCHDOG, bytes((int(rng.choice([0, 5, 1])),)))))
        elif ev == 8:
            steps.append(("write", dx.encode_write(i, A.SHUTDOWN, bytes((int(rng.choice([0, 0x34, 0x20])),)))))
        elif ev == 9:
            steps.append(("write", dx.encode_read(i, dx.PRESENT_BLOCK_ADDR, 10)))
        elif ev == 10:
            steps.append(("write", dx.encode_sync_read(dx.PRESENT_BLOCK_ADDR, 10, read_ids)))
        elif ev == 11:          # a damaged cycle: a flipped bit
            b = bytearray(_cycle_bytes(rng, read_ids))
            b[int(rng.integers(len(b)))] ^= 1 << int(rng.integers(8))
            steps.append(("write", bytes(b)))
        elif ev == 12:          # split on the wire
            b = _cycle_bytes(rng, read_ids)
            k = int(rng.integers(1, len(b)))
            steps += [("write", b[:k]), ("write", b[k:])]
        elif ev == 13:          # noise ahead of the cycle
            steps.append(("write", bytes(rng.integers(0, 256, int(rng.integers(1, 6)), dtype=np.uint8)) +
                          _cycle_bytes(rng, read_ids)))
        elif ev == 14:
            steps.append(("write", dx.encode_write(i, A.STATUS_RETURN_LEVEL, bytes((int(rng.integers(3)),)))))
        else:
            steps.append(("write", _cycle_bytes(rng, read_ids)))
    return steps


def _apply(emu, clock, port, what, arg):
    if what == "clock":
        clock.t += arg
        emu.sync()
        return None
    if what == "write":
        port.write(arg)
        return _drain(port)
    {"hw": lambda: emu.inject_hardware_error(*arg), "volts": lambda: emu.set_supply_voltage(arg),
     "temp": lambda: emu.set_temperature(*arg), "silent": lambda: emu.set_silent(*arg),
     "corrupt": lambda: emu.corrupt_replies(arg),
     "hw_later": lambda: setattr(emu.servo(arg[0]), "injected", emu.servo(arg[0]).injected | arg[1])}[what]()
    return None


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_compiled_firmware_equals_the_python_firmware(model, seed):
    rng = np.random.default_rng(100 + seed)
    maps = _mappings(rng)
    steps = _firmware_steps(rng, 400)
    twins = []
    for fast in (False, True):
        clock = Clock()
        emu = _bus(model, clock, maps, fast=fast, baud=int(rng.choice([1_000_000, 4_000_000])) if not twins
                   else twins[0][0].baudrate)
        for s in emu.servos:        # powered on long ago: the realtime tick wraps during the session
            s._t0 = -32.7
        twins.append((emu, clock, emu.inline_port(timeout_s=0.01, wire_time="count")))
    (ref, ref_clock, ref_port), (emu, clock, port) = twins
    try:
        for k, (what, arg) in enumerate(steps):
            got_ref = _apply(ref, ref_clock, ref_port, what, arg)
            got = _apply(emu, clock, port, what, arg)
            assert got == got_ref, (k, what)
            assert _state(emu) == _state(ref), (k, what, arg)
        ref.check()
        emu.check()
    finally:
        ref.close()
        emu.close()
    assert ref.fast_writes == 0
    assert emu.fast_writes >= 150, emu.fast_writes      # the compiled firmware served most cycles
