"""The emulated MIT offline path (InlineBus, the per-frame fast paths) gives the same runs as before.

* Lock-step 3rrr_circle runs through the emulated MIT driver: the log (every column but the
  wall-clock ``compute_s``), status, faults and metrics equal the runs served by the emulator
  thread on python-can's ``virtual`` bus (the bus path that did not change).  When the inline
  bus and the per-frame fast paths landed, the digests also equalled those of the code before
  them (00f24a8) on the development machine; they are not stored here, as a digest of floats
  depends on the platform's numpy and CPU.
  Three runs: the shipped one; seeded frame faults (drop, corrupt, duplicate, reorder) and a
  limp drive from 0.3 s; 8-byte replies with the drives' CAN watchdog on.
* The tuple decoders equal the records, and ``SimulatedPlant.measure_joint`` equals
  ``measure()``, bit for bit.
* :class:`~drivers.sim.emulators.InlineBus` is a python-can bus.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from pathlib import Path

import can
import numpy as np
import pytest

from controller.telemetry import read_log
from drivers.codecs import mit as mitc

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "hil_configs" / "runs" / "3rrr_circle.toml"

CASES = {
    "plain": ({}, 0.5),
    "faults": ({"driver.faults.seed": 3, "driver.faults.drop_prob": 0.003, "driver.faults.corrupt_prob": 0.003,
                "driver.faults.corrupt_mode": "bitflip", "driver.faults.duplicate_prob": 0.003,
                "driver.faults.reorder_prob": 0.003, "driver.faults.device_fault": "limp",
                "driver.faults.device_fault_ids": [2], "driver.faults.device_fault_at_s": 0.3,
                "safety.stale_cycles": 10, "safety.tracking_error_max": [0.05, 0.05, 0.5]}, 0.6),
    "cubemars8": ({"driver.reply_variant": "cubemars8", "driver.emulator.watchdog_timeout_s": 0.002,
                   "driver.emulator.temperature_c": 50.0}, 0.4),
}

def _digest(tmp_path, case, serve):
    from controller.app.run import build_run, load_run

    overrides, duration = CASES[case]
    spec = load_run(RUN, overrides={**overrides, "driver.emulator.serve": serve}, duration_s=duration)
    out = tmp_path / f"{case}-{serve}"
    run = build_run(spec, out_dir=out)
    inline = run.driver.hosts[0].inline
    res = run.execute()
    log = read_log(out)
    h = hashlib.sha256()
    for name in log.dtype.names:
        if name == "compute_s":
            continue
        h.update(name.encode())
        h.update(np.ascontiguousarray(log[name]).tobytes())
    h.update(json.dumps({"status": res.status, "n": res.n_cycles, "metrics": res.metrics,
                         "faults": [(f.t_s, f.cause, f.joint, f.message) for f in res.faults]},
                        sort_keys=True, default=lambda a: np.asarray(a).tolist()).encode())
    return (h.hexdigest(), res.status, res.n_cycles), inline, res


@pytest.mark.parametrize("case", list(CASES))
def test_lockstep_mit_runs_inline_equal_the_emulator_thread(tmp_path, case):
    fast, inline, res = _digest(tmp_path, case, "inline")
    assert inline
    threaded, inline_t, _ = _digest(tmp_path, case, "thread")
    assert not inline_t
    assert fast == threaded
    if case == "faults":    # the faults happened: a frame fault and the limp drive was detected
        assert res.faults and res.faults[0].cause == "device_fault"


def _bits(values):
    return [None if v is None else struct.pack("<d", v) if isinstance(v, float) else (type(v), v)
            for v in values]


def test_tuple_decoders_equal_the_records():
    rng = np.random.default_rng(5)
    payloads = [bytes(rng.integers(0, 256, 8, dtype=np.uint8)) for _ in range(3000)]
    payloads += [bytes(8), bytes([0xFF] * 8), bytes([0xFF] * 7 + [0xFB])]
    for lim in list(mitc.MIT_MODELS.values()) + [mitc.MitLimits(3.3, 7.1, 123.4, 2.2, 0.77)]:
        for data in payloads:
            c = mitc.decode_command(data, lim)
            assert _bits(mitc.decode_command_values(data, lim)) == _bits((c.p_rad, c.v_rad_s, c.kp, c.kd, c.t_nm))
            for d in (data, data[:6]):
                for centered in (False, True):
                    r = mitc.decode_reply(d, lim, centered)
                    # the fields, each mapped by the scalar functions
                    f = mitc.uint_to_float_centered if centered else mitc.uint_to_float
                    ref = (d[0], f((d[1] << 8) | d[2], -lim.p_max_rad, lim.p_max_rad, 16),
                           f((d[3] << 4) | (d[4] >> 4), -lim.v_max_rad_s, lim.v_max_rad_s, 12),
                           f(((d[4] & 0xF) << 8) | d[5], -lim.t_max_nm, lim.t_max_nm, 12),
                           d[6] if len(d) == 8 else None, d[7] if len(d) == 8 else None)
                    assert _bits(mitc.decode_reply_values(d, lim, centered)) == _bits(ref)
                    assert _bits((r.motor_id, r.p_rad, r.v_rad_s, r.t_nm, r.temperature_c, r.error)) == _bits(ref)
    for special in (mitc.ENTER_MOTOR_MODE, mitc.EXIT_MOTOR_MODE, mitc.SET_ZERO, bytes(7)):
        with pytest.raises(mitc.DecodeError):
            mitc.decode_command_values(special, lim)


@pytest.mark.parametrize("kw", [{"encoder_counts_per_rev": 16384}, {"encoder_counts_per_rev": 7}, {},
                                {"encoder_counts_per_rev": 4096, "position_noise_std_rad": 1e-3,
                                 "torque_noise_std_nm": 0.01}])
def test_measure_joint_equals_measure(kw):
    from drivers.sim.plant import SimulatedPlant
    from dynamics.toy_models import PlanarTwoLink

    noisy = "position_noise_std_rad" in kw
    plants = [SimulatedPlant(PlanarTwoLink(), q0=np.array([0.3, -0.8]),
                             rng=np.random.default_rng(1) if noisy else None, **kw) for _ in range(2)]
    rng = np.random.default_rng(2)
    step = 2 * np.pi / kw.get("encoder_counts_per_rev", 1)
    values = np.concatenate([rng.normal(0, 3, 500), [-0.0, 0.0, -1e-9, 1e-9, np.nan, np.inf, -np.inf, 1e17],
                             (np.arange(-20, 20) + 0.5) * step])
    for v in values:
        for p in plants:
            p._q[:] = [v, -v]
            p._qd[:] = [v / 3, -v]
            p._tau_applied[:] = [v, 2 * v]
        for j in range(2):
            _, q, qd, tau = plants[0].measure()
            ref = (float(q[j]), float(qd[j]), float(tau[j]))
            assert _bits(plants[1].measure_joint(j)) == _bits(ref)


def test_inline_bus_is_a_python_can_bus():
    from drivers.sim.emulators import InlineBus

    bus = InlineBus("t")
    assert isinstance(bus, can.BusABC) and bus.protocol == can.CanProtocol.CAN_20
    end = bus.device_end
    # no host yet: the frame waits on the channel for the devices
    bus.send(can.Message(arbitration_id=5, data=b"\x01\x02", is_extended_id=False))
    m = end.recv(0.0)
    assert m.arbitration_id == 5 and end.recv(0.0) is None
    end.send(can.Message(arbitration_id=6, data=b"\x03", is_extended_id=False))
    r = bus.recv(0.0)
    assert r.arbitration_id == 6 and r.is_rx and r.channel == "t" and r.timestamp > 0
    # nothing can arrive: a receive with a time out waits it out
    t0 = time.monotonic()
    assert bus.recv(0.02) is None
    assert time.monotonic() - t0 >= 0.015
    # filters are applied by BusABC.recv
    bus.set_filters([{"can_id": 7, "can_mask": 0x7FF}])
    end.send(can.Message(arbitration_id=6, data=b"", is_extended_id=False))
    end.send(can.Message(arbitration_id=7, data=b"", is_extended_id=False))
    assert bus.recv(0.5).arbitration_id == 7      # 6 is skipped
    end.shutdown()
    bus.send(can.Message(arbitration_id=8, data=b""))     # devices gone: dropped
    assert not bus._tx
    bus.shutdown()
    with pytest.raises(can.CanOperationError):
        bus.recv(0.0)
    with pytest.raises(can.CanOperationError):
        bus.send(can.Message(arbitration_id=9, data=b""))
