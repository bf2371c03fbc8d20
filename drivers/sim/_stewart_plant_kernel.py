"""Compiled plant step of :class:`drivers.sim.plant.SimulatedPlant` for the Gough-Stewart platform.

:func:`stewart_advance` is the shared RK4 step (:func:`._plant_kernels._rk4_advance`) with the
Stewart model's own one-state kernels.  It lives apart from :mod:`._plant_kernels` so that a
plant of another robot does not load the Stewart kernels (about 0.3 s at import).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dynamics._kernel_cache import CompileGate, stamp_package_caches
from dynamics._stewart_kernels import FK_CACHE, FKO_WS, JFD_WS, MASS_WS, fk_ws, joint_fd_ws, mass_ws

from ._plant_kernels import _rk4_advance


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, error_model="numpy", _nrt=False)
def _stewart_qdd(P, q, qd, tau, visc, has_visc, X, wk, rhs, out):
    for i in range(6):
        rhs[i] = tau[i] - visc[i] * qd[i] if has_visc else tau[i]
    return joint_fd_ws(q, qd, rhs, X, P, out, wk[0], wk[1], True)


@njit(cache=True, error_model="numpy", _nrt=False)
def _stewart_mass(P, q, X, wk, M):
    return mass_ws(q, X, P, M, wk[0], wk[1], True)


@njit(cache=True, error_model="numpy", _nrt=False)
def _stewart_pose(P, q, X, wk, Xn):
    return fk_ws(q, X, P, 1e-12, 50, Xn, wk[0], wk[1], True)


@njit(cache=True, error_model="numpy")
def stewart_advance(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out):
    """:func:`rrr_advance` for the Gough-Stewart platform, with the model's own one-state
    kernels: ``joint_fd_one`` (forward dynamics, pose hint: the start-of-step pose),
    ``mass_one`` (the Coulomb step's mass matrix) and ``fk_one`` (the pose after the step,
    tolerance 1e-12 m, 50 iterations) -- what ``SimulatedPlant._step`` calls through the
    model's fast paths -- in their ``*_ws`` form (the same code in a work array).

    Parameters
    ----------
    P : packed Stewart parameters (``StewartPlatform._params``).
    q, qd, ta : (6,) leg lengths [m], rates [m/s], applied forces [N] at the start;
    X : (6,) platform pose (x, y, z [m], Euler angles [rad]).
    cmd, par, lag, flags, h, n_steps : as :func:`rrr_advance` (6 columns).
    out : (24,) q, qd, X, ta after the last completed step.

    Returns
    -------
    (status, steps) : a non-zero model status of the failing step (the Python step then
        runs it and raises or, where the kernel's conditioning bound is only conservative,
        completes it) and the number of completed steps.
    """
    return stewart_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out, np.empty(STEWART_WORK))


#: the model kernels' work in :func:`stewart_advance_ws`'s (one at a time: the stages' forward
#: dynamics, the Coulomb step's mass matrix, the pose after the step)
_MODEL_WS = max(JFD_WS, MASS_WS, FKO_WS)
_BUF = 36 + 17 * 6 + 6
_CACHE = _BUF + _MODEL_WS
#: size of :func:`stewart_advance_ws`'s work array [floats]: M (6, 6), the step's buffer, the
#: model kernels' work and the cache of the step's start pose
STEWART_WORK = _CACHE + FK_CACHE


@njit(cache=True, error_model="numpy", _nrt=False)
def stewart_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out, work):
    """:func:`stewart_advance` in the caller's work array ``work`` (:data:`STEWART_WORK`,),
    which it overwrites: the model's kernels in their ``*_ws`` form, which neither allocate nor
    count references (as the 3RRR's and a serial chain's step).  Every forward kinematics of a
    step (four stages, the mass matrix, the pose after it) starts at the step's start pose: its
    geometry and the LU factors of its Newton matrix are made once a step, in the work's cache
    (:func:`dynamics._stewart_kernels.fk_geom_cached`, the same numbers)."""
    M = work[0:36].reshape((6, 6))
    cache = work[_CACHE:STEWART_WORK]
    cache[0] = 0.0          # empty: the parameters P may differ from the last call's
    return _rk4_advance(_stewart_qdd, _stewart_mass, _stewart_pose, P, q, qd, X, ta, cmd, par, lag, flags, h,
                        n_steps, out, (work[_BUF:_CACHE], cache), M, work[36:_BUF])


_gate.release()
