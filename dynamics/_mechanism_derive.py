"""Symbolic derivation of a mechanism's equations with :mod:`sympy.physics.mechanics`, and
the generated code (common subexpressions eliminated), cached on disk by digest.

The tree of joints gives the coordinates ``q`` (n, one per joint) and the frames of the bodies
(:class:`sympy.physics.mechanics.ReferenceFrame` chained with ``orientnew`` about each joint
axis, points chained with ``locatenew``).  The Lagrangian ``L = T - V`` of the bodies
(:class:`~sympy.physics.mechanics.RigidBody`, inertia about the centre of mass) and the loop
closures ``phi(q) = 0`` (m holonomic constraints) go to
:class:`sympy.physics.mechanics.LagrangesMethod` (``hol_coneqs``), whose equations of motion
are, with the multipliers ``lam`` (m,)::

    eom(q, qd, qdd, lam) = M(q) qdd + b(q, qd) + Lc(q) lam = tau_q          (n,)

(``tau_q``: generalised forces of the drives, on the actuated coordinates).  ``M``, ``Lc``
and ``b`` are read off ``eom`` by ``jacobian`` / substitution (``eom`` is linear in ``qdd`` and
``lam``).  The masses, centres of mass and inertias stay symbols (the parameter vector ``p``),
so one derivation serves every scaled copy of the mechanism; the geometry (joint origins and
axes, closure points) is numeric.

Generated kernels (numba, ``njit(cache=True)``; each writes its result, flattened row-major,
into its last argument ``out``; the Python functions of :attr:`Generated.funcs` wrap them and
return arrays of the shapes below)::

    phi(q) -> (m,)            closure residuals [m or 1]
    phi_q(q) -> (m, n)        their Jacobian
    phi_gamma(q, qd) -> (m,)  d/dt(phi_q) qd (velocity-product part of d2phi/dt2)
    task(q) -> (t,)           task coordinates;  task_q(q) -> (t, n);  task_gamma(q, qd) -> (t,)
    mass(q, p) -> (n, n);  lamc(q) -> (n, m);  bias(q, qd, p) -> (n,)
    frame(q) -> (12,);  twist_q(q) -> (6, n);  kinetic(q, qd, p) -> ();  potential(q, p) -> ()

After them the generated file holds a copy of the entry kernels of
:mod:`dynamics._mechanism_runtime` (the Newton solves of the closures, the velocity map,
inverse and forward dynamics), so that the file is the whole source of every numba cache
entry it has; numba keeps those entries in ``<cache>/__pycache__`` and checks them against
the file.  The digest (the file's name) covers the code generator's version, the geometry
and the runtime's text: a change of any of them names a new file, never a stale cache entry.
The file is loaded as a module registered in ``sys.modules`` under a name given by the
digest (numba finds a cached function's module by name).  Compiling a new file's kernels
takes 30-45 s on this project's 2-core machine (the 3RRR file); loading them from numba's
cache about 1 s.

The source is written to ``<cache>/mechanism-<digest>.py`` atomically
(:func:`dynamics._kernel_cache.write_atomic`: a temporary file in the same folder, then
``os.replace``), so parallel test workers deriving the same file never
read a half-written one; ``<cache>`` is ``$TORQUELOOP_MECHANISM_CACHE`` or
``~/.cache/torqueloop/mechanisms`` (falling back to a temporary folder when not writable).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._kernel_cache import write_atomic

__all__ = ["derive", "Generated", "CODEGEN_VERSION", "cache_dir"]

#: seconds of each phase of the last derivation in this process (frames -> lagrange: the
#: Lagrangian and LagrangesMethod; -> extract: M, Lc, b, the closures' and task's derivatives;
#: -> codegen: cse and printing)
PHASES: dict = {}

#: changes the digest whenever the generated code's form changes
CODEGEN_VERSION = 4


@dataclass
class Generated:
    """The compiled functions of one mechanism (see the module docstring) and how they came."""

    funcs: dict
    kernels: Any             # the generated module (its numba kernels, :mod:`dynamics._mechanism_runtime`)
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


_RUNTIME_MARK = "# ---- template start (everything below is copied into the generated module)\n"


def _runtime_text() -> str:
    """The entry kernels' source (:mod:`dynamics._mechanism_runtime`, below its template mark)."""
    text = (Path(__file__).with_name("_mechanism_runtime.py")).read_text(encoding="utf-8")
    return text[text.index(_RUNTIME_MARK) + len(_RUNTIME_MARK):]


def digest_of(spec: dict) -> str:
    """sha256 of the derivation's input (structure and geometry, not the inertial values), the
    code generator's version and the entry kernels' source (:mod:`dynamics._mechanism_runtime`):
    a change of any of them names a new generated file, so numba's cache of a generated file
    (checked against that file alone) never outlives its sources."""
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
    return funcs, mod


def derive(spec: dict) -> Generated:
    """The generated functions of the mechanism ``spec`` (see :func:`symbolic_spec` in
    :mod:`dynamics.mechanism`), from the cache or derived now."""
    dg = digest_of(spec)
    folder = cache_dir()
    path = folder / f"mechanism-{dg[:32]}.py"
    if path.exists():
        try:
            return Generated(*_load(path), dg, 0.0, True, str(path))
        except Exception:       # a damaged cache entry: derive again and replace it
            pass
    t0 = time.perf_counter()
    src = _generate(spec)
    write_atomic(str(path), src.encode())
    dt = time.perf_counter() - t0
    return Generated(*_load(path), dg, dt, False, str(path))


# ----------------------------------------------------------------------------- derivation
def _generate(spec: dict) -> str:
    import sympy as sp
    from sympy.physics import mechanics as me

    joints = spec["joints"]
    bodies = spec["bodies"]
    n = len(joints)
    t = me.dynamicsymbols._t
    q = me.dynamicsymbols(f"q0:{n}")
    qd = [qi.diff(t) for qi in q]
    N = me.ReferenceFrame("N")
    O = me.Point("O")
    O.set_vel(N, 0)
    frames = {"ground": N}
    origins = {"ground": O}
    # the tree: joints are listed parent before child (checked by the loader)
    for j, jt in enumerate(joints):
        P = frames[jt["parent"]]
        Op = origins[jt["parent"]]
        ax = sum((_num(c) * e for c, e in zip(jt["axis"], (P.x, P.y, P.z))), sp.S(0) * P.x)
        org = sum((_num(c) * e for c, e in zip(jt["origin"], (P.x, P.y, P.z))), sp.S(0) * P.x)
        if jt["type"] == "revolute":
            C = P.orientnew(f"F{j}", "Axis", (q[j], ax))
            Oc = Op.locatenew(f"O{j}", org)
        else:
            C = P.orientnew(f"F{j}", "Axis", (sp.S(0), P.z))
            Oc = Op.locatenew(f"O{j}", org + q[j] * ax)
        frames[jt["child"]] = C
        origins[jt["child"]] = Oc

    # inertial parameters: per body m, m*c (3), I about com (6: xx yy zz xy yz zx)
    npar = 10 * len(bodies)
    p = sp.symbols(f"p0:{npar}")
    g = [_num(c) for c in spec["gravity"]]
    gvec = g[0] * N.x + g[1] * N.y + g[2] * N.z
    rbs = []
    V = sp.S(0)
    for k, bd in enumerate(bodies):
        F, Ob = frames[bd["name"]], origins[bd["name"]]
        m = p[10 * k]
        c = [_num(x) for x in bd["com"]]
        G = Ob.locatenew(f"G{k}", c[0] * F.x + c[1] * F.y + c[2] * F.z)
        G.set_vel(N, G.pos_from(O).dt(N))
        I = me.inertia(F, p[10 * k + 4], p[10 * k + 5], p[10 * k + 6],
                       p[10 * k + 7], p[10 * k + 8], p[10 * k + 9])
        rb = me.RigidBody(f"B{k}", G, F, m, (I, G))
        rb.potential_energy = -m * gvec.dot(G.pos_from(O))
        rbs.append(rb)
        V += rb.potential_energy
    # closures, in N components
    phi = []
    for lp in spec["loops"]:
        Fa, Fb = frames[lp["body_a"]], frames[lp["body_b"]]
        pa = origins[lp["body_a"]].locatenew("pa", sum((_num(c) * e for c, e in zip(lp["point_a"], (Fa.x, Fa.y, Fa.z))), sp.S(0) * N.x))
        pb = origins[lp["body_b"]].locatenew("pb", sum((_num(c) * e for c, e in zip(lp["point_b"], (Fb.x, Fb.y, Fb.z))), sp.S(0) * N.x))
        d = pa.pos_from(O) - pb.pos_from(O)
        comps = [d.dot(N.x), d.dot(N.y)] + ([] if spec["planar"] else [d.dot(N.z)])
        if lp["type"] == "revolute" and not spec["planar"]:
            a = sum((_num(c) * e for c, e in zip(lp["axis_a"], (Fa.x, Fa.y, Fa.z))), sp.S(0) * N.x)
            e1, e2 = lp["perp_b"]
            comps += [a.dot(sum((_num(c) * e for c, e in zip(e1, (Fb.x, Fb.y, Fb.z))), sp.S(0) * N.x)),
                      a.dot(sum((_num(c) * e for c, e in zip(e2, (Fb.x, Fb.y, Fb.z))), sp.S(0) * N.x))]
        phi += comps
    # task coordinates
    tk = spec["task"]
    Ft, Ot = frames[tk["body"]], origins[tk["body"]]
    pt = Ot.locatenew("T", sum((_num(c) * e for c, e in zip(tk["point"], (Ft.x, Ft.y, Ft.z))), sp.S(0) * N.x))
    rt = pt.pos_from(O)
    task = []
    for coord in tk["coordinates"]:
        if coord in ("x", "y", "z"):
            task.append(rt.dot(getattr(N, coord)))
        else:        # "phi": planar rotation of the body = signed sum of the revolute angles
            task.append(sum((sp.sign(joints[j]["axis"][2]) * q[j] for j in tk["path"]
                             if joints[j]["type"] == "revolute"), sp.S(0)))

    marks = [("frames", time.perf_counter())]
    L = me.Lagrangian(N, *rbs)
    LM = me.LagrangesMethod(L, q, hol_coneqs=phi, frame=N) if phi else me.LagrangesMethod(L, q, frame=N)
    eom = LM.form_lagranges_equations()
    marks.append(("lagrange", time.perf_counter()))
    lam = list(LM.lam_vec) if phi else []

    # plain symbols for the generated code
    Q = sp.symbols(f"x0:{n}")
    U = sp.symbols(f"v0:{n}")
    A = sp.symbols(f"a0:{n}")
    Lm = sp.symbols(f"l0:{len(lam)}") if lam else ()
    sub = {}
    for i in range(n):
        sub[q[i].diff(t, 2)] = A[i]
        sub[qd[i]] = U[i]
        sub[q[i]] = Q[i]
    for i, l in enumerate(lam):
        sub[l] = Lm[i]

    def plain(e):
        return me.msubs(e, sub)

    eomp = plain(sp.Matrix(eom))
    Mm = eomp.jacobian(A)
    Lc = eomp.jacobian(Lm) if lam else sp.zeros(n, 0)
    zero = {a: 0 for a in A}
    zero.update({l: 0 for l in Lm})
    b = eomp.xreplace(zero)
    phiv = sp.Matrix([plain(e) for e in phi]) if phi else sp.zeros(0, 1)
    phiq = phiv.jacobian(Q) if phi else sp.zeros(0, n)
    Uv = sp.Matrix(U)
    phig = (phiq * Uv).jacobian(Q) * Uv if phi else sp.zeros(0, 1)
    taskv = sp.Matrix([plain(e) for e in task])
    taskq = taskv.jacobian(Q)
    taskg = (taskq * Uv).jacobian(Q) * Uv
    T = plain(sum((rb.kinetic_energy(N) for rb in rbs), sp.S(0)))
    Vp = plain(V)
    marks.append(("extract", time.perf_counter()))

    m = len(phi)
    nt = len(task)
    out = ["# generated by dynamics/_mechanism_derive.py (sympy.physics.mechanics); do not edit",
           "import math", "from math import sin, cos, sqrt, pi", "import numpy as np",
           "from numba import njit", "",
           "_kernel = njit(cache=True, error_model=\"numpy\")",
           f"N_Z = {n}", f"N_C = {m}", f"N_A = {n - m}", f"N_T = {nt}", f"N_P = {npar}", ""]
    names = {}

    def emit(name, args, exprs, shape):
        flat = [sp.sympify(e) for e in exprs]
        reps, red = sp.cse(flat, symbols=sp.numbered_symbols("c"), optimizations="basic")
        pr = _printer()
        lines = ["@_kernel", f"def {name}_w({', '.join(args)}, out):"]
        unpack = {"q": Q, "qd": U, "p": p}
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

    emit("phi", ["q"], list(phiv), (m,))
    emit("phi_q", ["q"], list(phiq), (m, n))
    emit("phi_gamma", ["q", "qd"], list(phig), (m,))
    emit("task", ["q"], list(taskv), (nt,))
    emit("task_q", ["q"], list(taskq), (nt, n))
    emit("task_gamma", ["q", "qd"], list(taskg), (nt,))
    emit("mass", ["q", "p"], list(Mm), (n, n))
    emit("lamc", ["q"], list(Lc), (n, m))
    emit("bias", ["q", "qd", "p"], list(b), (n,))
    # the task body's frame: rotation (3, 3) and the task point (3,), and the Jacobian of its
    # twist [v; omega] (base frame) in the coordinate rates, (6, n)
    R = N.dcm(Ft)
    emit("frame", ["q"], [plain(R[i, j]) for i in range(3) for j in range(3)]
         + [plain(rt.dot(e)) for e in (N.x, N.y, N.z)], (12,))
    vt = plain(sp.Matrix([rt.dt(N).dot(e) for e in (N.x, N.y, N.z)]))
    wt = plain(sp.Matrix([Ft.ang_vel_in(N).dot(e) for e in (N.x, N.y, N.z)]))
    emit("twist_q", ["q"], list(vt.jacobian(U)) + list(wt.jacobian(U)), (6, n))
    # fused forms for the entry kernels: one pass of common subexpressions (the sines and
    # cosines of the angles once) for what one Newton iteration / one dynamics call needs
    emit("kin", ["q"], list(phiv) + list(phiq), (m + m * n,))
    emit("tkin", ["q"], list(taskv) + list(taskq), (nt + nt * n,))
    emit("dyn", ["q", "qd", "p"], list(phig) + list(Mm) + list(b) + list(Lc), (m + n * n + n + n * m,))
    emit("kinetic", ["q", "qd", "p"], [T], ())
    emit("potential", ["q", "p"], [Vp], ())
    marks.append(("codegen", time.perf_counter()))
    PHASES.clear()
    PHASES.update({k: round(t - marks[i][1], 3) for i, (k, t) in enumerate(marks[1:])})
    out.append(f"GENERATED = {names!r}")
    out.append(_runtime_text())
    return "\n".join(out) + "\n"


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
