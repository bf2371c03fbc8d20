"""Symbolic derivation of a mechanism's equations with :mod:`sympy.physics.mechanics`, and
the generated code (common subexpressions eliminated), cached on disk by digest.

The tree of joints gives the coordinates ``q`` (n, one per joint) and the frames of the bodies
(:class:`sympy.physics.mechanics.ReferenceFrame` chained with ``orientnew`` about each joint
axis, points chained with ``locatenew``, each point's velocity from its parent's by the
two-point / one-point theorems, so no position vector is differentiated whole).  The open
tree's equations come from :class:`sympy.physics.mechanics.KanesMethod` (generalised speeds
``u = qd``; bodies :class:`~sympy.physics.mechanics.RigidBody` with the inertia about the centre
of mass, gravity as loads at the centres of mass; bodies without mass and inertia left out)::

    M(q) qdd = f(q, qd)                b(q, qd) = -f(q, qd)

and the loop closures ``phi(q) = 0`` (m holonomic constraints) add the multipliers ``lam``
(m,) as in Lagrange's equations of the first kind::

    M(q) qdd + b(q, qd) + phi_q(q)^T lam = tau_q          (n,)

(``tau_q``: generalised forces of the drives, on the actuated coordinates; ``Lc = phi_q^T``).
The closures are not eliminated symbolically: the runtime does that numerically
(:mod:`dynamics._mechanism_runtime`).  (Lagrange's method on the closed chain, the first
form, took 419 s for the delta robot's 12 coordinates, 283 s of it in ``LagrangesMethod``;
Kane's on the tree 14 s, the whole derivation 25 s.)  The masses, centres of mass and inertias
stay symbols (the parameter vector ``p``), so one derivation serves every scaled copy of the
mechanism; the geometry (joint origins and axes, closure points) is numeric.

Generated kernels (numba, ``njit(cache=True)``; each writes its result, flattened row-major,
into its last argument ``out``; the Python functions of :attr:`Generated.funcs` wrap them and
return arrays of the shapes below)::

    kin(q) -> (m + m n,)                  phi(q), closure residuals [m or 1]; phi_q(q), (m, n)
    tkin(q) -> (t + t n,)                 task coordinates task(q) (t,); task_q(q) (t, n)
    dyn(q, qd, p) -> (m + n n + n + n m,) phi_gamma = d/dt(phi_q) qd (m,), M (n, n), b (n,), Lc (n, m)
    task_gamma(q, qd) -> (t,)
    frame(q) -> (12,);  twist_q(q) -> (6, n);  kinetic(q, qd, p) -> ();  potential(q, p) -> ()

(``frame``: the task frame's rotation (the body's times the ``[task]`` orientation offset) and
the task point; the task's Euler angles are atan2 forms of that rotation (:func:`_euler_angle`),
printed as ``math.atan2`` for numba, and ``T_WRAP`` marks their rows for the runtime.)

Each fused kernel (``kin``: one Newton iteration; ``dyn``: one dynamics call) is one pass of
common subexpressions (the sines and cosines once; ``sympy.cse`` without its optimisations,
which cost minutes on the delta); the single quantities (``phi``, ``phi_q``, ``task``,
``task_q``, ``phi_gamma``, ``mass``, ``bias``, ``lamc``) are Python functions of slices of
them (``PARTS`` in the generated file; the arguments a part does not take are zeros).

The Newton solves of the closures, the velocity map, inverse and forward dynamics are the entry
kernels of :mod:`dynamics._mechanism_runtime`, compiled once per machine (when that module is
first imported), not for each mechanism: they call a model's ``kin``, ``tkin``, ``dyn`` and
``task_gamma`` through their addresses.  numba keeps the generated file's cache entries in
``<cache>/__pycache__`` and checks them against the file; the digest (the file's name) covers the
code generator's version, the geometry and the entry kernels' source: a change of any of them
names a new file, never a stale cache entry.  The file is loaded as a module registered in
``sys.modules`` under a name given by the digest (numba finds a cached function's module by name).  On this project's 2-core machine
the entry kernels compile in about 40 s, once; a new mechanism's file then compiles its functions
in about 10 s (the delta robot's; 47 s when each file compiled its own copy of the entry kernels);
loading from numba's cache takes about 1 s.

The source is written to ``<cache>/mechanism-<digest>.py`` atomically
(:func:`dynamics._kernel_cache.write_atomic`: a temporary file in the same folder, then
``os.replace``), so parallel test workers deriving the same file never
read a half-written one; ``<cache>`` is ``$TORQUELOOP_MECHANISM_CACHE`` or
``~/.cache/torqueloop/mechanisms`` (falling back to a temporary folder when not writable).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _kernel_cache
from ._kernel_cache import flock_wait, write_atomic

__all__ = ["derive", "derive_regressor", "Generated", "CODEGEN_VERSION", "cache_dir", "compile_lock"]

#: seconds of each phase of the last derivation in this process (frames -> lagrange: the
#: Lagrangian and LagrangesMethod; -> extract: M, Lc, b, the closures' and task's derivatives;
#: -> codegen: cse and printing)
PHASES: dict = {}

#: changes the digest whenever the generated code's form changes
CODEGEN_VERSION = 9

#: the joint types with more than one coordinate (the others have one)
COORDINATES = {"universal": 2, "spherical": 3}


@dataclass
class Generated:
    """The compiled functions of one mechanism (see the module docstring) and how they came."""

    funcs: dict
    kernels: Any             # the generated module (its numba functions, called by :mod:`dynamics._mechanism_runtime`)
    digest: str
    derive_s: float          # time spent deriving and generating (0 when loaded from the cache)
    from_cache: bool
    path: str


def cache_dir() -> Path:
    """Folder of the generated sources (created when missing)."""
    env = os.environ.get("TORQUELOOP_MECHANISM_CACHE")
    cands = [Path(env)] if env else []
    cands += [Path.home() / ".cache" / "torqueloop" / "mechanisms",
              Path(tempfile.gettempdir()) / f"torqueloop-mechanisms-{os.getuid()}"]
    for c in cands:
        try:
            c.mkdir(parents=True, exist_ok=True)
            if os.access(c, os.W_OK):
                return c
        except OSError:
            continue
    raise OSError("no writable folder for the mechanism code cache")


_locks: dict = {}           # digest -> the threads' RLock
_depth: dict = {}           # digest -> nesting depth of its holder (changed only by the holder)
_locks_guard = threading.Lock()


@contextlib.contextmanager
def compile_lock(dg: str):
    """Held while one process derives and compiles the mechanism of digest ``dg``.

    Deriving and compiling a mechanism's kernels costs 10-70 s of CPU; numba then loads them
    from its cache in about a second.  Processes that build the same mechanism at the same time
    (the workers of a parameter sweep or of a test run) would each compile all of it; with this
    lock (``fcntl.flock`` on ``<cache>/mechanism-<digest>.lock``) the first compiles and the
    others wait, then load its caches.  Reentrant in a thread; the threads of one process queue
    on a lock of their own (without a timeout: they are one process).  After
    :data:`dynamics._kernel_cache.COMPILE_WAIT_S` (a process stuck holding it), without
    ``fcntl``, or when the lock file cannot be opened or locked, the caller goes on unlocked:
    the lock saves time, it never guards correctness (the files are written atomically).
    Raises OSError only as :func:`cache_dir` does (no writable folder at all, where
    :func:`derive` could not write either).
    """
    with _locks_guard:
        lk = _locks.setdefault(dg, threading.RLock())
    with lk:
        outer = _depth.get(dg, 0) == 0
        _depth[dg] = _depth.get(dg, 0) + 1
        fd = None
        try:
            if outer:
                fd = flock_wait(str(cache_dir() / f"mechanism-{dg[:32]}.lock"),
                                _kernel_cache.COMPILE_WAIT_S)
            yield
        finally:
            _depth[dg] -= 1
            if fd is not None:
                os.close(fd)        # releases the flock


def _runtime_text() -> str:
    """The entry kernels' source (:mod:`dynamics._mechanism_runtime`)."""
    return (Path(__file__).with_name("_mechanism_runtime.py")).read_text(encoding="utf-8")


def digest_of(spec: dict) -> str:
    """sha256 of the derivation's input (structure and geometry, not the inertial values), the
    code generator's version and the entry kernels' source (:mod:`dynamics._mechanism_runtime`):
    a change of any of them names a new generated file, so numba's cache of a generated file
    (checked against that file alone) never outlives its sources.  (The entry kernels are not in
    the file, they call its functions through their addresses; but they read its outputs in the
    layouts above, which a change of theirs may change.)"""
    blob = json.dumps({"v": CODEGEN_VERSION, "spec": spec,
                       "runtime": hashlib.sha256(_runtime_text().encode()).hexdigest()},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _wrap(kernel, args, shape):
    """A Python function of the generated kernel ``kernel(*args, out)``: float arrays in, the
    result (shape ``shape``) out."""
    size = int(np.prod(shape)) if shape else 1

    def asf(x, dtype):     # the one array type the kernels are compiled for
        if type(x) is np.ndarray and x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable:
            return x
        return np.array(x, dtype=dtype)

    if shape == ():
        def f(*a):
            out = np.empty(1)
            kernel(*(asf(x, dtype=float) for x in a), out)
            return float(out[0])
    else:
        def f(*a):
            out = np.empty(size)
            kernel(*(asf(x, dtype=float) for x in a), out)
            return out.reshape(shape)
    f.__name__ = kernel.__name__[:-2]
    return f


def _load(path: Path) -> tuple[dict, Any]:
    """(the Python functions of the generated quantities, the generated module's namespace)."""
    src = path.read_text()
    # a module registered in sys.modules under a name given by the file's digest: numba finds
    # a function's module by that name when it loads the function from its cache (copies of
    # the same file in two folders share the name; their code is the same)
    name = "_torqueloop_" + path.stem.replace("-", "_")
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    try:
        exec(compile(src, str(path), "exec"), mod.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    funcs = {k: _wrap(getattr(mod, k + "_w"), args, shape) for k, (args, shape) in mod.GENERATED.items()}
    sizes = {"q": mod.N_Z, "qd": mod.N_Z, "p": mod.N_P}
    for k, (src, args, start, shape) in mod.PARTS.items():
        funcs[k] = _part(getattr(mod, src + "_w"), mod.GENERATED[src], args, start, shape, sizes)
    return funcs, mod


def _part(kernel, src, args, start, shape, sizes):
    """A Python function of a slice of the fused kernel ``kernel`` (its arguments and output
    shape ``src``): the result of shape ``shape`` that starts at ``start`` of its output, the
    arguments it does not take (e.g. ``qd`` for the mass matrix) set to zero."""
    sargs, (total,) = src
    size = int(np.prod(shape))
    pos = [args.index(a) if a in args else None for a in sargs]
    zeros = [np.zeros(sizes[a]) for a in sargs]

    def f(*a):
        full = [zeros[i] if k is None else np.asarray(a[k], dtype=float) for i, k in enumerate(pos)]
        out = np.empty(total)
        kernel(*(x if x.flags.c_contiguous else np.ascontiguousarray(x) for x in full), out)
        return out[start:start + size].reshape(shape)
    f.__name__ = kernel.__name__[:-2] + "_part"
    return f


def derive(spec: dict) -> Generated:
    """The generated functions of the mechanism ``spec`` (see :func:`symbolic_spec` in
    :mod:`dynamics.mechanism`), from the cache or derived now."""
    dg = digest_of(spec)
    return _cached(cache_dir() / f"mechanism-{dg[:32]}.py", dg, lambda: _generate(spec))


def _cached(path: Path, dg: str, generate) -> Generated:
    """The generated module at ``path`` loaded, or (missing or damaged) ``generate()``'s source
    written there atomically first."""
    if path.exists():
        try:
            return Generated(*_load(path), dg, 0.0, True, str(path))
        except Exception:       # a damaged cache entry: derive again and replace it
            pass
    t0 = time.perf_counter()
    src = generate()
    write_atomic(str(path), src.encode())
    dt = time.perf_counter() - t0
    return Generated(*_load(path), dg, dt, False, str(path))


#: changes the regressor's digest whenever its generated code's form changes
REGRESSOR_VERSION = 1


def regressor_digest(spec: dict) -> str:
    """sha256 of what the regressor kinematics depend on: the tree, its geometry and the
    regressor generator's version (not the bodies' centres of mass or masses: an identified
    copy of a mechanism shares its regressor)."""
    keep = {k: spec[k] for k in ("planar", "joints")}
    keep["bodies"] = [b["name"] for b in spec["bodies"]]
    blob = json.dumps({"regressor": REGRESSOR_VERSION, "spec": keep}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def derive_regressor(spec: dict) -> Generated:
    """The generated body kinematics of the parameter regressor of the mechanism ``spec``
    (:func:`_generate_regressor`), from the cache (``<cache>/mechanism-regressor-<digest>.py``,
    written atomically like :func:`derive`'s files) or derived now."""
    dg = regressor_digest(spec)
    return _cached(cache_dir() / f"mechanism-regressor-{dg[:32]}.py", dg, lambda: _generate_regressor(spec))


def _generate_regressor(spec: dict) -> str:
    """Source of the kernel ``rkin(q, qd) -> (bodies, 9 + 6 n + 6)``: per body (file order, the
    massless ones too) the rotation ``R`` (3, 3) of its frame in the base frame (``v_base = R
    v_body``), the Jacobian ``J`` (6, n) of its twist ``[v_O; omega]`` (origin velocity and
    angular velocity, base-frame components) in the coordinate rates, and ``Jdot qd`` (6,), so
    that the origin's acceleration and the angular acceleration are ``J qdd + Jdot qd``
    (:func:`dynamics.identification.regressor.regressor` builds the Newton-Euler equations,
    linear in the body's standard parameters, from them)."""
    import sympy as sp
    from sympy.physics import mechanics as me

    q, qd, t, N, O, frames, origins = _tree(spec)
    n = len(q)
    Q, U, sub = _plain_symbols(q, qd)
    Uv = sp.Matrix(U)
    exprs = []
    for bd in spec["bodies"]:
        F, Ob = frames[bd["name"]], origins[bd["name"]]
        R = N.dcm(F)
        v, w = Ob.vel(N), F.ang_vel_in(N)
        tw = sp.Matrix([me.msubs(x.dot(e), sub) for x in (v, w) for e in (N.x, N.y, N.z)])
        J = tw.jacobian(U)
        bias = (J * Uv).jacobian(Q) * Uv
        exprs += [me.msubs(R[i, j], sub) for i in range(3) for j in range(3)] + list(J) + list(bias)
    nb = len(spec["bodies"])
    out = ["# generated by dynamics/_mechanism_derive.py (sympy.physics.mechanics): the body kinematics",
           "# of a mechanism's parameter regressor; do not edit",
           "import math", "from math import sin, cos, sqrt, pi", "import numpy as np",
           "from numba import njit", "",
           "_kernel = njit(cache=True, error_model=\"numpy\")",
           f"N_Z = {n}", "N_P = 0", ""]
    names: dict = {}
    _emit(out, names, "rkin", ["q", "qd"], exprs, (nb, 9 + 6 * n + 6), {"q": Q, "qd": U})
    out.append(f"GENERATED = {names!r}")
    out.append("PARTS = {}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- derivation
def _tree(spec: dict):
    """The open tree of ``spec`` in :mod:`sympy.physics.mechanics`: (q, qd, t, N, O, frames,
    origins), the coordinates (dynamic symbols), their rates, time, the base frame and point,
    and each body's frame and origin (the frame of its parent joint) by name."""
    import sympy as sp
    from sympy.physics import mechanics as me

    joints = spec["joints"]
    # each joint's first coordinate: revolute and prismatic one, universal two, spherical three
    first = [0]
    for jt in joints:
        first.append(first[-1] + COORDINATES.get(jt["type"], 1))
    n = first[-1]
    t = me.dynamicsymbols._t
    q = me.dynamicsymbols(f"q0:{n}")
    qd = [qi.diff(t) for qi in q]
    N = me.ReferenceFrame("N")
    O = me.Point("O")
    O.set_vel(N, 0)
    frames = {"ground": N}
    origins = {"ground": O}
    # the tree: joints are listed parent before child (checked by the loader); each frame's
    # angular velocity comes from orientnew, each origin's velocity from the parent's by the
    # two-point (revolute, universal, spherical) / one-point (prismatic) theorem, so that no
    # position is differentiated as a whole
    for j, jt in enumerate(joints):
        P = frames[jt["parent"]]
        Op = origins[jt["parent"]]
        org = _vec(jt["origin"], P)
        i = first[j]
        if jt["type"] in COORDINATES:
            # universal / spherical: intrinsic (body-fixed) rotations about the joint's axes
            # a1, a2(, a3) by sympy's "Body" orientation in the constant frame J (axes a1, a2,
            # a1 x a2 in the parent frame), and the child frame C fixed in the rotated frame K as
            # the parent is in J: C = P at zero angles, R_PC = A Rx(q1) Ry(q2) Rz(s q3) A^T
            ax = [np.asarray(a, dtype=float) for a in jt["axes"]]
            a3 = np.cross(ax[0], ax[1])
            A = np.column_stack([ax[0], ax[1], a3])
            Am = sp.Matrix(3, 3, [_num(v) for v in A.ravel()])
            J = P.orientnew(f"J{j}", "DCM", Am)
            if jt["type"] == "universal":
                angles = (q[i], q[i + 1], sp.S(0))
            else:
                angles = (q[i], q[i + 1], int(np.sign(a3 @ ax[2])) * q[i + 2])
            K = J.orientnew(f"K{j}", "Body", angles, "XYZ")
            C = K.orientnew(f"F{j}", "DCM", Am.T)
            Oc = Op.locatenew(f"O{j}", org)
            Oc.v2pt_theory(Op, N, P)
        elif jt["type"] == "revolute":
            ax = _vec(jt["axis"], P)
            C = P.orientnew(f"F{j}", "Axis", (q[i], ax))
            Oc = Op.locatenew(f"O{j}", org)
            Oc.v2pt_theory(Op, N, P)
        else:
            ax = _vec(jt["axis"], P)
            C = P.orientnew(f"F{j}", "Axis", (sp.S(0), P.z))
            Oc = Op.locatenew(f"O{j}", org + q[i] * ax)
            Oc.set_vel(P, qd[i] * ax)
            Oc.v1pt_theory(Op, N, P)
        frames[jt["child"]] = C
        origins[jt["child"]] = Oc
    return q, qd, t, N, O, frames, origins


def _generate(spec: dict) -> str:
    import sympy as sp
    from sympy.physics import mechanics as me

    joints = spec["joints"]
    bodies = spec["bodies"]
    q, qd, t, N, O, frames, origins = _tree(spec)
    n = len(q)

    # inertial parameters: per body m, m*c (3), I about com (6: xx yy zz xy yz zx)
    npar = 10 * len(bodies)
    p = sp.symbols(f"p0:{npar}")
    g = [_num(c) for c in spec["gravity"]]
    gvec = g[0] * N.x + g[1] * N.y + g[2] * N.z
    rbs = []
    loads = []
    V = sp.S(0)
    for k, bd in enumerate(bodies):
        if bd.get("massless"):      # no mass, no inertia: adds nothing to M, b, T or V
            continue
        F, Ob = frames[bd["name"]], origins[bd["name"]]
        m = p[10 * k]
        G = Ob.locatenew(f"G{k}", _vec(bd["com"], F))
        G.v2pt_theory(Ob, N, F)
        I = me.inertia(F, p[10 * k + 4], p[10 * k + 5], p[10 * k + 6],
                       p[10 * k + 7], p[10 * k + 8], p[10 * k + 9])
        rb = me.RigidBody(f"B{k}", G, F, m, (I, G))
        rbs.append(rb)
        loads.append((G, m * gvec))
        V += -m * gvec.dot(G.pos_from(O))
    # closures, in N components
    phi = []
    for lp in spec["loops"]:
        Fa, Fb = frames[lp["body_a"]], frames[lp["body_b"]]
        pa = origins[lp["body_a"]].locatenew("pa", _vec(lp["point_a"], Fa))
        pb = origins[lp["body_b"]].locatenew("pb", _vec(lp["point_b"], Fb))
        d = pa.pos_from(O) - pb.pos_from(O)
        comps = [d.dot(N.x), d.dot(N.y)] + ([] if spec["planar"] else [d.dot(N.z)])
        if lp["type"] == "revolute" and not spec["planar"]:
            a = _vec(lp["axis_a"], Fa)
            e1, e2 = lp["perp_b"]
            comps += [a.dot(_vec(e1, Fb)), a.dot(_vec(e2, Fb))]
        phi += comps
    # task coordinates
    tk = spec["task"]
    Ft, Ot = frames[tk["body"]], origins[tk["body"]]
    pt = Ot.locatenew("T", _vec(tk["point"], Ft))
    rt = pt.pos_from(O)
    # the task frame's rotation R = R_base_body R_off (R_off: the [task] orientation offset)
    Roff = sp.Matrix(3, 3, [_num(v) for v in np.asarray(tk.get("offset", np.eye(3).tolist()), float).ravel()])
    Rt = N.dcm(Ft) * Roff
    task = []
    for coord in tk["coordinates"]:
        if coord in ("x", "y", "z"):
            task.append(rt.dot(getattr(N, coord)))
        elif coord in EULER:
            task.append(_euler_angle(Rt, coord))
        else:        # "phi": planar rotation of the body = signed sum of the revolute angles
            task.append(sum((sp.sign(joints[j]["axis"][2]) * q[j] for j in tk["path"]
                             if joints[j]["type"] == "revolute"), sp.S(0)))

    marks = [("frames", time.perf_counter())]
    # the open tree's equations by Kane's method (generalised speeds u = qd): M(q) qdd = f(q, qd)
    # with the gravity loads in f; the closures add Lc lam = phi_q^T lam (the multipliers'
    # term of the Lagrange equations with holonomic constraints), read off phi_q below
    u = me.dynamicsymbols(f"u0:{n}")
    KM = me.KanesMethod(N, q_ind=q, u_ind=u, kd_eqs=[qd[i] - u[i] for i in range(n)])
    KM.kanes_equations(rbs, loads)
    marks.append(("kane", time.perf_counter()))
    PHASES["kane"] = round(marks[-1][1] - marks[-2][1], 3)

    # plain symbols for the generated code
    Q, U, sub = _plain_symbols(q, qd, u)

    def plain(e):
        return me.msubs(e, sub)

    Mm = plain(KM.mass_matrix)
    b = -plain(KM.forcing)
    phiv = sp.Matrix([plain(e) for e in phi]) if phi else sp.zeros(0, 1)
    phiq = phiv.jacobian(Q) if phi else sp.zeros(0, n)
    Lc = phiq.T if phi else sp.zeros(n, 0)
    Uv = sp.Matrix(U)
    phig = (phiq * Uv).jacobian(Q) * Uv if phi else sp.zeros(0, 1)
    taskv = sp.Matrix([plain(e) for e in task])
    taskq = taskv.jacobian(Q)
    taskg = (taskq * Uv).jacobian(Q) * Uv
    T = plain(sum((rb.kinetic_energy(N) for rb in rbs), sp.S(0)))
    Vp = plain(V)
    marks.append(("extract", time.perf_counter()))
    PHASES["extract"] = round(marks[-1][1] - marks[-2][1], 3)

    m = len(phi)
    nt = len(task)
    wrap = tuple(1.0 if c in EULER else 0.0 for c in tk["coordinates"])
    out = ["# generated by dynamics/_mechanism_derive.py (sympy.physics.mechanics); do not edit",
           "import math", "from math import sin, cos, sqrt, pi, atan2", "import numpy as np",
           "from numba import njit", "",
           "_kernel = njit(cache=True, error_model=\"numpy\")",
           "# the generated functions allocate nothing: compiled without reference counting of",
           "# their array arguments (the atomic counts cost more than their arithmetic)",
           "_leaf = njit(cache=True, error_model=\"numpy\", _nrt=False)",
           f"N_Z = {n}", f"N_C = {m}", f"N_A = {n - m}", f"N_T = {nt}", f"N_P = {npar}",
           "# 1.0 for the task rows that are Euler angles (atan2, in (-pi, pi]): their IK residual and",
           "# continuation steps are wrapped",
           f"T_WRAP = {wrap!r}", ""]
    names = {}

    def emit(name, args, exprs, shape):
        _emit(out, names, name, args, exprs, shape, {"q": Q, "qd": U, "p": p}, decorator="@_leaf")

    # fused forms: one pass of common subexpressions (the sines and cosines of the angles
    # once) for what one Newton iteration / one dynamics call needs; the single quantities
    # are slices of them (:data:`_PARTS`), so each big expression is reduced and printed once
    emit("kin", ["q"], list(phiv) + list(phiq), (m + m * n,))
    emit("tkin", ["q"], list(taskv) + list(taskq), (nt + nt * n,))
    emit("dyn", ["q", "qd", "p"], list(phig) + list(Mm) + list(b) + list(Lc), (m + n * n + n + n * m,))
    emit("task_gamma", ["q", "qd"], list(taskg), (nt,))
    # the task body's frame: rotation (3, 3) and the task point (3,), and the Jacobian of its
    # twist [v; omega] (base frame) in the coordinate rates, (6, n)
    emit("frame", ["q"], [plain(Rt[i, j]) for i in range(3) for j in range(3)]
         + [plain(rt.dot(e)) for e in (N.x, N.y, N.z)], (12,))
    vt = plain(sp.Matrix([rt.dt(N).dot(e) for e in (N.x, N.y, N.z)]))
    wt = plain(sp.Matrix([Ft.ang_vel_in(N).dot(e) for e in (N.x, N.y, N.z)]))
    emit("twist_q", ["q"], list(vt.jacobian(U)) + list(wt.jacobian(U)), (6, n))
    emit("kinetic", ["q", "qd", "p"], [T], ())
    emit("potential", ["q", "p"], [Vp], ())
    marks.append(("codegen", time.perf_counter()))
    parts = {"phi": ("kin", ("q",), 0, (m,)), "phi_q": ("kin", ("q",), m, (m, n)),
             "task": ("tkin", ("q",), 0, (nt,)), "task_q": ("tkin", ("q",), nt, (nt, n)),
             "phi_gamma": ("dyn", ("q", "qd"), 0, (m,)),
             "mass": ("dyn", ("q", "p"), m, (n, n)),
             "bias": ("dyn", ("q", "qd", "p"), m + n * n, (n,)),
             "lamc": ("dyn", ("q",), m + n * n + n, (n, m))}
    PHASES.clear()
    PHASES.update({k: round(t - marks[i][1], 3) for i, (k, t) in enumerate(marks[1:])})
    out.append(f"GENERATED = {names!r}")
    out.append(f"PARTS = {parts!r}")
    return "\n".join(out) + "\n"


#: the Euler angles of a spatial task frame, R = Rz(gamma) Ry(beta) Rx(alpha) (the convention of
#: :func:`dynamics.stewart.rotation_matrix`)
EULER = ("alpha", "beta", "gamma")


def _euler_angle(R, coord):
    """The Euler angle ``coord`` (one of :data:`EULER`) of the rotation matrix ``R`` (sympy 3x3,
    ``R = Rz(gamma) Ry(beta) Rx(alpha)``), by the atan2 forms: alpha = atan2(R32, R33), beta =
    atan2(-R31, sqrt(R11^2 + R21^2)) in [-pi/2, pi/2], gamma = atan2(R21, R11); alpha and gamma
    in (-pi, pi].  All three lose their derivatives at cos(beta) = 0 (R31 = +-1), the
    representation's singularity."""
    import sympy as sp

    if coord == "alpha":
        return sp.atan2(R[2, 1], R[2, 2])
    if coord == "beta":
        return sp.atan2(-R[2, 0], sp.sqrt(R[0, 0] ** 2 + R[1, 0] ** 2))
    return sp.atan2(R[1, 0], R[0, 0])


def _plain_symbols(q, *rates):
    """Plain symbols ``Q`` (``x0..``) and ``U`` (``v0..``) for the generated code, and the
    substitution of the coordinates ``q`` by ``Q`` and of each list of ``rates`` by ``U``."""
    import sympy as sp

    n = len(q)
    Q = sp.symbols(f"x0:{n}")
    U = sp.symbols(f"v0:{n}")
    sub = {}
    for i in range(n):
        for r in rates:
            sub[r[i]] = U[i]
        sub[q[i]] = Q[i]
    return Q, U, sub


def _emit(out: list, names: dict, name: str, args, exprs, shape, unpack: dict,
          decorator: str = "@_kernel") -> None:
    """Append the numba kernel ``<name>_w(*args, out)`` of the expressions ``exprs`` (flattened
    row-major, shape ``shape``) to the source lines ``out`` (one pass of ``sympy.cse`` without
    its optimisations) and record its arguments and shape in ``names``; ``unpack`` maps an
    argument's name to its symbols; ``decorator`` is the compile line (``@_leaf``: the model's
    functions, compiled without reference counting)."""
    import sympy as sp

    flat = [sp.sympify(e) for e in exprs]
    reps, red = sp.cse(flat, symbols=sp.numbered_symbols("c"), optimizations=None)
    pr = _printer()
    lines = [decorator, f"def {name}_w({', '.join(args)}, out):"]
    used = set().union(*(e.free_symbols for e in flat)) if flat else set()
    for a in args:
        for i, s in enumerate(unpack[a]):
            if s in used:
                lines.append(f"    {s} = {a}[{i}]")
    for s, e in reps:
        lines.append(f"    {s} = {pr.doprint(e)}")
    for i, e in enumerate(red):
        lines.append(f"    out[{i}] = {pr.doprint(e)}")
    if not red:
        lines.append("    return")
    out.extend(lines + [""])
    names[name] = (tuple(args), tuple(shape))


def _vec(c, F):
    """The vector of components ``c`` (3,) in frame ``F`` (zero components left out)."""
    import sympy as sp

    v = sp.S(0) * F.x
    for x, e in zip(c, (F.x, F.y, F.z)):
        x = _num(x)
        if x != 0:
            v += x * e
    return v


def _num(c):
    """A number of the geometry as sympy sees it: exact 0 and integers where the value is one to
    1e-14 (a cos(90 deg) of 6e-17 is a zero, which lets the terms it multiplies vanish), a Float
    otherwise (no rationalisation: nsimplify of such values builds huge integers)."""
    import sympy as sp

    c = float(c)
    r = round(c)
    if abs(c - r) < 1e-14:
        return sp.Integer(r)
    return sp.Float(c)


def _printer():
    from sympy.printing.pycode import PythonCodePrinter

    class _P(PythonCodePrinter):
        # bare sin/cos/sqrt (imported from math): one lookup fewer per call
        def _print_Function(self, e):
            return super()._print_Function(e)

    return _P({"fully_qualified_modules": False, "standard": "python3"})
