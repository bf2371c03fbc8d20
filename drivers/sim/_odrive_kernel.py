"""Compiled per-frame paths of :class:`drivers.sim.odrive_emulator.OdriveEmulator` on a plant
without sensor noise: the payload of an axis' ``Get_Encoder_Estimates`` (its cyclic broadcast,
or the answer to a request), and the torque an axis applies after a command
(``Set_Input_Torque``, a mode, a limit...).

:func:`encoder_estimates` does, in one call, what the emulator's Python path does for that
message (``OdriveEmulator._motor_pos_vel`` then :func:`drivers.codecs.odrive.encode_encoder_estimates`),
with the same operations in the same order, so the reply's bytes are equal to the last bit
(``tests/test_sim_odrive_kernel.py`` compares them over random and extreme measurements,
encoder steps, mappings and position offsets):

1. the joint's measurement (``Plant.measure_joint`` of a plant without noise: the position
   rounded to the encoder's step, half to even, the sign of a zero kept);
2. :class:`~drivers.base.JointMapping`'s motor-side position [turn] (plus the offset
   ``Set_Absolute_Position`` / ``Set_Linear_Count`` gave) and velocity [turn/s], each limited to
   the finite float32 range as the firmware's float32 estimates are;
3. the two little-endian float32 of the payload.

It never raises: a value the codec would refuse (a NaN) is reported by the status, and the
caller takes the Python path, which raises the proper error.

:func:`applied_torque` does what ``OdriveEmulator._apply`` computes before it hands the plant
its command: the held input torque clamped to the axis' limit (``_Axis.torque_setpoint``), the
firmware's torque-mode velocity limit on the motor velocity estimate, and the joint-side torque
``sign * t_m * gear * efficiency`` (the same operations in the same order, the same values;
``tests/test_sim_odrive_kernel.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import CompileGate, stamp_package_caches

#: layout of the per-axis constants K (float64): its mapping's sign, gear ratio, offset [rad],
#: efficiency
K_SIGN, K_GEAR, K_OFFSET, K_EFF = range(4)
K_SIZE = 4

#: the largest finite float32
F32_MAX = float(np.finfo(np.float32).max)

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, inline="always", error_model="numpy")
def _f32_saturate(x):
    """``min(max(x, -F32_MAX), F32_MAX)`` (a NaN stays NaN)."""
    if x < -F32_MAX:
        return -F32_MAX
    if x > F32_MAX:
        return F32_MAX
    return x


@njit("b1(f8[::1], f8[::1], f8[::1], i8, f8, f8, f4[::1])", cache=True, error_model="numpy")
def encoder_estimates(K, q, qd, j, quantum, pos_offset_rev, out):
    """The ``Get_Encoder_Estimates`` payload of the axis driving joint ``j``.

    Parameters
    ----------
    K : ndarray, shape (K_SIZE,)
        The axis' mapping: sign, gear ratio, offset [rad].
    q, qd : ndarray, shape (n,)
        The plant's joint positions [rad] (prismatic: [m]) and velocities.
    j : int
        The axis' joint.
    quantum : float
        The joint encoder's step [rad]; 0 for none.
    pos_offset_rev : float
        The axis' position offset [turn].
    out : ndarray of float32, shape (2,)
        Out: the position [turn] and velocity [turn/s] (a view of the 8-byte payload on a
        little-endian machine).

    Returns
    -------
    bool
        Whether ``out`` holds the payload (False: a value is NaN; the codec refuses it).
    """
    qj = q[j]
    if quantum > 0.0:
        x = qj / quantum
        qj = math.copysign(np.rint(x), x) * quantum
    s = K[K_SIGN]
    g = K[K_GEAR]
    pos = _f32_saturate(s * (qj - K[K_OFFSET]) * g / (2.0 * math.pi) + pos_offset_rev)
    vel = _f32_saturate(s * qd[j] * g / (2.0 * math.pi))
    if pos != pos or vel != vel:
        return False
    out[0] = np.float32(pos)
    out[1] = np.float32(vel)
    return True


@njit("UniTuple(f8, 2)(f8[::1], f8[::1], i8, b1, f8, f8, f8, f8, f8, f8)", cache=True, error_model="numpy")
def applied_torque(K, qd, j, armed, input_torque, torque_lim, current_limit_a, kt, vel_limit_rev_s, vel_gain):
    """The motor torque an axis applies now and its joint-side value.

    Parameters
    ----------
    K : ndarray, shape (K_SIZE,)
        The axis' mapping (sign, gear ratio, offset, efficiency).
    qd : ndarray, shape (n,)
        The plant's joint velocities.
    j : int
        The axis' joint.
    armed : bool
        Closed loop in torque control (else no torque).
    input_torque : float
        The held input torque [N m].
    torque_lim, current_limit_a, kt : float
        Motor torque limit [N m] (inf: none), current limit [A], torque constant [N m / A].
    vel_limit_rev_s : float
        Torque-mode velocity limit [turn/s] (inf: off).
    vel_gain : float
        ``vel_gain`` [N m / (turn/s)].

    Returns
    -------
    (t_m, tau_joint) : float, float
        The motor torque [N m] and the joint torque [N m] (or force [N]) the plant is given.
    """
    t_m = 0.0
    if armed:
        lim = current_limit_a * abs(kt)
        if not lim < torque_lim:            # min(torque_lim, lim)
            lim = torque_lim
        t_m = -lim if -lim > input_torque else input_torque      # max(input_torque, -lim)
        if lim < t_m:                       # min(., lim)
            t_m = lim
    if t_m != 0.0 and vel_limit_rev_s - vel_limit_rev_s == 0.0:
        v = _f32_saturate(K[K_SIGN] * qd[j] * K[K_GEAR] / (2.0 * math.pi))
        lo = (-vel_limit_rev_s - v) * vel_gain
        hi = (vel_limit_rev_s - v) * vel_gain
        if lo > t_m:
            t_m = lo
        if hi < t_m:
            t_m = hi
    return t_m, K[K_SIGN] * t_m * K[K_GEAR] * K[K_EFF]


#: rows of the per-axis state P (float64, (n_axes, P_SIZE)) of :func:`serve_frames`: the axis'
#: joint, encoder step [rad], armed (1.0: closed loop in torque control), motor torque limit
#: [N m], current limit [A], torque constant [N m/A], velocity limit [turn/s] (inf: off),
#: ``vel_gain`` [N m/(turn/s)], position offset [turn]
P_JOINT, P_QUANTUM, P_ARMED, P_TLIM, P_CLIM, P_KT, P_VLIM, P_VGAIN, P_POSOFF = range(9)
P_SIZE = 9

#: what a frame of :func:`serve_frames` is: a ``Set_Input_Torque`` data frame, or a request
#: (RTR) of ``Get_Encoder_Estimates``
KIND_TORQUE, KIND_ESTIMATES = 0, 1


@njit("i8(i8[::1], i8[::1], f8[::1], f8[:, ::1], f8[:, ::1], f8[::1], f8[::1], f8[:, ::1], f8[:, ::1], "
      "f4[:, ::1])", cache=True, error_model="numpy")
def serve_frames(kind, axis, val, KK, P, q, qd, cmd, res, est):
    """A run of frames served at one loop time: what ``OdriveEmulator._on`` does for each, in
    order, by one call (:func:`applied_torque` and :func:`encoder_estimates` of each frame).

    Nothing is written to the plant unless every frame is served as the Python path serves it: a
    joint torque that is not finite (``Plant.set_joint_command`` refuses it) or an estimate that
    cannot be encoded returns -1 with ``cmd`` untouched (the caller takes the Python path).

    Parameters
    ----------
    kind, axis : ndarray of int, shape (m,)
        Per frame: ``KIND_TORQUE`` or ``KIND_ESTIMATES``, and the axis (row of ``KK`` and ``P``).
    val : ndarray, shape (m,)
        Per frame: the input torque a ``Set_Input_Torque`` carries [N m] (unused for a request).
    KK : ndarray, shape (n_axes, K_SIZE)
        The axes' mapping constants (each row as :func:`applied_torque`'s ``K``).
    P : ndarray, shape (n_axes, P_SIZE)
        The axes' state (see the rows above).
    q, qd : ndarray, shape (n,)
        The plant's joint positions and velocities.
    cmd : ndarray, shape (5, n)
        The plant's held command (rows tau_ff, kp, kd, q_ref, qd_ref): column ``j`` of a torque
        frame's joint gets ``(tau_joint, 0, 0, 0, 0)`` (what ``set_joint_command`` writes).
    res : ndarray, shape (m, 2)
        Out: per torque frame, the applied motor torque [N m] and the joint torque.
    est : ndarray of float32, shape (m, 2)
        Out: per request, the payload (a view of an (m, 8) uint8 buffer on a little-endian machine).

    Returns
    -------
    int
        0, or -1 (nothing written to ``cmd``; ``res`` and ``est`` are not to be used).
    """
    m = kind.shape[0]
    for f in range(m):
        i = axis[f]
        j = np.int64(P[i, P_JOINT])
        if kind[f] == KIND_TORQUE:
            t_m, tau = applied_torque(KK[i], qd, j, P[i, P_ARMED] != 0.0, val[f], P[i, P_TLIM], P[i, P_CLIM],
                                      P[i, P_KT], P[i, P_VLIM], P[i, P_VGAIN])
            if not tau - tau == 0.0:
                return -1
            res[f, 0] = t_m
            res[f, 1] = tau
        elif not encoder_estimates(KK[i], q, qd, j, P[i, P_QUANTUM], P[i, P_POSOFF], est[f]):
            return -1
    for f in range(m):
        if kind[f] == KIND_TORQUE:
            j = np.int64(P[axis[f], P_JOINT])
            cmd[0, j] = res[f, 1]
            cmd[1, j] = 0.0
            cmd[2, j] = 0.0
            cmd[3, j] = 0.0
            cmd[4, j] = 0.0
    return 0


#: what a broadcast of :func:`broadcast_payloads` is: ``Get_Encoder_Estimates``, ``Get_Iq``,
#: ``Get_Torques``
KIND_BC_ESTIMATES, KIND_BC_IQ, KIND_BC_TORQUES = 0, 1, 2


@njit("i8(i8[::1], i8[::1], f8[:, ::1], f8[:, ::1], f8[::1], f8[::1], f8[::1], f8[::1], f4[:, ::1])",
      cache=True, error_model="numpy")
def broadcast_payloads(kind, axis, KK, P, setpoint, q, qd, tau_applied, out):
    """The payloads of a timed event's cyclic messages, by one call: what
    ``OdriveEmulator._answer`` makes of each (``Get_Encoder_Estimates``: :func:`encoder_estimates`;
    ``Get_Iq``: ``encode_iq(setpoint / kt, applied / kt)``; ``Get_Torques``:
    ``encode_torques(setpoint, applied)``, with ``applied = sign * tau_applied[j] / (gear *
    efficiency)`` the motor side of the joint's applied torque), the same operations in the same
    order, the same bytes.

    Parameters
    ----------
    kind, axis : ndarray of int, shape (m,)
        Per message: ``KIND_BC_*`` and the axis (row of ``KK`` and ``P``).
    KK, P : as for :func:`serve_frames`.
    setpoint : ndarray, shape (n_axes,)
        Each axis' applied motor torque set-point [N m] (``_Axis.setpoint_nm``).
    q, qd, tau_applied : ndarray, shape (n,)
        The plant's joint positions, velocities and applied torques.
    out : ndarray of float32, shape (m, 2)
        Out: the payloads (a view of an (m, 8) uint8 buffer on a little-endian machine).

    Returns
    -------
    int
        0, or -1 when a value cannot be encoded (not finite, or past float32's range: the codec
        raises; the caller takes the Python path).
    """
    m = kind.shape[0]
    for f in range(m):
        i = axis[f]
        j = np.int64(P[i, P_JOINT])
        if kind[f] == KIND_BC_ESTIMATES:
            if not encoder_estimates(KK[i], q, qd, j, P[i, P_QUANTUM], P[i, P_POSOFF], out[f]):
                return -1
            continue
        applied = KK[i, K_SIGN] * tau_applied[j] / (KK[i, K_GEAR] * KK[i, K_EFF])
        a = setpoint[i]
        b = applied
        if kind[f] == KIND_BC_IQ:
            kt = P[i, P_KT]
            a = a / kt
            b = b / kt
        if not (a - a == 0.0 and b - b == 0.0) or abs(a) > F32_MAX or abs(b) > F32_MAX:
            return -1
        out[f, 0] = np.float32(a)
        out[f, 1] = np.float32(b)
    return 0


_gate.release()
