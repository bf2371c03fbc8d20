"""Random-frame fuzzing of the MIT emulator (used by the suite and by ``benchmarks/``).

:func:`fuzz_mit_emulator` feeds ``n_frames`` random frames (random ids around and on
the motors' ids, lengths 0..8 with a bias to 8, data, remote / extended / error flags,
a share of well-formed commands and special frames with random fields) to a
:class:`~drivers.sim.mit_emulator.MitEmulator` on a simulated plant, advancing the
loop clock by a random step per frame, and checks after every frame what the firmware
guarantees: no exception out of ``on_frame``, at most one reply and only to an 8-byte
data frame with a motor's id, every reply decodes, the plant state stays finite and
the applied torque stays within each motor's torque range (joint side).
"""

from __future__ import annotations


import can
import numpy as np

from dynamics.errors import TorqueloopError
from ..base import JointMapping
from ..codecs import mit as mitc
from .mit_emulator import MitEmulator, MitMotorConfig
from .plant import SimulatedPlant

__all__ = ["fuzz_mit_emulator"]


def fuzz_mit_emulator(n_frames: int, seed: int = 0, model=None) -> dict:
    """Fuzz one 2-motor MIT emulator; return counters (raises AssertionError on a violation).

    Parameters
    ----------
    n_frames : int
        Number of random frames.
    seed : int
        Seed of every random choice.
    model : dynamics.Model, optional
        Plant model with 2 joints (default: a gravity-free planar two-link arm).
    """
    from dynamics.toy_models import PlanarTwoLink
    rng = np.random.default_rng(seed)
    plant = SimulatedPlant(model if model is not None else PlanarTwoLink(g=0.0), q0=[0.1, -0.2],
                           current_lag_s=0.0004, viscous=0.05)
    motors = [MitMotorConfig(1, 0, "AK80-9", JointMapping(gear_ratio=1.0)),
              MitMotorConfig(2, 1, "AK60-6", JointMapping(gear_ratio=2.0, sign=-1), variant="cubemars8")]
    emu = MitEmulator(motors, watchdog_timeout_s=0.05)
    emu.bind(plant)
    lims = {1: mitc.MIT_MODELS["AK80-9"], 2: mitc.MIT_MODELS["AK60-6"]}
    tau_max = np.array([18.0 * 1.0, 15.0 * 2.0])
    ids = [0, 1, 2, 3, 0x7FF]
    t = 0.0
    counts = {"frames": 0, "replies": 0, "commands_applied": 0}
    for k in range(n_frames):
        t += float(rng.choice([0.0, 1e-4, 1e-3, 5e-3]))
        r = rng.random()
        arb = int(rng.choice(ids)) if r < 0.9 else int(rng.integers(0, 0x800))
        ext = rng.random() < 0.03
        rtr = rng.random() < 0.03
        err = rng.random() < 0.01
        if rng.random() < 0.1:
            n = int(rng.integers(0, 9))
        else:
            n = 8
        kind = rng.random()
        if n == 8 and kind < 0.08:
            last = rng.choice([0xFC, 0xFD, 0xFE, 0xFB, 0xFF, 0x00], p=[0.5, 0.15, 0.15, 0.1, 0.05, 0.05])
            data = bytes([0xFF] * 7 + [int(last)])
        elif n == 8 and kind < 0.6 and arb in lims:
            L = lims[arb]
            vals = rng.uniform(-1.5, 1.5, 5) * [L.p_max_rad, L.v_max_rad_s, L.kp_max, L.kd_max, L.t_max_nm]
            data = mitc.encode_command(vals[0], vals[1], abs(vals[2]), abs(vals[3]), vals[4], L)
        else:
            data = bytes(rng.integers(0, 256, n, dtype=np.uint8).tolist())
        msg = can.Message(arbitration_id=arb, data=data, is_extended_id=ext, is_remote_frame=rtr,
                          is_error_frame=err, dlc=n if not rtr else 8, check=False)
        # the host's order: timers due, plant to t, then the frame if the device accepts it
        while emu.next_timer_s() <= t:
            te = emu.next_timer_s()
            plant.advance_to(max(te, plant.t_s))
            emu.on_timer(te)
        plant.advance_to(t)
        out = emu.on_frame(msg, t) if emu.accepts(msg) else None
        counts["frames"] += 1
        valid = (arb in lims and n == 8 and not ext and not rtr and not err)
        if out:
            assert valid, f"frame {k}: reply to an invalid frame {msg}"
            assert len(out) == 1 and out[0].arbitration_id == 0
            rep = mitc.decode_reply(bytes(out[0].data), lims[arb])
            assert rep.motor_id == arb
            counts["replies"] += 1
        else:
            assert not valid, f"frame {k}: no reply to a valid frame {msg}"
        _, q, qd = plant.state
        assert np.all(np.isfinite(q)) and np.all(np.isfinite(qd)), f"frame {k}: plant state not finite"
        assert np.all(np.abs(plant.applied_torque_nm) <= tau_max * (1 + 1e-9)), f"frame {k}: over limit"
        if rng.random() < 0.001:   # occasionally a device fault on / off, as a test would do
            try:
                emu.set_device_fault(int(rng.choice([1, 2])), rng.choice([None, "limp", "frozen"]))
            except TorqueloopError as err:  # pragma: no cover - would be a bug
                raise AssertionError(f"set_device_fault raised {err!r}") from err
    counts["commands_applied"] = emu.commands_applied(1) + emu.commands_applied(2)
    counts["t_end_s"] = t
    return counts
