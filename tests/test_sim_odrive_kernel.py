"""The ODrive emulator's compiled answer path equals its Python path to the bit.

``OdriveEmulator._estimates`` (one call of :func:`drivers.sim._odrive_kernel.encoder_estimates`)
against the Python path (``OdriveEmulator._motor_pos_vel`` -- ``SimulatedPlant.measure_joint``
and the mapping's float arithmetic -- then :func:`drivers.codecs.odrive.encode_encoder_estimates`):
the ``Get_Encoder_Estimates`` payloads must be equal byte for byte.  States: random, on the
encoder's half steps, signed zeros, subnormals, past float32's range (saturated), NaN (refused
by both paths the same way); mappings with sign, gear and offset; position offsets; with and
without an encoder.  Both as a request's answer and as a cyclic broadcast.

These are parity tests. The emulator's answers are checked independently by a third-party
client: ``test_odrive_references.py::test_third_party_odrive_can_client_enables_and_moves_the_emulated_axis_as_physics_predicts``.
"""

from __future__ import annotations

import can
import numpy as np
import pytest

from drivers.base import JointMapping
from drivers.codecs import odrive as odc
from drivers.sim import _odrive_kernel as ok
from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
from drivers.sim.plant import SimulatedPlant
from dynamics.errors import DriverError
from dynamics.toy_models import PlanarTwoLink

MAPPINGS = (JointMapping(), JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9),
            JointMapping(gear_ratio=628.3185307179587, sign=1, offset_rad=-1.25))
F32_MAX = float(np.finfo(np.float32).max)


def _emu(mapping, counts):
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=counts)
    emu = OdriveEmulator([OdriveAxisConfig(5, 1, mapping, heartbeat_period_s=None, encoder_period_s=0.001)])
    emu.bind(plant)
    return plant, emu


def _python_path(emu, ax):
    return odc.encode_encoder_estimates(*emu._motor_pos_vel(ax))


def _values(rng, quantum):
    v = [0.0, -0.0, 5e-324, -5e-324, 1e-310, 1.0, -1.0, 1e30, -1e30, 1e300, -1e300, 3.4e38, np.inf, -np.inf,
         F32_MAX, -F32_MAX]
    v += list(rng.normal(0.0, 3.0, 200)) + list(rng.normal(0.0, 1e6, 50))
    if quantum:
        v += [(k + 0.5) * quantum for k in range(-6, 6)] + [k * quantum for k in range(-3, 3)]
    return v


@pytest.mark.parametrize("counts", [None, 16384, 3])
@pytest.mark.parametrize("mapping", MAPPINGS)
def test_compiled_estimates_equal_the_python_path(mapping, counts):
    plant, emu = _emu(mapping, counts)
    ax = emu._axes[5]
    assert ax.quantum is not None            # the compiled path is taken (no sensor noise)
    rng = np.random.default_rng(11)
    vals = _values(rng, 0.0 if counts is None else 2 * np.pi / counts)
    n = 0
    for k, q in enumerate(vals):
        qd = vals[(7 * k + 3) % len(vals)]
        plant._q[1], plant._qd[1] = q, qd
        ax.pos_offset_rev = float(rng.choice([0.0, -0.0, 0.25, -1e5, 3e38]))
        emu._est[:] = 0xAA                   # what the kernel must overwrite
        try:
            want = _python_path(emu, ax)
        except DriverError:
            with pytest.raises(DriverError):
                emu._estimates(ax)
            continue
        got = emu._estimates(ax)
        assert got == want, (q, qd, ax.pos_offset_rev)
        assert bytes(emu._est) == want       # written by the kernel, not by the Python path
        n += 1
    assert n > 200


def test_compiled_estimates_on_the_bus_requests_and_broadcasts():
    """The frames the emulator sends (an RTR's answer and the cyclic broadcast) carry the Python
    path's payload; a NaN velocity is a frame ignored (request) as on the Python path."""
    plant, emu = _emu(MAPPINGS[1], 4096)
    ax = emu._axes[5]
    rng = np.random.default_rng(5)
    rtr = can.Message(arbitration_id=odc.arbitration_id(5, odc.Cmd.GET_ENCODER_ESTIMATES), is_remote_frame=True,
                      is_extended_id=False, dlc=8)
    for k in range(50):
        plant._q[1], plant._qd[1] = rng.normal(0, 2, 2)
        want = _python_path(emu, ax)
        (m,) = emu.on_frame(rtr, 0.001 * k)
        assert (m.arbitration_id, bytes(m.data)) == (rtr.arbitration_id, want)
        (m,) = emu.on_timer(emu.next_timer_s())
        assert (m.arbitration_id, bytes(m.data)) == (rtr.arbitration_id, want)
    plant._qd[1] = np.nan
    assert emu.on_frame(rtr, 1.0) == [] and emu.frames_ignored == 1


def test_noisy_plant_takes_the_python_path():
    """A plant drawing sensor noise: the measurement needs its random stream (the Python path)."""
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], position_noise_std_rad=1e-3,
                           rng=np.random.default_rng(0))
    emu = OdriveEmulator([OdriveAxisConfig(5, 1)])
    emu.bind(plant)
    assert emu._axes[5].quantum is None


def test_kernel_saturates_and_refuses_nan():
    """The kernel's own contract, against numpy's float32 conversion."""
    K = np.array([1.0, 2 * np.pi, 0.0])
    out = np.zeros(2, dtype=np.float32)
    assert ok.encoder_estimates(K, np.array([1e40, 0.0]), np.array([-1e40, 0.0]), 0, 0.0, 0.0, out)
    assert out.tolist() == [np.float32(F32_MAX), -np.float32(F32_MAX)]
    assert ok.encoder_estimates(K, np.array([1.5]), np.array([0.1]), 0, 0.0, 0.0, out)
    assert out.tolist() == [np.float32(1.5), np.float32(0.1)]
    assert not ok.encoder_estimates(K, np.array([np.nan]), np.array([0.0]), 0, 0.0, 0.0, out)


def _torque_states(rng):
    """(armed, input torque, torque limit, current limit, velocity limit, vel_gain, qd, torque
    constant) cases."""
    vals = [0.0, -0.0, 1e-320, 0.3, -0.3, 2.0, -50.0, 1e30, -3e38, np.inf]
    out = []
    for _ in range(600):
        out.append((bool(rng.random() < 0.8), float(rng.choice(vals + list(rng.normal(0, 3, 4)))),
                    float(rng.choice([np.inf, 0.5, 2.0, 1e-3])), float(rng.choice([10.0, 0.2, 1e30, 3.0])),
                    float(rng.choice([np.inf, 0.0, 0.5, 3.0, 1e38])), rng.choice([None, 0.02, 1.0, 0.0]),
                    float(rng.choice([0.0, -0.0, 0.3, -2.0, 1e6, -1e40, np.nan])),
                    float(rng.choice([0.05, -0.08, 2.0]))))
    return out


@pytest.mark.parametrize("mapping", MAPPINGS)
def test_compiled_applied_torque_equals_the_python_path(mapping):
    """The torque an axis applies (the clamp to its limit, the torque-mode velocity limit, the
    joint side) by the compiled call equals ``_apply_python``'s, the plant's held command too."""
    plants = []
    for _ in range(2):
        plant, emu = _emu(mapping, 4096)
        plants.append((plant, emu, emu._axes[5]))
    n_limited = 0
    for armed, t_in, tlim, cur, vl, g, qd, kt in _torque_states(np.random.default_rng(2)):
        res = []
        for k, (plant, emu, ax) in enumerate(plants):
            plant._qd[1] = qd
            ax.state = odc.AxisState.CLOSED_LOOP_CONTROL if armed else odc.AxisState.IDLE
            ax.input_torque, ax.torque_lim, ax.current_limit_a, ax.vel_limit_rev_s = t_in, tlim, cur, vl
            ax.kt = kt
            ax.params.pop("set_vel_gains", None)
            if g is not None:
                ax.params["set_vel_gains"] = (float(g), 0.0)
            ax.setpoint_nm = 99.0
            try:
                (emu._apply_python if k == 0 else emu._apply)(ax)
                err = None
            except DriverError as e:
                err = str(e)
            res.append((np.float64(ax.setpoint_nm).tobytes(), plant._tau_ff.tobytes(), err))
        assert res[0] == res[1], (armed, t_in, tlim, cur, vl, g, qd, kt)
        n_limited += armed and vl != np.inf and t_in != 0.0
    assert n_limited > 100


def test_compiled_applied_torque_is_taken(monkeypatch):
    """The compiled call computes the torque (the Python path is not asked)."""
    plant, emu = _emu(MAPPINGS[1], 4096)
    ax = emu._axes[5]
    monkeypatch.setattr(type(ax), "torque_setpoint", lambda self: 1 / 0)
    ax.state, ax.input_torque = odc.AxisState.CLOSED_LOOP_CONTROL, 0.5
    emu._apply(ax)
    assert ax.setpoint_nm == 0.5 and plant._tau_ff[1] == -0.5 * 9.0 * 0.9
