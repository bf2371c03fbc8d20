"""Serial-chain rigid-body dynamics: the compiled cores and the packed model (private).

The cores here are compiled when first called (``cache=True``, no signatures), so
importing this module compiles nothing: the plant and the control laws
(``drivers.sim._plant_kernels``, ``controller._law_kernels``) import it on every
robot's path.  The entry points with explicit signatures that ``dynamics.serial``
calls from Python are in :mod:`dynamics._serial_kernels`, which numba compiles as it
is imported, so only a serial model imports it.

All kernels read the model from one packed float64 parameter vector ``P``
(built by :func:`pack`), so that a call from Python passes as few arrays as
possible (the numba dispatch cost grows with the number of arguments).

Frames
------
The chain is described in *joint frames*: joint ``i`` (0-based here) moves its
frame ``J_i`` relative to the parent frame ``J_{i-1}`` (``J_{-1}`` is the
world/base frame) as

    T_{J_{i-1}, J_i}(q_i) = X_i . Motion_i(q_i)

where ``X_i = (R_i, p_i)`` is a fixed placement and ``Motion_i`` is a rotation
``Rz(q_i)`` (revolute) or a translation ``Tz(q_i)`` (prismatic) about/along the
local z axis.  Link ``i``'s inertia is expressed in ``J_i``: mass ``m``, first
moment ``h = m c`` (``c`` the centre of mass) and the rotational inertia
``Io`` about the origin of ``J_i``.  The tool frame is a fixed transform of the
last joint frame.  Gravity ``g`` is given in the world frame.

Packed layout of ``P`` (float64)::

    P[0]          n
    P[1:4]        gravity g, world frame [m/s^2]
    P[4:13]       tool rotation R_{J_n,tool}, row-major
    P[13:16]      tool origin in J_n [m]
    then per joint i, a block of JB = 27 values at HDR + JB*i:
      +0..8   R_i placement rotation (row-major)
      +9..11  p_i placement translation [m]
      +12     joint type (0 revolute, 1 prismatic)
      +13     mass m [kg]
      +14..16 h = m c [kg m], J_i frame
      +17..25 Io inertia about the J_i origin, J_i axes, row-major [kg m^2]
      +26     armature (reflected rotor inertia) [kg m^2 or kg]

The cores do not check their input (the entry points check lengths and
finiteness); ``_fd_core`` returns False when the mass matrix is not positive
definite.  Spatial
vectors in :func:`_coriolis_core` are Featherstone Plücker coordinates
``(angular; linear)`` about the world origin.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from ._kernel_cache import CompileGate, stamp_package_caches

HDR = 16
JB = 27
#: columns of the per-link work array: 0-8 rotation, 9-11 translation of J_i in
#: J_{i-1}; 12-17 RNEA force/moment; 18-30 CRBA composite inertia (m, h, I)
NW = 31
#: most joints the one-state entry points of :mod:`dynamics._serial_kernels` take with their
#: scratch on the stack (:func:`stack_rows`: (n, NW) and (n, n) floats, 48 kB at 64 joints,
#: within any thread's stack); a longer chain's model falls back to the validated, allocating
#: path when the entry point declines, about 4 us more a call (measured with the bound at 32:
#: 5.97 against 2.13 us at 33 joints)
STACK_JOINTS = 64

__all__ = ["HDR", "JB", "NW", "pack"]


def pack(gravity, tool_R, tool_p, R, p, jtype, mass, h, Io, armature) -> np.ndarray:
    """Build the packed parameter vector (see module docstring for the layout).

    Parameters
    ----------
    gravity : (3,) ; tool_R : (3, 3) ; tool_p : (3,)
    R : (n, 3, 3) ; p : (n, 3) ; jtype : (n,) ints (0 revolute, 1 prismatic)
    mass : (n,) ; h : (n, 3) ; Io : (n, 3, 3) ; armature : (n,)
    """
    n = len(jtype)
    P = np.zeros(HDR + JB * n)
    P[0] = n
    P[1:4] = gravity
    P[4:13] = np.asarray(tool_R, dtype=float).reshape(9)
    P[13:16] = tool_p
    for i in range(n):
        o = HDR + JB * i
        P[o:o + 9] = np.asarray(R[i], dtype=float).reshape(9)
        P[o + 9:o + 12] = p[i]
        P[o + 12] = float(jtype[i])
        P[o + 13] = mass[i]
        P[o + 14:o + 17] = h[i]
        P[o + 17:o + 26] = np.asarray(Io[i], dtype=float).reshape(9)
        P[o + 26] = armature[i]
    P.setflags(write=False)
    return P


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@intrinsic
def stack_rows(typingctx, rows, cols):
    """A (rows, cols) float64 C-contiguous scratch array on the stack frame of the kernel that
    calls it (uninitialised, valid until that kernel returns; no memory manager involved).

    For kernels compiled without numba's reference counting (``_nrt=False``), which cannot
    allocate: a one-state entry point called from Python then pays neither an allocation nor
    the reference counting of its array arguments (0.15-0.2 us of a 0.8 us call).  The caller
    bounds the size (:data:`STACK_JOINTS`)."""
    if not (isinstance(rows, types.Integer) and isinstance(cols, types.Integer)):
        return None
    aryty = types.Array(types.float64, 2, "C")

    def codegen(context, builder, sig, args):
        intp = context.get_value_type(types.intp)
        r = context.cast(builder, args[0], sig.args[0], types.intp)
        c = context.cast(builder, args[1], sig.args[1], types.intp)
        data = builder.alloca(ir.DoubleType(), size=builder.mul(r, c))
        ary = context.make_array(aryty)(context, builder)
        itemsize = ir.Constant(intp, 8)
        populate_array(ary, data=data, shape=cgutils.pack_array(builder, [r, c]),
                       strides=cgutils.pack_array(builder, [builder.mul(c, itemsize), itemsize]),
                       itemsize=itemsize, meminfo=None)
        return ary._getvalue()

    return aryty(rows, cols), codegen


@njit(cache=True, error_model="numpy")
def _finite1(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * 0.0
    return s == 0.0


@njit(cache=True, error_model="numpy")
def _finite2(X):
    s = 0.0
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            s += X[i, j] * 0.0
    return s == 0.0


@njit(inline="always", error_model="numpy")
def _rot_compose(W0, W1, W2, W3, W4, W5, W6, W7, W8, R0, R1, R2, R3, R4, R5, R6, R7, R8):
    """The row-major 3x3 product ``W R``: a child frame's world rotation from its parent's ``W``
    and the link's rotation ``R`` (9 floats each, returned as a 9-tuple)."""
    return (W0 * R0 + W1 * R3 + W2 * R6, W0 * R1 + W1 * R4 + W2 * R7, W0 * R2 + W1 * R5 + W2 * R8,
            W3 * R0 + W4 * R3 + W5 * R6, W3 * R1 + W4 * R4 + W5 * R7, W3 * R2 + W4 * R5 + W5 * R8,
            W6 * R0 + W7 * R3 + W8 * R6, W6 * R1 + W7 * R4 + W8 * R7, W6 * R2 + W7 * R5 + W8 * R8)


@njit(cache=True, error_model="numpy")
def _links(P, q, Rl):
    """Fill Rl[:, 0:12] (rotation row-major, translation): pose of J_i in J_{i-1} at q."""
    n = int(P[0])
    for i in range(n):
        o = HDR + JB * i
        qi = q[i]
        if P[o + 12] == 0.0:
            c = math.cos(qi)
            s = math.sin(qi)
            for r in range(3):
                a0 = P[o + 3 * r]
                a1 = P[o + 3 * r + 1]
                Rl[i, 3 * r] = a0 * c + a1 * s
                Rl[i, 3 * r + 1] = -a0 * s + a1 * c
                Rl[i, 3 * r + 2] = P[o + 3 * r + 2]
                Rl[i, 9 + r] = P[o + 9 + r]
        else:
            for r in range(3):
                Rl[i, 3 * r] = P[o + 3 * r]
                Rl[i, 3 * r + 1] = P[o + 3 * r + 1]
                Rl[i, 3 * r + 2] = P[o + 3 * r + 2]
                Rl[i, 9 + r] = P[o + 9 + r] + P[o + 3 * r + 2] * qi


# ---------------------------------------------------------------------------
# recursive Newton-Euler
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _rnea_core(P, q, qd, qdd, use_qdd, grav, wrench, use_wrench, out, Rl):
    """tau = M qdd + C qd + g - J^T wrench into ``out`` (armature included).

    ``grav`` scales gravity (1 or 0); ``use_qdd``=False treats qdd as zero.
    Work array: Rl (n, NW).
    """
    n = int(P[0])
    _links(P, q, Rl)
    wx = 0.0
    wy = 0.0
    wz = 0.0
    dx = 0.0
    dy = 0.0
    dz = 0.0
    ax = -grav * P[1]
    ay = -grav * P[2]
    az = -grav * P[3]
    # world rotation of the current frame (only needed for a wrench)
    W0 = 1.0; W1 = 0.0; W2 = 0.0
    W3 = 0.0; W4 = 1.0; W5 = 0.0
    W6 = 0.0; W7 = 0.0; W8 = 1.0
    for i in range(n):
        o = HDR + JB * i
        R0 = Rl[i, 0]; R1 = Rl[i, 1]; R2 = Rl[i, 2]
        R3 = Rl[i, 3]; R4 = Rl[i, 4]; R5 = Rl[i, 5]
        R6 = Rl[i, 6]; R7 = Rl[i, 7]; R8 = Rl[i, 8]
        px = Rl[i, 9]; py = Rl[i, 10]; pz = Rl[i, 11]
        # a_prev + wd x p + w x (w x p)   (parent frame)
        cx = wy * pz - wz * py
        cy = wz * px - wx * pz
        cz = wx * py - wy * px
        tx = ax + dy * pz - dz * py + wy * cz - wz * cy
        ty = ay + dz * px - dx * pz + wz * cx - wx * cz
        tz = az + dx * py - dy * px + wx * cy - wy * cx
        # rotate into the child frame: v_child = R^T v_parent
        ax = R0 * tx + R3 * ty + R6 * tz
        ay = R1 * tx + R4 * ty + R7 * tz
        az = R2 * tx + R5 * ty + R8 * tz
        nwx = R0 * wx + R3 * wy + R6 * wz
        nwy = R1 * wx + R4 * wy + R7 * wz
        nwz = R2 * wx + R5 * wy + R8 * wz
        ndx = R0 * dx + R3 * dy + R6 * dz
        ndy = R1 * dx + R4 * dy + R7 * dz
        ndz = R2 * dx + R5 * dy + R8 * dz
        qdi = qd[i]
        qddi = qdd[i] if use_qdd else 0.0
        if P[o + 12] == 0.0:
            # revolute about z: wd += w x (qd z) + qdd z ; w += qd z
            ndx += nwy * qdi
            ndy -= nwx * qdi
            ndz += qddi
            nwz += qdi
        else:
            # prismatic along z: a += 2 w x (qd z) + qdd z
            ax += 2.0 * nwy * qdi
            ay -= 2.0 * nwx * qdi
            az += qddi
        wx = nwx; wy = nwy; wz = nwz
        dx = ndx; dy = ndy; dz = ndz
        if use_wrench:
            W0, W1, W2, W3, W4, W5, W6, W7, W8 = _rot_compose(W0, W1, W2, W3, W4, W5, W6, W7, W8,
                                                              R0, R1, R2, R3, R4, R5, R6, R7, R8)
        m = P[o + 13]
        hx = P[o + 14]; hy = P[o + 15]; hz = P[o + 16]
        I0 = P[o + 17]; I1 = P[o + 18]; I2 = P[o + 19]
        I3 = P[o + 20]; I4 = P[o + 21]; I5 = P[o + 22]
        I6 = P[o + 23]; I7 = P[o + 24]; I8 = P[o + 25]
        # f = m a + wd x h + w x (w x h)
        ux = wy * hz - wz * hy
        uy = wz * hx - wx * hz
        uz = wx * hy - wy * hx
        Rl[i, 15] = m * ax + dy * hz - dz * hy + wy * uz - wz * uy
        Rl[i, 16] = m * ay + dz * hx - dx * hz + wz * ux - wx * uz
        Rl[i, 17] = m * az + dx * hy - dy * hx + wx * uy - wy * ux
        # n = Io wd + w x (Io w) + h x a
        lx = I0 * wx + I1 * wy + I2 * wz
        ly = I3 * wx + I4 * wy + I5 * wz
        lz = I6 * wx + I7 * wy + I8 * wz
        Rl[i, 12] = I0 * dx + I1 * dy + I2 * dz + wy * lz - wz * ly + hy * az - hz * ay
        Rl[i, 13] = I3 * dx + I4 * dy + I5 * dz + wz * lx - wx * lz + hz * ax - hx * az
        Rl[i, 14] = I6 * dx + I7 * dy + I8 * dz + wx * ly - wy * lx + hx * ay - hy * ax
    if use_wrench:
        # environment wrench on the tool, world frame, moment about the tool origin
        fx = W0 * wrench[0] + W3 * wrench[1] + W6 * wrench[2]
        fy = W1 * wrench[0] + W4 * wrench[1] + W7 * wrench[2]
        fz = W2 * wrench[0] + W5 * wrench[1] + W8 * wrench[2]
        mx = W0 * wrench[3] + W3 * wrench[4] + W6 * wrench[5]
        my = W1 * wrench[3] + W4 * wrench[4] + W7 * wrench[5]
        mz = W2 * wrench[3] + W5 * wrench[4] + W8 * wrench[5]
        tpx = P[13]; tpy = P[14]; tpz = P[15]
        k = n - 1
        Rl[k, 15] -= fx
        Rl[k, 16] -= fy
        Rl[k, 17] -= fz
        Rl[k, 12] -= mx + tpy * fz - tpz * fy
        Rl[k, 13] -= my + tpz * fx - tpx * fz
        Rl[k, 14] -= mz + tpx * fy - tpy * fx
    for i in range(n - 1, -1, -1):
        o = HDR + JB * i
        arm = P[o + 26] * (qdd[i] if use_qdd else 0.0)
        if P[o + 12] == 0.0:
            out[i] = Rl[i, 14] + arm
        else:
            out[i] = Rl[i, 17] + arm
        if i > 0:
            R0 = Rl[i, 0]; R1 = Rl[i, 1]; R2 = Rl[i, 2]
            R3 = Rl[i, 3]; R4 = Rl[i, 4]; R5 = Rl[i, 5]
            R6 = Rl[i, 6]; R7 = Rl[i, 7]; R8 = Rl[i, 8]
            px = Rl[i, 9]; py = Rl[i, 10]; pz = Rl[i, 11]
            fx = R0 * Rl[i, 15] + R1 * Rl[i, 16] + R2 * Rl[i, 17]
            fy = R3 * Rl[i, 15] + R4 * Rl[i, 16] + R5 * Rl[i, 17]
            fz = R6 * Rl[i, 15] + R7 * Rl[i, 16] + R8 * Rl[i, 17]
            nx = R0 * Rl[i, 12] + R1 * Rl[i, 13] + R2 * Rl[i, 14]
            ny = R3 * Rl[i, 12] + R4 * Rl[i, 13] + R5 * Rl[i, 14]
            nz = R6 * Rl[i, 12] + R7 * Rl[i, 13] + R8 * Rl[i, 14]
            Rl[i - 1, 15] += fx
            Rl[i - 1, 16] += fy
            Rl[i - 1, 17] += fz
            Rl[i - 1, 12] += nx + py * fz - pz * fy
            Rl[i - 1, 13] += ny + pz * fx - px * fz
            Rl[i - 1, 14] += nz + px * fy - py * fx


# ---------------------------------------------------------------------------
# composite rigid body algorithm
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _crba_core(P, q, M, Rl):
    """Mass matrix into M (n, n), armature on the diagonal.  Rl (n, NW) work."""
    n = int(P[0])
    _links(P, q, Rl)
    for i in range(n):
        o = HDR + JB * i
        Rl[i, 18] = P[o + 13]
        for k in range(3):
            Rl[i, 18 + 1 + k] = P[o + 14 + k]
        for k in range(9):
            Rl[i, 18 + 4 + k] = P[o + 17 + k]
    for i in range(n - 1, -1, -1):
        o = HDR + JB * i
        mc = Rl[i, 18]
        hx = Rl[i, 19]; hy = Rl[i, 20]; hz = Rl[i, 21]
        # momentum of the composite body for unit joint-i speed, frame J_i
        if P[o + 12] == 0.0:
            nx = Rl[i, 24]; ny = Rl[i, 27]; nz = Rl[i, 30]
            fx = -hy; fy = hx; fz = 0.0
            M[i, i] = nz + P[o + 26]
        else:
            nx = hy; ny = -hx; nz = 0.0
            fx = 0.0; fy = 0.0; fz = mc
            M[i, i] = fz + P[o + 26]
        j = i
        while j > 0:
            R0 = Rl[j, 0]; R1 = Rl[j, 1]; R2 = Rl[j, 2]
            R3 = Rl[j, 3]; R4 = Rl[j, 4]; R5 = Rl[j, 5]
            R6 = Rl[j, 6]; R7 = Rl[j, 7]; R8 = Rl[j, 8]
            px = Rl[j, 9]; py = Rl[j, 10]; pz = Rl[j, 11]
            gx = R0 * fx + R1 * fy + R2 * fz
            gy = R3 * fx + R4 * fy + R5 * fz
            gz = R6 * fx + R7 * fy + R8 * fz
            mx = R0 * nx + R1 * ny + R2 * nz + py * gz - pz * gy
            my = R3 * nx + R4 * ny + R5 * nz + pz * gx - px * gz
            mz = R6 * nx + R7 * ny + R8 * nz + px * gy - py * gx
            fx = gx; fy = gy; fz = gz
            nx = mx; ny = my; nz = mz
            j -= 1
            if P[HDR + JB * j + 12] == 0.0:
                M[i, j] = nz
            else:
                M[i, j] = fz
            M[j, i] = M[i, j]
        if i > 0:
            # add the composite of i (frame J_i) to the parent's (frame J_{i-1})
            R0 = Rl[i, 0]; R1 = Rl[i, 1]; R2 = Rl[i, 2]
            R3 = Rl[i, 3]; R4 = Rl[i, 4]; R5 = Rl[i, 5]
            R6 = Rl[i, 6]; R7 = Rl[i, 7]; R8 = Rl[i, 8]
            px = Rl[i, 9]; py = Rl[i, 10]; pz = Rl[i, 11]
            # r = R h
            rx = R0 * hx + R1 * hy + R2 * hz
            ry = R3 * hx + R4 * hy + R5 * hz
            rz = R6 * hx + R7 * hy + R8 * hz
            # A = R I R^T
            I0 = Rl[i, 22]; I1 = Rl[i, 23]; I2 = Rl[i, 24]
            I3 = Rl[i, 25]; I4 = Rl[i, 26]; I5 = Rl[i, 27]
            I6 = Rl[i, 28]; I7 = Rl[i, 29]; I8 = Rl[i, 30]
            B0 = R0 * I0 + R1 * I3 + R2 * I6
            B1 = R0 * I1 + R1 * I4 + R2 * I7
            B2 = R0 * I2 + R1 * I5 + R2 * I8
            B3 = R3 * I0 + R4 * I3 + R5 * I6
            B4 = R3 * I1 + R4 * I4 + R5 * I7
            B5 = R3 * I2 + R4 * I5 + R5 * I8
            B6 = R6 * I0 + R7 * I3 + R8 * I6
            B7 = R6 * I1 + R7 * I4 + R8 * I7
            B8 = R6 * I2 + R7 * I5 + R8 * I8
            A0 = B0 * R0 + B1 * R1 + B2 * R2
            A1 = B0 * R3 + B1 * R4 + B2 * R5
            A2 = B0 * R6 + B1 * R7 + B2 * R8
            A4 = B3 * R3 + B4 * R4 + B5 * R5
            A5 = B3 * R6 + B4 * R7 + B5 * R8
            A8 = B6 * R6 + B7 * R7 + B8 * R8
            # I' = A - m [p]x[p]x - [p]x[r]x - [r]x[p]x ;  [a]x[b]x = b a^T - (a.b) 1
            pp = px * px + py * py + pz * pz
            pr = px * rx + py * ry + pz * rz
            k = i - 1
            Rl[k, 18] += mc
            Rl[k, 19] += mc * px + rx
            Rl[k, 20] += mc * py + ry
            Rl[k, 21] += mc * pz + rz
            Rl[k, 22] += A0 + mc * (pp - px * px) + 2.0 * (pr - px * rx)
            Rl[k, 26] += A4 + mc * (pp - py * py) + 2.0 * (pr - py * ry)
            Rl[k, 30] += A8 + mc * (pp - pz * pz) + 2.0 * (pr - pz * rz)
            e01 = A1 - mc * px * py - (px * ry + rx * py)
            e02 = A2 - mc * px * pz - (px * rz + rx * pz)
            e12 = A5 - mc * py * pz - (py * rz + ry * pz)
            Rl[k, 23] += e01
            Rl[k, 25] += e01
            Rl[k, 24] += e02
            Rl[k, 28] += e02
            Rl[k, 27] += e12
            Rl[k, 29] += e12


# ---------------------------------------------------------------------------
# forward dynamics: CRBA + RNEA bias + Cholesky
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _fd_core(P, q, qd, tau, wrench, use_wrench, out, M, Rl):
    """qdd = M^-1 (tau - h + J^T w) into out; returns False if M is not PD."""
    n = int(P[0])
    _rnea_core(P, q, qd, tau, False, 1.0, wrench, use_wrench, out, Rl)
    for i in range(n):
        out[i] = tau[i] - out[i]
    _crba_core(P, q, M, Rl)
    # in-place Cholesky M = L L^T (lower triangle)
    for j in range(n):
        s = M[j, j]
        for k in range(j):
            s -= M[j, k] * M[j, k]
        if not (s > 0.0):
            return False
        d = math.sqrt(s)
        M[j, j] = d
        for i in range(j + 1, n):
            t = M[i, j]
            for k in range(j):
                t -= M[i, k] * M[j, k]
            M[i, j] = t / d
    for i in range(n):
        t = out[i]
        for k in range(i):
            t -= M[i, k] * out[k]
        out[i] = t / M[i, i]
    for i in range(n - 1, -1, -1):
        t = out[i]
        for k in range(i + 1, n):
            t -= M[k, i] * out[k]
        out[i] = t / M[i, i]
    return True


# ---------------------------------------------------------------------------
# kinematics
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _poses_core(P, q, T, Rl):
    """World poses of the joint frames J_0..J_{n-1} and the tool: T (n+1, 4, 4)."""
    n = int(P[0])
    _links(P, q, Rl)
    W0 = 1.0; W1 = 0.0; W2 = 0.0
    W3 = 0.0; W4 = 1.0; W5 = 0.0
    W6 = 0.0; W7 = 0.0; W8 = 1.0
    wx = 0.0; wy = 0.0; wz = 0.0
    for i in range(n + 1):
        if i < n:
            R0 = Rl[i, 0]; R1 = Rl[i, 1]; R2 = Rl[i, 2]
            R3 = Rl[i, 3]; R4 = Rl[i, 4]; R5 = Rl[i, 5]
            R6 = Rl[i, 6]; R7 = Rl[i, 7]; R8 = Rl[i, 8]
            px = Rl[i, 9]; py = Rl[i, 10]; pz = Rl[i, 11]
        else:
            R0 = P[4]; R1 = P[5]; R2 = P[6]
            R3 = P[7]; R4 = P[8]; R5 = P[9]
            R6 = P[10]; R7 = P[11]; R8 = P[12]
            px = P[13]; py = P[14]; pz = P[15]
        nx = wx + W0 * px + W1 * py + W2 * pz
        ny = wy + W3 * px + W4 * py + W5 * pz
        nz = wz + W6 * px + W7 * py + W8 * pz
        wx = nx; wy = ny; wz = nz
        W0, W1, W2, W3, W4, W5, W6, W7, W8 = _rot_compose(W0, W1, W2, W3, W4, W5, W6, W7, W8,
                                                          R0, R1, R2, R3, R4, R5, R6, R7, R8)
        T[i, 0, 0] = W0; T[i, 0, 1] = W1; T[i, 0, 2] = W2; T[i, 0, 3] = wx
        T[i, 1, 0] = W3; T[i, 1, 1] = W4; T[i, 1, 2] = W5; T[i, 1, 3] = wy
        T[i, 2, 0] = W6; T[i, 2, 1] = W7; T[i, 2, 2] = W8; T[i, 2, 3] = wz
        T[i, 3, 0] = 0.0; T[i, 3, 1] = 0.0; T[i, 3, 2] = 0.0; T[i, 3, 3] = 1.0


@njit(cache=True, error_model="numpy")
def _jac_core(P, T, J):
    """Geometric Jacobian of the tool frame (6, n) from the poses T (n+1, 4, 4)."""
    n = int(P[0])
    ex = T[n, 0, 3]
    ey = T[n, 1, 3]
    ez = T[n, 2, 3]
    for i in range(n):
        zx = T[i, 0, 2]
        zy = T[i, 1, 2]
        zz = T[i, 2, 2]
        if P[HDR + JB * i + 12] == 0.0:
            rx = ex - T[i, 0, 3]
            ry = ey - T[i, 1, 3]
            rz = ez - T[i, 2, 3]
            J[0, i] = zy * rz - zz * ry
            J[1, i] = zz * rx - zx * rz
            J[2, i] = zx * ry - zy * rx
            J[3, i] = zx
            J[4, i] = zy
            J[5, i] = zz
        else:
            J[0, i] = zx
            J[1, i] = zy
            J[2, i] = zz
            J[3, i] = 0.0
            J[4, i] = 0.0
            J[5, i] = 0.0


# ---------------------------------------------------------------------------
# energies
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _energy_core(P, q, qd, T, Rl):
    """(kinetic, potential) at one state; T is (n+1, 4, 4) work."""
    n = int(P[0])
    _poses_core(P, q, T, Rl)
    # kinetic: body-frame velocity recursion
    wx = 0.0; wy = 0.0; wz = 0.0
    vx = 0.0; vy = 0.0; vz = 0.0
    ke = 0.0
    pe = 0.0
    for i in range(n):
        o = HDR + JB * i
        R0 = Rl[i, 0]; R1 = Rl[i, 1]; R2 = Rl[i, 2]
        R3 = Rl[i, 3]; R4 = Rl[i, 4]; R5 = Rl[i, 5]
        R6 = Rl[i, 6]; R7 = Rl[i, 7]; R8 = Rl[i, 8]
        px = Rl[i, 9]; py = Rl[i, 10]; pz = Rl[i, 11]
        # v_child_origin = R^T (v + w x p)
        tx = vx + wy * pz - wz * py
        ty = vy + wz * px - wx * pz
        tz = vz + wx * py - wy * px
        vx = R0 * tx + R3 * ty + R6 * tz
        vy = R1 * tx + R4 * ty + R7 * tz
        vz = R2 * tx + R5 * ty + R8 * tz
        nwx = R0 * wx + R3 * wy + R6 * wz
        nwy = R1 * wx + R4 * wy + R7 * wz
        nwz = R2 * wx + R5 * wy + R8 * wz
        wx = nwx; wy = nwy; wz = nwz
        if P[o + 12] == 0.0:
            wz += qd[i]
        else:
            vz += qd[i]
        m = P[o + 13]
        hx = P[o + 14]; hy = P[o + 15]; hz = P[o + 16]
        lx = P[o + 17] * wx + P[o + 18] * wy + P[o + 19] * wz
        ly = P[o + 20] * wx + P[o + 21] * wy + P[o + 22] * wz
        lz = P[o + 23] * wx + P[o + 24] * wy + P[o + 25] * wz
        # 1/2 m v.v + v.(w x h) + 1/2 w.Io w
        ke += 0.5 * m * (vx * vx + vy * vy + vz * vz)
        ke += vx * (wy * hz - wz * hy) + vy * (wz * hx - wx * hz) + vz * (wx * hy - wy * hx)
        ke += 0.5 * (wx * lx + wy * ly + wz * lz)
        ke += 0.5 * P[o + 26] * qd[i] * qd[i]
        # potential: -g . (m p_w + R_w h)
        for r in range(3):
            hw = m * T[i, r, 3] + T[i, r, 0] * hx + T[i, r, 1] * hy + T[i, r, 2] * hz
            pe -= P[1 + r] * hw
    return ke, pe


# ---------------------------------------------------------------------------
# Coriolis matrix (spatial, world frame)
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _crm(v, m, out):
    """out = v x m (spatial motion cross product), Plücker (ang; lin)."""
    out[0] = v[1] * m[2] - v[2] * m[1]
    out[1] = v[2] * m[0] - v[0] * m[2]
    out[2] = v[0] * m[1] - v[1] * m[0]
    out[3] = v[1] * m[5] - v[2] * m[4] + v[4] * m[2] - v[5] * m[1]
    out[4] = v[2] * m[3] - v[0] * m[5] + v[5] * m[0] - v[3] * m[2]
    out[5] = v[0] * m[4] - v[1] * m[3] + v[3] * m[1] - v[4] * m[0]


@njit(cache=True, error_model="numpy")
def _crf(v, f, out):
    """out = v x* f (spatial force cross product)."""
    out[0] = v[1] * f[2] - v[2] * f[1] + v[4] * f[5] - v[5] * f[4]
    out[1] = v[2] * f[0] - v[0] * f[2] + v[5] * f[3] - v[3] * f[5]
    out[2] = v[0] * f[1] - v[1] * f[0] + v[3] * f[4] - v[4] * f[3]
    out[3] = v[1] * f[5] - v[2] * f[4]
    out[4] = v[2] * f[3] - v[0] * f[5]
    out[5] = v[0] * f[4] - v[1] * f[3]


@njit(cache=True, error_model="numpy")
def _coriolis_core(P, q, qd, Cm, T, Rl, S, Sd, V, Isp, IS, t6, u6, w6, Iv):
    """C(q, qd) into Cm (n, n): C = sum_i J_i^T (I_i dJ_i + B(I_i, v_i) J_i).

    ``B(I, v) = 1/2 [(v x*) I + (I v) xbar - I (v x)]`` (Echeandia & Wensing),
    where ``(f xbar) u = u x* f``; then ``B + B^T = dI/dt`` so dM/dt - 2C is
    skew-symmetric, and ``B v = v x* I v`` so ``C qd`` is the velocity part of
    the bias.  Spatial world-frame quantities (Featherstone).
    Work: S, Sd, V (n, 6); Isp (6, 6); IS (n, 6); t6, u6, w6, Iv (6,).
    """
    n = int(P[0])
    _poses_core(P, q, T, Rl)
    for i in range(n):
        o = HDR + JB * i
        zx = T[i, 0, 2]; zy = T[i, 1, 2]; zz = T[i, 2, 2]
        ox = T[i, 0, 3]; oy = T[i, 1, 3]; oz = T[i, 2, 3]
        if P[o + 12] == 0.0:
            S[i, 0] = zx; S[i, 1] = zy; S[i, 2] = zz
            S[i, 3] = oy * zz - oz * zy
            S[i, 4] = oz * zx - ox * zz
            S[i, 5] = ox * zy - oy * zx
        else:
            S[i, 0] = 0.0; S[i, 1] = 0.0; S[i, 2] = 0.0
            S[i, 3] = zx; S[i, 4] = zy; S[i, 5] = zz
        for r in range(6):
            V[i, r] = (V[i - 1, r] if i > 0 else 0.0) + S[i, r] * qd[i]
        _crm(V[i], S[i], Sd[i])
    for a in range(n):
        for b in range(n):
            Cm[a, b] = 0.0
    for i in range(n):
        o = HDR + JB * i
        m = P[o + 13]
        # world first moment hw = m p + R h and inertia about the world origin
        hb0 = P[o + 14]; hb1 = P[o + 15]; hb2 = P[o + 16]
        px = T[i, 0, 3]; py = T[i, 1, 3]; pz = T[i, 2, 3]
        rx = T[i, 0, 0] * hb0 + T[i, 0, 1] * hb1 + T[i, 0, 2] * hb2
        ry = T[i, 1, 0] * hb0 + T[i, 1, 1] * hb1 + T[i, 1, 2] * hb2
        rz = T[i, 2, 0] * hb0 + T[i, 2, 1] * hb1 + T[i, 2, 2] * hb2
        for r in range(3):
            for c in range(3):
                s = 0.0
                for k in range(3):
                    for l in range(3):
                        s += T[i, r, k] * P[o + 17 + 3 * k + l] * T[i, c, l]
                Isp[r, c] = s
        pp = px * px + py * py + pz * pz
        pr = px * rx + py * ry + pz * rz
        pv = (px, py, pz)
        rv = (rx, ry, rz)
        for r in range(3):
            for c in range(3):
                d = pp if r == c else 0.0
                e = pr if r == c else 0.0
                Isp[r, c] += m * (d - pv[r] * pv[c]) + 2.0 * e - pv[r] * rv[c] - rv[r] * pv[c]
        hx = m * px + rx; hy = m * py + ry; hz = m * pz + rz
        # [[I_O, [h]x], [[h]x^T, m 1]]
        Isp[0, 3] = 0.0; Isp[0, 4] = -hz; Isp[0, 5] = hy
        Isp[1, 3] = hz; Isp[1, 4] = 0.0; Isp[1, 5] = -hx
        Isp[2, 3] = -hy; Isp[2, 4] = hx; Isp[2, 5] = 0.0
        for r in range(3):
            for c in range(3):
                Isp[3 + c, r] = Isp[r, 3 + c]
                Isp[3 + r, 3 + c] = m if r == c else 0.0
        # I v_i
        for r in range(6):
            s = 0.0
            for c in range(6):
                s += Isp[r, c] * V[i, c]
            Iv[r] = s
        # columns k <= i:  I Sd_k + B(I, v_i) S_k with
        # B(I, v) S = 1/2 [v x* (I S) + S x* (I v) - I (v x S)]
        for k in range(i + 1):
            for r in range(6):
                s = 0.0
                for c in range(6):
                    s += Isp[r, c] * S[k, c]
                t6[r] = s
            _crf(V[i], t6, u6)
            _crf(S[k], Iv, w6)
            _crm(V[i], S[k], t6)
            for r in range(6):
                s = 0.0
                for c in range(6):
                    s += Isp[r, c] * (Sd[k, c] - 0.5 * t6[c])
                IS[k, r] = s + 0.5 * (u6[r] + w6[r])
            for j in range(i + 1):
                s = 0.0
                for r in range(6):
                    s += S[j, r] * IS[k, r]
                Cm[j, k] += s


_gate.release()
