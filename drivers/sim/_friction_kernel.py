"""Compiled kernel of the plant's implicit Coulomb-friction step (see ``plant._coulomb_implicit``)."""

from __future__ import annotations

import math

import numba
import numpy as np

from dynamics._kernel_cache import CompileGate, stamp_package_caches


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@numba.njit(cache=True, error_model="numpy")
def coulomb_pgs_into(M, v_star, impulse, rtol, max_iter, v):  # pragma: no cover - compiled
    """:func:`coulomb_pgs` into the caller's v (n,): M (n, n) mass matrix, v_star (n,) the
    velocity without friction, impulse (n,) the friction impulses [N m s] (h * coulomb)."""
    n = v_star.shape[0]
    stick = True
    for i in range(n):
        v[i] = 0.0
        p = 0.0
        for j in range(n):
            p += M[i, j] * v_star[j]
        if abs(p) > impulse[i]:
            stick = False
    if stick:
        return
    for i in range(n):
        v[i] = v_star[i]
    vmax = 0.0
    for i in range(n):
        if abs(v_star[i]) > vmax:
            vmax = abs(v_star[i])
    tol = rtol * vmax
    for _ in range(max_iter):
        delta = 0.0
        for i in range(n):
            r = 0.0
            for j in range(n):
                if j != i:
                    r += M[i, j] * (v[j] - v_star[j])
            b = M[i, i] * v_star[i] - r
            mag = abs(b) - impulse[i]
            if mag < 0.0:
                mag = 0.0
            vi = math.copysign(mag, b) / M[i, i]
            d = abs(vi - v[i])
            if d > delta:
                delta = d
            v[i] = vi
        if delta <= tol:
            break


@numba.njit("float64[:](float64[:, :], float64[:], float64[:], float64, int64)", cache=True,
            error_model="numpy")
def coulomb_pgs(M, v_star, impulse, rtol, max_iter):  # pragma: no cover - compiled
    """Projected Gauss-Seidel for argmin 1/2 (v-v*)^T M (v-v*) + sum impulse_i |v_i|.

    Same algorithm, order of updates and stopping rule as the Python reference
    ``plant._coulomb_implicit_py``.  Returns v (n,), a new array (:func:`coulomb_pgs_into`).
    """
    v = np.empty(v_star.shape[0])
    coulomb_pgs_into(M, v_star, impulse, rtol, max_iter, v)
    return v


_gate.release()
