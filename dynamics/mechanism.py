"""Mechanisms described in a robot file (``type = "mechanism"``): closed-chain dynamics derived
with :mod:`sympy.physics.mechanics` (see :mod:`dynamics._mechanism_derive`).

Coordinates
-----------
Every joint of the file's tree has one coordinate (revolute: angle [rad] of the child frame
about the joint axis, relative to the parent; prismatic: displacement [m] along the axis), a
universal joint two and a spherical joint three (below); all of them together, in file order,
are the *full* configuration ``z`` (n,).  Every body frame equals its parent's (moved to the
joint origin) at zero coordinates.

* universal: ``axes = [a1, a2]``, orthogonal, parent frame; the child frame is
  ``R = Rot(a1, z1) Rot(a2, z2)`` (intrinsic: the second axis turned by the first); the
  coordinates are named ``<joint>.1``, ``<joint>.2``.
* spherical: intrinsic Euler angles about ``axes = [a1, a2, a3]``, mutually
  orthogonal (default ``[z, y, x]``: ZYX), ``R = Rot(a1, z1) Rot(a2, z2) Rot(a3, z3)``.  Its
  singularity: the middle angle at +-pi/2 (a1 and the turned a3 aligned), where the passive
  closure Jacobian loses rank (reported as type 2; :meth:`MechanismModel.singularity` adds
  ``euler_measure``, the smallest |cos| of a middle angle, and ``euler_joint``); a home within
  :data:`EULER_HOME_MARGIN_RAD` of it is refused.
* actuated universal and spherical joints: a chain of 2 or 3 motors, each coordinate an
  actuated coordinate named ``<joint>.1``, ... (a ``"revolute"`` drive in :attr:`joint_types`);
  each limit and drive field a number (every coordinate) or a list of one per coordinate.  The
  home rule above holds for an actuated spherical joint too: its singularity is then its drives'
  own (first and third motor axes aligned), a type-1 loss of rank where the task depends on it.

The coordinates of the actuated joints (``actuated = true``) are the model's ``q`` (``dof`` of
them, in file order); the others are passive.  The loop closures ``phi(z) = 0`` (m equations)
tie them: the mobility ``n - m`` must equal the number of actuated coordinates, and the closures
must be independent (no redundant closure).  The
task coordinates ``X`` are (any subset, in this order, :data:`TASK_COORDINATES`) the components
``x, y, z`` of a point of the task body in the base frame and its orientation: for a planar
mechanism its rotation ``phi`` about z, for a spatial one the Euler angles ``alpha, beta,
gamma`` of the task frame, ``R_base_task = R_base_body R_off = Rz(gamma) Ry(beta) Rx(alpha)``
(the Stewart platform's convention, :func:`dynamics.stewart.rotation_matrix`; ``R_off`` from the
optional ``orientation = [a, b, g]`` of ``[task]``, identity by default), computed as
``alpha = atan2(R32, R33)``, ``beta = atan2(-R31, hypot(R11, R21))`` in [-pi/2, pi/2],
``gamma = atan2(R21, R11)``, alpha and gamma in (-pi, pi].  The inverse kinematics wraps the
angles' residuals and continuation steps to (-pi, pi] (a target 2 pi away is the same pose);
``task_layout`` is "spatial" for all six, "orientation" for the three angles.  At ``beta =
+-pi/2`` the angles have their own singularity (alpha, gamma undefined, the task Jacobian's
angle rows growing like 1/cos(beta)): the type-1 measure falls with it, the report's
``extra["task_euler_measure"]`` is |cos(beta)| and a singular report near it says so in
``extra["note"]``; a home within :data:`EULER_HOME_MARGIN_RAD` of it is refused.  A wrench of
shape (6,) is ``[f; m]`` (base frame, moment about the task point); one of the task's length
is conjugate to the task coordinates (for the angles ``E(X)^T m``, ``omega = E Xd``).

Kinematics
----------
* Forward kinematics (``q`` -> ``z``, ``X``): Newton on ``phi(z) = 0`` over the passive
  coordinates, by continuation from the last solution (or the home configuration) in steps of at
  most 0.1 rad / 0.01 m of the actuated coordinates; each step must keep the sign of
  ``det(phi_p)`` (the type-2 Jacobian), so the assembly mode is the home configuration's (the
  file's ``home`` joint values choose it).  A jump is refused as a SingularityError.  A single
  step from the last solution starts at its first-order prediction ``z + G (q - q_last)`` when
  the last dynamics call computed the velocity map ``G`` there (two Newton iterations a control
  cycle instead of three).
* Inverse kinematics (``X`` -> ``z``): Newton on ``[phi(z); task(z) - X] = 0`` over all
  coordinates, by continuation in task space from the home (or ``guess=``, a full configuration:
  the working mode chosen explicitly), keeping the sign of the determinant of that square
  Jacobian (the type-1 matrix).

Dynamics
--------
``LagrangesMethod`` with the closures as holonomic constraints gives
``M(z) zdd + b(z, zd) + Lc(z) lam = S^T tau`` (``Lc = phi_z^T`` in sympy's sign).  With ``phi_z = [A | B]``
(actuated | passive columns), ``zd = G qd``, ``G = [I; -B^-1 A]`` and ``zdd = G qdd + g0``,
``g0 = [0; -B^-1 gamma]`` (``gamma = d/dt(phi_z) zd``):

* inverse dynamics: ``F = M zdd + b - J_t^T w``; the passive rows give the multipliers
  ``lam = -Lc_p^-1 F_p`` (for a point closure: the force [N], base frame, that body_a exerts on
  body_b at the closure point; see :meth:`MechanismModel.inverse_dynamics_multipliers`), the
  actuated rows the torques ``tau = F_a + Lc_a lam`` (= ``G^T F``);
* reduced: ``M_r = G^T M G``, ``h_r = G^T (M g0 + b)``, ``C_r = G^T M Gdot + G^T C G`` (``C v``
  with the Christoffel symbols of ``M`` and ``Gdot`` with ``d/dt(phi_z) v``, both obtained exactly
  by polarisation of the generated quadratic forms ``b(z, zd) - g(z)`` and ``gamma``);
* forward dynamics: ``qdd = M_r^-1 (tau - h_r + G^T J_t^T w)``.  Constraint drift: the state is
  the minimal ``(q, qd)``; the passive coordinates are re-solved from the closures by Newton at
  every evaluation (tolerance 1e-12 m), so the closures hold to that tolerance by construction,
  as in :meth:`dynamics.planar3rrr.Planar3RRR.rk4_step`.

Compiled kernels: the Newton solves, the velocity map ``G``, the inverse and forward dynamics
run in numba kernels compiled once for every mechanism (:mod:`dynamics._mechanism_runtime`;
dense solves by LU with partial pivoting), which call the mechanism's generated functions
through their addresses; those are compiled or loaded from numba's cache when the model is
built (before any control cycle).  Measured per call from
Python on the 3RRR file against the hand-written 3RRR: ``benchmarks/bench_mechanism.py``.
The model keeps its last forward and inverse kinematics solutions as the next starts (updated
in place by the kernels): one instance is not safe to share across threads.

Singularities (the rule of the other models): ``type1_measure`` = 1/cond of the scaled
inverse-kinematics Jacobian ``[phi_z; task_z]``, ``type2_measure`` = 1/cond of the scaled
``B``; a measure below ``singularity_tolerance`` makes the pose singular of that type;
``margin`` = 1/cond of the task Jacobian with angle rows times ``length_scale`` (and revolute
columns divided by it), 0 when singular.  Angles are scaled by ``length_scale`` [m] everywhere.

Robot file::

    name = "fivebar"
    type = "mechanism"
    planar = true                    # motion in the base xy plane (revolute axes +-z)
    gravity = [0.0, -9.81, 0.0]      # [m/s^2], base frame
    singularity_tolerance = 1e-6     # optional
    length_scale = 0.1               # [m], optional (default: mean joint-origin offset)
    closure_tolerance = 1e-3         # [m], optional: largest gap of a loop at the home values

    [[bodies]]                       # one table per moving body
    name = "upper_left"
    mass = 0.12                      # [kg]
    com = [0.05, 0.0, 0.0]           # [m], body frame (the frame of its parent joint)
    inertia = 1.2e-4                 # [kg m^2] planar: Izz about the com; or
                                     # [Ixx, Iyy, Izz, Ixy, Iyz, Izx] about the com, body axes

    [[joints]]                       # one table per tree joint, parents before children
    name = "hip_left"
    type = "revolute"                # or "prismatic"; spatial: "universal", "spherical"
                                     # (`axes` (2 or 3 orthogonal vectors) instead of `axis`,
                                     # `home` a list of 2 or 3 angles; actuated: each field
                                     # below a number or a list of 2 or 3, one per coordinate)
    parent = "ground"                # "ground" or a body
    child = "upper_left"
    origin = [-0.04, 0.0, 0.0]       # [m] in the parent frame
    axis = [0.0, 0.0, 1.0]           # parent frame
    home = -2.0                      # [rad | m]: the assembly mode (refined by Newton)
    actuated = true
    position_min = -3.0              # actuated joints: limits (optional) and drive (optional)
    position_max = 0.5
    velocity_max = 30.0
    torque_max = 4.0
    rotor_inertia = 1e-5             # [kg m^2], armature = rotor_inertia * gear_ratio^2
    gear_ratio = 1.0
    viscous = 0.001
    coulomb = 0.01

    [[loops]]                        # loop closures: point_a of body_a == point_b of body_b
    name = "knee"
    type = "revolute"                # planar: 2 equations; spatial: 3 + 2 (axes aligned);
                                     # "spherical" (spatial): 3 equations
    body_a = "lower_left"
    point_a = [0.2, 0.0, 0.0]
    body_b = "lower_right"
    point_b = [0.2, 0.0, 0.0]
    # axis_a, axis_b (spatial revolute): the joint axis in each body's frame

    [task]
    body = "lower_left"
    point = [0.2, 0.0, 0.0]
    coordinates = ["x", "y"]          # in this order: "x", "y", "phi" (planar) or
                                      # "x", "y", "z", "alpha", "beta", "gamma" (spatial)
    # orientation = [0.0, 0.0, 0.0]  # spatial: the task frame in the body frame, Euler angles [rad]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._mechanism_derive import COORDINATES as MULTI_JOINTS
from ._mechanism_derive import EULER as _EULER
from .base import GEAR_RATIO_RANGE, POSE_HINT_METHODS, DriveParams, JointLimits, ParallelModel, SingularityReport
from .config import Section
from .errors import ConfigError, ConvergenceError, ModelError, SingularityError, UnreachableError

__all__ = ["MechanismModel", "load_mechanism", "MechanismSpec", "TASK_COORDINATES"]

#: the task coordinates a file may list (any subset, in this order): a point's components [m]
#: and the task frame's rotation, planar ``phi`` about z, spatial the Euler angles [rad] of
#: ``R_base_task = Rz(gamma) Ry(beta) Rx(alpha)`` (:func:`dynamics.stewart.rotation_matrix`)
TASK_COORDINATES = {"planar": ("x", "y", "phi"), "spatial": ("x", "y", "z", "alpha", "beta", "gamma")}
#: the task layouts (:attr:`dynamics.base.ParallelModel.task_layout`) of the coordinate lists
#: that have one (the others: None)
_LAYOUTS = {("x", "y", "phi"): "planar", ("x", "y", "z"): "point", ("x", "y"): "planar_point",
            ("x", "y", "z", "alpha", "beta", "gamma"): "spatial", ("alpha", "beta", "gamma"): "orientation"}

#: below this |cos| of the task's beta a singular report or an unreached pose says that the
#: task's Euler angles are at their singularity
EULER_NOTE_MEASURE = 0.05

#: Newton tolerance of every closure solve [m]
NEWTON_TOL = 1e-12
NEWTON_ITER = 50

_F64 = np.dtype(np.float64)
_ND = np.ndarray
# status codes of the entry kernels (dynamics._mechanism_runtime)
_ST_OK, _ST_NOFK, _ST_NOIK, _ST_TYPE2, _ST_SINGULAR, _ST_BADINPUT = range(6)


def _model_array(k, p, act, pas, step_act, step_task, arm, sign2, sign1, home) -> np.ndarray:
    """The one array ``D`` the entry kernels take (layout in :mod:`dynamics._mechanism_runtime`):
    the parameters, the constants, the home configuration, the two warm starts (= home), the
    velocity map at the warm start (zeros: not known yet), the Euler rows of the task and the
    sizes of the generated module ``k``."""
    from ._mechanism_runtime import layout_of

    D = np.concatenate([p, np.asarray(act, float), np.asarray(pas, float), step_act, step_task, arm,
                        [sign2, sign1, NEWTON_TOL, NEWTON_ITER], home, home, home,
                        np.zeros(len(home) * len(act)), np.asarray(k.T_WRAP, float),
                        [k.N_Z, k.N_C, k.N_A, k.N_T, k.N_P]]).astype(float)
    size = layout_of(k.N_Z, k.N_C, k.N_A, k.N_T, k.N_P).D_SIZE
    if D.size != size:
        raise AssertionError(f"model array of {D.size} entries, the kernels' layout has {size}")
    return D


def _kernels(k):
    """(the entry kernels, their ``P`` for the generated module ``k``, the layout of its model
    array): :mod:`dynamics._mechanism_runtime` (its plain copy for plain functions, loaded while
    numba's JIT was disabled).

    Raises
    ------
    ModelError
        The generated functions do not compile for the entry kernels' types (a damaged or
        foreign generated file: deleting it derives it again), or numba's JIT was switched on or
        off between loading the generated module and the entry kernels.
    """
    from numba.core.errors import NumbaError

    from . import _mechanism_runtime as rt

    try:
        rt = rt.kernels(rt, plain=not hasattr(k.kin_w, "get_compile_result"))
    except RuntimeError as err:
        raise ModelError(str(err)) from err
    try:
        P = rt.addresses(k)
    except (NumbaError, TypeError, ValueError) as err:
        raise ModelError(f"the generated mechanism file {k.__file__} does not compile for the mechanism kernels "
                         f"(delete it to derive it again): {type(err).__name__}: {err}") from err
    return rt, P, rt.layout_of(k.N_Z, k.N_C, k.N_A, k.N_T, k.N_P)


@dataclass(frozen=True)
class MechanismSpec:
    """The parsed file: the derivation's input (``symbolic``), the inertial parameters and the
    rest of the model's data."""

    symbolic: dict           # see dynamics._mechanism_derive
    params: np.ndarray       # (10 * bodies,) m, (unused 3), Ixx Iyy Izz Ixy Iyz Izx per body
    actuated: tuple          # indices of the actuated joints in the tree order
    joint_names: tuple       # all joints, tree order
    joint_types: tuple
    home: np.ndarray         # full configuration (n,), refined
    limits: JointLimits
    drive: DriveParams
    singularity_tolerance: float
    length_scale: float
    name: str
    euler: tuple = ()        # (spherical joint name, index in z of its middle Euler angle)


def _ro(a):
    a = np.array(a, dtype=float)
    a.setflags(write=False)
    return a


class MechanismModel(ParallelModel):
    """A closed-chain (or serial) mechanism from a robot file; see the module docstring.

    Parameters
    ----------
    spec : MechanismSpec
    generated : dynamics._mechanism_derive.Generated, optional
        The compiled functions (derived or loaded from the cache when not given).
    source : str, optional
    """

    family = "mechanism"
    pose_hint_methods = POSE_HINT_METHODS

    def __init__(self, spec: MechanismSpec, generated=None, source: str | None = None):
        from ._mechanism_derive import compile_lock, derive, digest_of

        if generated is None:       # (a copy in another process: see load_mechanism's lock)
            with compile_lock(digest_of(spec.symbolic)):
                self._build(spec, derive(spec.symbolic), source)
        else:
            self._build(spec, generated, source)

    def _build(self, spec: MechanismSpec, generated, source: str | None) -> None:
        self.spec = spec
        self.name = spec.name
        self.source = source
        self.generated = generated
        f = self.generated.funcs
        self._f = f
        self._p = np.array(spec.params, dtype=float)
        n = len(spec.joint_names)
        self._n = n
        self._act = np.array(spec.actuated, dtype=int)
        self._pas = np.array([i for i in range(n) if i not in set(spec.actuated)], dtype=int)
        self._na = len(self._act)
        self._m = len(f["phi"](spec.home))
        self._nt = len(f["task"](spec.home))
        self._arm = np.zeros(n)
        self._arm[self._act] = spec.drive.armature
        self._tol = spec.singularity_tolerance
        self._ls = spec.length_scale
        self._rev = np.array([t != "prismatic" for t in spec.joint_types])      # angle coordinates
        tcoords = spec.symbolic["task"]["coordinates"]
        self._task_ang = np.array([c in ("phi",) + _EULER for c in tcoords])
        self._task_euler = any(c in _EULER for c in tcoords)
        self._beta = tcoords.index("beta") if "beta" in tcoords else None
        self._home_z = _ro(spec.home)
        self._home_sign2 = self._sign_det(self._B(spec.home))
        self._home_sign1 = self._sign_det(self._K(spec.home))
        self._k, self._P, self._L = _kernels(self.generated.kernels)
        # the kernels' array: parameters, constants, and the last forward / inverse kinematics
        # solutions, continued from by the next call (the kernels update them in place)
        self._D = _model_array(self.generated.kernels, self._p, self._act, self._pas, np.where(self._rev[self._act], 0.1, 0.01),
                               np.where(self._task_ang, 0.1, 0.01), self._arm, self._home_sign2,
                               self._home_sign1, spec.home)
        self._nowrench = np.zeros(n)
        self._zero_qd = np.zeros(self._na)
        self._nid = self._na + self._m + n        # the inverse dynamics kernel's [tau, lam, z]
        self.warm_up()

    def warm_up(self) -> None:
        """Load (from numba's cache) or compile every kernel the model's methods call, by calling
        each method once at the home configuration: done when the model is built, so that no
        compilation happens in a control cycle.  Afterwards the entry kernels of the fast paths
        compile no other signature (:meth:`_fast`)."""
        q, z0 = self.home_q, np.zeros(self._na)
        X, Xz = self.home_pose, np.zeros(self._nt)
        self.inverse_dynamics(q, z0, z0)
        self.inverse_dynamics_multipliers(q, z0, z0)
        self.forward_dynamics(q, z0, z0)
        self.inverse_configuration(X)
        self.inverse_configuration(X, guess=self._home_z.copy())
        self.inverse_kinematics(X)
        self.forward_kinematics_task(q)
        self.forward_kinematics(q)
        self.task_inverse_dynamics(X, Xz, Xz)
        self.singularity(q)
        self.task_jacobian(q)
        self.jacobian(q)
        self.coriolis_matrix(q, z0)
        self.mass_matrix(q)
        self.kinetic_energy(q, z0)
        self.potential_energy(q)
        self.constraints(self._home_z.copy())

    def __reduce__(self):
        # the generated functions do not pickle: a copy in another process (a tuning worker)
        # loads them from the code cache by the digest (or derives them again)
        return (MechanismModel, (self.spec, None, self.source))

    # ---------------------------------------------------------------- description
    @property
    def dof(self) -> int:
        return self._na

    @property
    def task_layout(self) -> str | None:
        return _LAYOUTS.get(tuple(self.spec.symbolic["task"]["coordinates"]))

    def task_rotation(self):
        """:func:`dynamics.stewart.rotation_matrix` for a task with the three Euler angles (x, y, z,
        alpha, beta, gamma, or alpha, beta, gamma alone): their convention; else None."""
        from .stewart import rotation_matrix
        return rotation_matrix if self.task_layout in ("spatial", "orientation") else None

    def task_rate_matrix(self):
        """:func:`dynamics.stewart.euler_rate_matrix` for the Euler angles (see :meth:`task_rotation`)."""
        from .stewart import euler_rate_matrix
        return euler_rate_matrix if self.task_layout in ("spatial", "orientation") else None

    @property
    def task_dof(self) -> int:
        return self._nt

    @property
    def joint_names(self) -> tuple:
        return tuple(self.spec.joint_names[i] for i in self._act)

    @property
    def joint_types(self) -> tuple:
        """"revolute" or "prismatic" per actuated coordinate: each coordinate of an actuated
        universal or spherical joint is driven as a revolute joint (its own motor)."""
        return tuple("prismatic" if self.spec.joint_types[i] == "prismatic" else "revolute" for i in self._act)

    @property
    def all_joint_names(self) -> tuple:
        """Every tree joint, in the order of the full configuration z."""
        return tuple(self.spec.joint_names)

    @property
    def limits(self) -> JointLimits:
        return self.spec.limits

    @property
    def drive(self) -> DriveParams:
        return self.spec.drive

    @property
    def gravity_vector(self) -> np.ndarray:
        return np.array(self.spec.symbolic["gravity"], dtype=float)

    @property
    def home_configuration(self) -> np.ndarray:
        """The full home configuration z (n,), closures solved (assembly mode of the file)."""
        return self._home_z.copy()

    @property
    def home_q(self) -> np.ndarray:
        return self._home_z[self._act].copy()

    @property
    def home_pose(self) -> np.ndarray:
        return self._f["task"](self._home_z)

    @property
    def singularity_tolerance(self) -> float:
        return self._tol

    @property
    def derivation_seconds(self) -> float:
        """Time the symbolic derivation and code generation took [s] (0 when loaded from the cache)."""
        return self.generated.derive_s

    def summary(self) -> str:
        s = super().summary()
        return s + (f"\n  tree joints: {', '.join(self.spec.joint_names)}  closures: {self._m} equations"
                    f"\n  task: {', '.join(self.spec.symbolic['task']['coordinates'])} of "
                    f"{self.spec.symbolic['task']['body']}"
                    f"\n  home pose: {np.array2string(self.home_pose, precision=4)}"
                    f"\n  generated code: {self.generated.path}")

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _sign_det(Mx) -> float:
        return float(np.sign(np.linalg.det(Mx))) if Mx.size else 1.0

    def _B(self, z):
        return self._f["phi_q"](z)[:, self._pas]

    def _K(self, z):
        return np.vstack([self._f["phi_q"](z), self._f["task_q"](z)])

    def _vec(self, x, k, what):
        a = np.asarray(x, dtype=float)
        if a.shape != (k,):
            raise ModelError(f"{self.name}: {what} must have shape ({k},), got {a.shape}")
        if not np.isfinite(a).all():
            raise ModelError(f"{self.name}: {what} must be finite, got {a}")
        return a

    @staticmethod
    def _fast(kernel, *args) -> bool:
        """Whether ``kernel(*args)`` ran and returned status 0: the fast path of a call with
        numpy arrays.  The entry kernels compile no new signature after the model's warm-up, so
        arrays of another kind (read-only, strided, 2-D, not float64) raise TypeError in the
        dispatch and take the slow path, as does any status (which the slow path raises)."""
        try:
            return kernel(*args) == 0
        except TypeError:
            return False

    def _arr(self, x, k, what):
        """x as a contiguous, writeable float64 (k,) array, the one array type the kernels are
        compiled for (finiteness is the kernels' check)."""
        if (type(x) is np.ndarray and x.dtype == _F64 and x.shape == (k,) and x.flags.c_contiguous
                and x.flags.writeable):
            return x
        a = np.array(x, dtype=float)
        if a.shape != (k,):
            raise ModelError(f"{self.name}: {what} must have shape ({k},), got {a.shape}")
        return a

    def _raise(self, st, what, inputs):
        """The error of a kernel's status ``st`` (dynamics._mechanism_runtime)."""
        if st == _ST_BADINPUT:
            for x, k, nm in inputs:
                self._vec(x, k, nm)
        if st == _ST_NOFK:
            raise ConvergenceError(f"{self.name}: forward kinematics: no configuration of the home "
                                   f"assembly mode at q={np.asarray(inputs[0][0]).tolist()}")
        if st == _ST_NOIK:
            X = np.asarray(inputs[0][0], dtype=float)
            cb = ([abs(math.cos(X[self._beta]))] if self._beta is not None and np.isfinite(X).all() else [])
            note = f" ({self._task_euler_note(cb[0])})" if cb and cb[0] < EULER_NOTE_MEASURE else ""
            raise UnreachableError(f"{self.name}: inverse kinematics: pose X="
                                   f"{X.tolist()} not reached in the home working mode{note}")
        if st == _ST_TYPE2:
            raise SingularityError(f"{self.name}: {what}: type-2 singularity (passive closure Jacobian "
                                   f"singular) at q={np.asarray(inputs[0][0]).tolist()}{self._euler_note()}")
        raise ModelError(f"{self.name}: {what}: singular {'mass matrix' if st == _ST_SINGULAR else 'input'} "
                         f"(status {st})")

    def _euler_note(self) -> str:
        """The spherical joint nearest its Euler-angle singularity at the last forward
        kinematics solution, when it is near (|cos| of the middle angle below 0.05)."""
        passive = [(jn, i) for jn, i in self.spec.euler if i not in self.spec.actuated]
        if not passive:
            return ""
        zl = self._D[self._L.O_WARM:self._L.O_WARM + self._n]
        c, jn = self._euler_measure(zl, passive)
        return (f" (spherical joint {jn!r} near its Euler-angle singularity: |cos| of the middle angle "
                f"{c:.3g}; choose its axes so that the motion stays away from it)") if c < 0.05 else ""

    def configuration(self, q, pose=None) -> np.ndarray:
        """Full configuration z (n,) for actuated q (forward kinematics in the home assembly mode).

        ``pose`` is accepted for the interface of the parallel models (a task pose hint) and not
        needed: the continuation starts from the last solution.

        Raises
        ------
        ConvergenceError
            When no configuration in the home assembly mode is found (q outside the workspace,
            or the straight path from the last and the home configuration meets a type-2
            singularity).
        """
        z = np.empty(self._n)
        if type(q) is _ND and self._fast(self._k.configuration, self._P, self._D, q, z):
            return z
        qa = self._arr(q, self._na, "q")
        st = self._k.configuration(self._P, self._D, qa, z)
        if st:
            self._raise(st, "forward kinematics", [(q, self._na, "q")])
        return z

    def inverse_configuration(self, X, guess=None) -> np.ndarray:
        """Full configuration z (n,) for the task pose X, by Newton on the closures and the task
        equations; ``guess`` (a full configuration, n,) chooses the working mode explicitly
        (default: the home configuration's, by continuation).

        Raises
        ------
        UnreachableError
            No configuration of that working mode reaches X.
        """
        Xa = self._arr(X, self._nt, "X")
        z = np.empty(self._n)
        if guess is not None:
            z0 = self._vec(guess, self._n, "guess (a full configuration)")
            self._vec(Xa, self._nt, "X")
            st = _ST_OK if self._k.newton_ik(self._P, Xa, np.array(z0), self._D, z) else _ST_NOIK
        else:
            st = self._k.inverse_configuration(self._P, self._D, Xa, z)
        if st:
            self._raise(st, "inverse kinematics", [(X, self._nt, "X")])
        return z

    def _batch(self, fn, arrays, width, pose=None, out_shape=()):
        arrs = [np.asarray(a, dtype=float) for a in arrays]
        N = arrs[0].shape[0]
        out = np.empty((N,) + out_shape)
        P = None if pose is None else np.asarray(pose, dtype=float)
        for j in range(N):
            out[j] = fn(*(a[j] for a in arrs), pose=None if P is None else P[j])
        return out

    # ---------------------------------------------------------------- kinematics
    def inverse_kinematics(self, X, guess=None) -> np.ndarray:
        """Actuated coordinates for the task pose X, shape (n,) or (N, n); see
        :meth:`inverse_configuration`."""
        if guess is None and type(X) is _ND:
            q = np.empty(self._na)
            if self._fast(self._k.inverse_q, self._P, self._D, X, q):
                return q
        Xa = np.asarray(X, dtype=float)
        if Xa.ndim == 2:
            return np.array([self.inverse_kinematics(x, guess) for x in Xa]).reshape(-1, self._na)
        return self.inverse_configuration(Xa, guess)[self._act]

    def forward_kinematics_task(self, q, guess=None) -> np.ndarray:
        """Task pose X for actuated q (shape (n,) or (N, n)); ``guess`` accepted for the
        interface (see :meth:`configuration`)."""
        if type(q) is _ND:
            X = np.empty(self._nt)
            if self._fast(self._k.forward_task, self._P, self._D, q, X):
                return X
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return np.array([self.forward_kinematics_task(x) for x in qa]).reshape(-1, self._nt)
        return self._f["task"](self.configuration(qa))

    def forward_kinematics(self, q, pose=None) -> np.ndarray:
        """T_base_task (4, 4) or (N, 4, 4): the task body's rotation, origin at the task point."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.forward_kinematics, [qa], 0, pose, (4, 4))
        fr = self._f["frame"](self.configuration(qa, pose))
        T = np.eye(4)
        T[:3, :3] = fr[:9].reshape(3, 3)
        T[:3, 3] = fr[9:]
        return T

    def body_frames(self, z) -> dict[str, np.ndarray]:
        """World poses T_base_body (4, 4) of every body frame at the full configuration ``z`` (n,),
        by composing the tree's joint motions in numpy (the derivation's kinematics: revolute
        ``Rot(axis, z_i)`` about the joint origin, prismatic ``origin + z_i axis``, universal and
        spherical ``Rot(a1, z_i) Rot(a2, z_i+1) (Rot(a3, z_i+2))``); ``"ground"`` is the identity.
        """
        from .mjcf import _axis_angle

        zf = self._vec(z, self._n, "z")
        frames = {"ground": np.eye(4)}
        i = 0
        for jt in self.spec.symbolic["joints"]:
            rel = np.eye(4)
            rel[:3, 3] = jt["origin"]
            k = MULTI_JOINTS.get(jt["type"], 1)
            if jt["type"] in MULTI_JOINTS:
                R = np.eye(3)
                for a, angle in zip(jt["axes"], zf[i:i + k]):
                    R = R @ _axis_angle(a, float(angle))
                rel[:3, :3] = R
            elif jt["type"] == "revolute":
                rel[:3, :3] = _axis_angle(jt["axis"], float(zf[i]))
            else:
                rel[:3, 3] += zf[i] * np.asarray(jt["axis"], dtype=float)
            frames[jt["child"]] = frames[jt["parent"]] @ rel
            i += k
        return frames

    def stick_figure(self, q, pose=None):
        """The mechanism from the forward kinematics of all its coordinates (home assembly mode).

        Every body with mass is drawn as spokes from its frame origin (its joint) to the points it
        carries: its child joints' origins, its loop closure points and the task point; the ground
        as the polygon of its joints' origins and loop points.  A massless body reached by a
        prismatic joint is a virtual slider (the delta's platform coordinates): neither it nor its
        joint's motion is drawn; other massless bodies (a universal joint's cross) are drawn as
        the joint points they carry.  See :meth:`dynamics.base.Model.stick_figure`; ``tool`` is
        the task point (3,) [m], ``X`` the task pose.
        """
        sym = self.spec.symbolic
        z = self.configuration(q, pose)
        T = self.body_frames(z)
        massless = {b["name"] for b in sym["bodies"] if b.get("massless")}
        virtual = {jt["child"] for jt in sym["joints"] if jt["type"] == "prismatic" and jt["child"] in massless}

        def world(body, p):
            return T[body][:3, :3] @ np.asarray(p, dtype=float) + T[body][:3, 3]

        carried: dict[str, list[np.ndarray]] = {b: [] for b in T}
        for jt in sym["joints"]:
            if jt["child"] not in virtual:
                carried[jt["parent"]].append(T[jt["child"]][:3, 3].copy())
        for lp in sym["loops"]:
            carried[lp["body_a"]].append(world(lp["body_a"], lp["point_a"]))
            carried[lp["body_b"]].append(world(lp["body_b"], lp["point_b"]))
        tk = sym["task"]
        tool = world(tk["body"], tk["point"])
        carried[tk["body"]].append(tool)
        lines = []
        for body, pts in carried.items():
            if body in virtual:
                continue
            o = T[body][:3, 3]
            seq: list[np.ndarray] = [] if body == "ground" else [o]
            for p in pts:
                if all(np.linalg.norm(p - r) > 1e-12 for r in seq):
                    seq.append(p)
            if body == "ground":
                if len(seq) > 2:
                    seq.append(seq[0])
            elif len(seq) > 2:          # spokes from the joint: o p1 o p2 ...
                seq = [v for p in seq[1:] for v in (o, p)]
            if len(seq) >= 2:
                lines.append(np.vstack(seq))
        return lines, tool, self._f["task"](z)

    def constraints(self, z) -> np.ndarray:
        """Closure residuals phi(z), shape (m,) [m, or 1 for axis alignments]."""
        return self._f["phi"](self._vec(z, self._n, "z"))

    def constraint_jacobian(self, z) -> np.ndarray:
        """phi_z (m, n) at the full configuration z."""
        return self._f["phi_q"](self._vec(z, self._n, "z"))

    def _G(self, z):
        G = np.empty((self._n, self._na))
        if not self._k.velocity_map(self._P, self._D, z, G):
            raise SingularityError(f"{self.name}: type-2 singularity (passive closure Jacobian "
                                   f"singular) at z={z.tolist()}")
        return G

    def _z_of(self, q, X):
        """The full configuration at the consistent pair (q, X) (FK; X is the hint)."""
        return self.configuration(q, X)

    def task_jacobian(self, q, X=None) -> np.ndarray:
        """J_x (t, n) with Xd = J_x qd."""
        if type(q) is _ND and q.shape == (self._na,):
            J = np.empty((self._nt, self._na))
            if self._fast(self._k.task_jacobian, self._P, self._D, q, J):
                return J
        z = self._z_of(self._vec(q, self._na, "q"), X)
        G = self._G(z)
        return self._f["task_q"](z) @ G

    def jacobian(self, q, pose=None) -> np.ndarray:
        """Geometric Jacobian (6, n) or (N, 6, n) of the task body at the task point, base frame."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.jacobian, [qa], 0, pose, (6, self._na))
        z = self.configuration(qa, pose)
        G = self._G(z)
        return self._f["twist_q"](z) @ G

    def task_velocity(self, q, X, qd) -> np.ndarray:
        return self.task_jacobian(q, X) @ self._vec(qd, self._na, "qd")

    # ---------------------------------------------------------------- singularities
    def _scaled_K(self, z):
        K = self._K(z).copy()
        K[:, self._rev] *= self._ls
        rows = np.concatenate([self._closure_angle_rows(), self._task_ang])
        K[rows] *= self._ls
        return K

    def _closure_angle_rows(self):
        return np.asarray(self.spec.symbolic.get("angle_rows", [False] * self._m), dtype=bool)

    @staticmethod
    def _inv_cond(Mx):
        if Mx.size == 0:
            return 1.0
        if not np.isfinite(Mx).all():       # (the task's Euler angles at cos(beta) = 0 exactly)
            return 0.0
        s = np.linalg.svd(Mx, compute_uv=False)
        return float(s[-1] / s[0]) if s[0] > 0 else 0.0

    @staticmethod
    def _inv_conds(stack: np.ndarray) -> np.ndarray:
        """:meth:`_inv_cond` of each matrix of ``stack`` (N, r, c), in one SVD call (numpy's
        stacked SVD runs the same LAPACK routine on each matrix: the same numbers)."""
        N = stack.shape[0]
        if N == 0:
            return np.empty(0)
        if stack.shape[1] == 0 or stack.shape[2] == 0:
            return np.ones(N)
        finite = np.isfinite(stack).all(axis=(1, 2))
        safe = np.where(finite[:, None, None], stack, 0.0)
        s = np.linalg.svd(safe, compute_uv=False)
        out = np.zeros(N)
        ok = finite & (s[:, 0] > 0)
        out[ok] = s[ok, -1] / s[ok, 0]
        return out

    def singularity_margins(self, Q) -> np.ndarray:
        """:meth:`singularity`'s margin at each row of ``Q`` (N, na) [rad or m], the rows in order,
        for a path's check (an excitation's design evaluates thousands of them).

        The same numbers as ``[singularity(q).margin for q in Q]`` with the forward kinematics
        called row after row as that loop does (its continuation from the last solution), the
        singular-value ratios of all rows in one stacked SVD; the determinants and notes of
        :class:`SingularityReport` are not computed.

        Raises
        ------
        SingularityError
            At the first row whose kind is not ``"regular"`` (type 1, type 2 or both), naming
            it; the model's continuation is then where the loop, stopping there, leaves it.
        ConvergenceError
            When the forward kinematics of a row (with no singular row before it) fails, as
            :meth:`singularity` raises it.
        """
        Q = np.asarray(Q, dtype=float)
        if Q.ndim != 2 or Q.shape[1] != self._na:
            raise ModelError(f"{self.name}: Q must have shape (N, {self._na}), got {Q.shape}")
        N, n, m = Q.shape[0], self._n, self._m
        Z = np.empty((N, n))
        K = np.empty((N, m + self._nt, n))
        failed, err = N, None
        for k in range(N):
            try:
                Z[k] = self._z_of(self._vec(Q[k], self._na, "q"), None)
            except ModelError as e:
                failed, err = k, e
                break
            K[k] = self._K(Z[k])
        Ks = K[:failed].copy()
        Ks[:, :, self._rev] *= self._ls
        rows = np.concatenate([self._closure_angle_rows(), self._task_ang])
        Ks[:, rows] *= self._ls
        m1 = self._inv_conds(Ks)
        m2 = self._inv_conds(Ks[:, :m][:, :, self._pas])
        irregular = np.flatnonzero((m1 < self._tol) | (m2 < self._tol))
        if irregular.size:
            k = int(irregular[0])
            self._rewind_continuation(Z[k])
            raise SingularityError(f"{self.name}: singular (type-1 measure {m1[k]:.3g}, type-2 measure "
                                   f"{m2[k]:.3g}, tolerance {self._tol}) at row {k} of the path, q={Q[k].tolist()}")
        Jx = np.empty((failed, self._nt, self._na))
        for k in range(failed):
            try:
                G = self._G(Z[k])
            except SingularityError:
                self._rewind_continuation(Z[k])
                raise
            Jx[k] = K[k, m:] @ G
        if err is not None:
            raise err
        Jx[:, self._task_ang] *= self._ls
        Jx[:, :, self._rev[self._act]] /= self._ls
        return self._inv_conds(Jx)

    def _rewind_continuation(self, z) -> None:
        """The forward kinematics' last solution set to ``z`` (the state a row-by-row loop that
        stopped at z leaves; :func:`dynamics._mechanism_runtime._solve_ws`)."""
        k = self._L
        self._D[k.O_WARM:k.O_WARM + self._n] = z
        self._D[k.O_WARMG:k.O_WARMG + self._n * self._na] = 0.0

    def singularity(self, q, X=None) -> SingularityReport:
        """Singularity measures at (q, X) (see the module docstring for the rule)."""
        z = self._z_of(self._vec(q, self._na, "q"), X)
        K = self._scaled_K(z)
        Bs = K[:self._m][:, self._pas]
        m1 = self._inv_cond(K)
        m2 = self._inv_cond(Bs)
        t1, t2 = m1 < self._tol, m2 < self._tol
        kind = "both" if (t1 and t2) else "type1" if t1 else "type2" if t2 else "regular"
        margin = 0.0
        if kind == "regular":
            G = self._G(z)
            Jx = self._f["task_q"](z) @ G
            Jx[self._task_ang] *= self._ls
            Jx[:, self._rev[self._act]] /= self._ls
            margin = self._inv_cond(Jx)
        extra = {"type1_measure": m1, "type2_measure": m2}
        if self.spec.euler:
            extra["euler_measure"], extra["euler_joint"] = self._euler_measure(z)
        if self._task_euler:
            extra["task_euler_measure"] = c = self._task_euler_measure(z)
            if kind != "regular" and c < EULER_NOTE_MEASURE:
                extra["note"] = self._task_euler_note(c)
        return SingularityReport(kind=kind, det_a=float(np.linalg.det(self._K(z))),
                                 det_b=float(np.linalg.det(self._B(z))) if self._m else 1.0,
                                 cond_a=1.0 / m1 if m1 > 0 else math.inf,
                                 cond_b=1.0 / m2 if m2 > 0 else math.inf, margin=margin, extra=extra)

    def _task_euler_measure(self, z) -> float:
        """|cos(beta)| of the task frame at z (``hypot(R11, R21)``), 0 at the Euler angles'
        singularity (beta = +-pi/2), where alpha and gamma are not defined and the task
        Jacobian's angle rows grow like 1/cos(beta): the type-1 measure goes to 0 with it."""
        R = self._f["frame"](z)[:9]
        return float(math.hypot(R[0], R[3]))

    @staticmethod
    def _task_euler_note(c: float) -> str:
        return (f"the task's Euler angles (alpha, beta, gamma) are at their singularity: |cos(beta)| = "
                f"{c:.3g}, beta near +-pi/2 (a singularity of the coordinates, not of the mechanism: "
                "choose the task body's `orientation` offset so that the motion stays away from it)")

    def _euler_measure(self, z, joints=None) -> tuple[float, str]:
        """min |cos| of the spherical joints' middle Euler angles at z (of ``joints``, (name,
        index in z) pairs, default all), and the joint it belongs to: 0 at the singularity
        (middle angle +-pi/2, first and third axes aligned), where a passive joint's closure
        Jacobian loses rank with it (a type-2 report whose cause is the coordinates, not the
        mechanism), and an actuated joint's drives span two rotations only (type 1 when the
        task depends on them)."""
        c = [(abs(math.cos(z[i])), jn) for jn, i in (self.spec.euler if joints is None else joints)]
        return min(c)

    # ---------------------------------------------------------------- dynamics
    def _mass_from(self, dy):
        """M (n, n) with the armature, from the fused dynamics array ``dy`` (a view of it)."""
        k, n = self._L, self._n
        M = dy[k.O_DY_M:k.O_DY_B].reshape(n, n)
        M[np.diag_indices(n)] += self._arm
        return M

    def _state(self, q, qd, pose):
        """z, zd, G (zd = G qd), g0 (zdd = G qdd + g0) and the fused dynamics array
        ``dyn(z, zd)`` ([gamma, M, b, Lc], :mod:`dynamics._mechanism_runtime`) at the actuated
        state."""
        qa = self._arr(q, self._na, "q")
        qda = self._arr(qd, self._na, "qd")
        n = self._n
        z, zd, g0, G = np.empty(n), np.empty(n), np.empty(n), np.empty((n, self._na))
        dy = np.empty(self._L.DYN_SIZE)
        st = self._k.state(self._P, self._D, qa, qda, z, zd, G, g0, dy)
        if st:
            self._raise(st, "state", [(q, self._na, "q"), (qd, self._na, "qd")])
        return z, zd, G, g0, dy

    def closure_state(self, q, qd):
        """The full state at the actuated state (q, qd) (n,) each: ``z``, ``zd`` (N_Z,) each, the
        velocity map ``G`` (N_Z, n) with ``zd = G qd`` and ``g0`` (N_Z,) with ``zdd = G qdd + g0``."""
        z, zd, G, g0, _ = self._state(q, qd, None)
        return z, zd, G, g0

    def regressor_kinematics(self):
        """The generated body kinematics of the parameter regressor, ``rkin(z, zd) -> (bodies, 9 +
        6 N_Z + 6)`` (:func:`dynamics._mechanism_derive.derive_regressor`: derived on the first
        call, 10-60 s, or loaded from the code cache; kept by the model)."""
        if getattr(self, "_rkin", None) is None:
            from ._mechanism_derive import derive_regressor
            self._rkin = derive_regressor(self.spec.symbolic).funcs["rkin"]
        return self._rkin

    def _wrench_force(self, z, wrench):
        """Generalised force J_t^T w of a wrench on the task body (full coordinates)."""
        if wrench is None:
            return np.zeros(self._n)
        w = np.asarray(wrench, dtype=float)
        if w.shape == (6,):
            return self._f["twist_q"](z).T @ w
        if w.shape == (self._nt,) and np.isfinite(w).all():
            return self._f["task_q"](z).T @ w        # conjugate to the task coordinates
        raise ModelError(f"{self.name}: wrench must be a 6-vector or ({self._nt},) conjugate to the "
                         f"task coordinates, got shape {w.shape}")

    def _reduced(self, q, qd, pose):
        z, zd, G, g0, dy = self._state(q, qd, pose)
        # M and b at (z, zd): computed by the state kernel (its dyn array)
        M = self._mass_from(dy)
        b = dy[self._L.O_DY_B:self._L.O_DY_B + self._n]
        return G.T @ M @ G, G.T @ (M @ g0 + b), z, zd, G, g0, M, b

    def _fast_reduced(self, q, qd):
        """(G^T M G, G^T (M g0 + b)) by the compiled kernel for float arrays, or None (the
        checked path then runs and raises what it finds)."""
        na = self._na
        if type(q) is _ND and type(qd) is _ND and q.shape == (na,) and qd.shape == (na,):
            Mr, h = np.empty((na, na)), np.empty(na)
            if self._fast(self._k.reduced, self._P, self._D, q, qd, Mr, h):
                return Mr, h
        return None

    def mass_matrix(self, q, pose=None) -> np.ndarray:
        """Reduced inertia G^T M G, (n, n) or (N, n, n) [kg m^2]."""
        r = self._fast_reduced(q, self._zero_qd)
        if r is not None:
            return r[0]
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.mass_matrix, [qa], 0, pose, (self._na, self._na))
        return self._reduced(qa, np.zeros(self._na), pose)[0]

    def bias(self, q, qd, pose=None) -> np.ndarray:
        """h(q, qd) = C qd + g, shape like q [N m | N]."""
        r = self._fast_reduced(q, qd)
        if r is not None:
            return r[1]
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.bias, [qa, qd], 0, pose, (self._na,))
        return self._reduced(qa, qd, pose)[1]

    def gravity(self, q, pose=None) -> np.ndarray:
        r = self._fast_reduced(q, self._zero_qd)
        if r is not None:
            return r[1]
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.gravity, [qa], 0, pose, (self._na,))
        return self._reduced(qa, np.zeros(self._na), pose)[1]

    def coriolis_matrix(self, q, qd, pose=None) -> np.ndarray:
        """C_r(q, qd) with dM_r/dt - 2 C_r skew and C_r qd + g = h, (n, n) or (N, n, n)."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.coriolis_matrix, [qa, qd], 0, pose, (self._na, self._na))
        z, zd, G, g0, dy = self._state(qa, qd, pose)
        B = self._B(z)
        M = self._mass_from(dy)
        # C G: the velocity terms of Lagrange's equations are the quadratic form
        # b(z, zd) - g(z) = sum_jk c_ijk zd_j zd_k with the Christoffel symbols c_ijk symmetric in
        # j, k, so C(z, zd) v = sum_jk c_ijk v_j zd_k is its polarisation (exact, no dM/dz needed)
        bias = self._f["bias"]
        CG = np.empty_like(G)
        for j in range(self._na):
            CG[:, j] = 0.25 * (bias(z, zd + G[:, j], self._p) - bias(z, zd - G[:, j], self._p))
        Gd = np.zeros_like(G)
        if self._m:
            gam = self._f["phi_gamma"]
            for j in range(self._na):
                v = G[:, j]
                # d/dt(phi_z) v by polarisation of the quadratic form gamma(zd) = d/dt(phi_z) zd
                Pv = 0.25 * (gam(z, zd + v) - gam(z, zd - v))
                Gd[self._pas, j] = -np.linalg.solve(B, Pv)
        return G.T @ M @ Gd + G.T @ CG

    def inverse_dynamics(self, q, qd, qdd, wrench=None, pose=None) -> np.ndarray:
        """Actuator torques/forces (n,) or (N, n) for the actuated motion (and a wrench on the task
        body, 6-vector or conjugate to the task coordinates)."""
        if wrench is None and type(q) is _ND and type(qd) is _ND and type(qdd) is _ND:
            # :meth:`_fast` written out: a control cycle's call, without its extra frame
            tau = np.empty(self._na)
            try:
                if self._k.inverse_dynamics(self._P, self._D, q, qd, qdd, self._nowrench, tau) == 0:
                    return tau
            except TypeError:
                pass
        qa = q if type(q) is np.ndarray else np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda a, b, c, pose: self.inverse_dynamics(a, b, c, wrench, pose),
                               [qa, qd, qdd], 0, pose, (self._na,))
        return self._id(qa, qd, qdd, wrench)[:self._na]

    def inverse_dynamics_multipliers(self, q, qd, qdd, wrench=None, pose=None):
        """Torques and the closures' Lagrange multipliers.

        Returns
        -------
        tau : ndarray (n,) [N m | N]
        lam : ndarray (m,)
            Multipliers of ``phi`` in the sign of ``sympy``'s ``LagrangesMethod``
            (``M zdd + b + phi_z^T lam = S^T tau``): for a point closure, ``lam`` is the force
            [N] (base frame) that body_a exerts on body_b at the closure point.
        """
        out = self._id(q, qd, qdd, wrench)
        return out[:self._na], out[self._na:self._na + self._m]

    def _id(self, q, qd, qdd, wrench):
        """[tau (n,), lam (m,), z] of the entry kernel."""
        na = self._na
        qa, qda, qdda = self._arr(q, na, "q"), self._arr(qd, na, "qd"), self._arr(qdd, na, "qdd")
        wf = self._nowrench if wrench is None else self._wrench_force(self.configuration(qa), wrench)
        out = np.empty(self._nid)
        st = self._k.inverse_dynamics(self._P, self._D, qa, qda, qdda, wf, out)
        if st:
            self._raise(st, "inverse dynamics", [(q, na, "q"), (qd, na, "qd"), (qdd, na, "qdd")])
        return out

    def _full_id(self, z, zd, zdd, wrench):
        out = np.empty(self._na + self._m)
        z, zd, zdd = (np.ascontiguousarray(x, dtype=float) for x in (z, zd, zdd))
        st = self._k.full_id(self._P, self._D, z, zd, zdd, np.ascontiguousarray(self._wrench_force(z, wrench), dtype=float),
                             out)
        if st:
            self._raise(st, "inverse dynamics", [(z[self._act], self._na, "q")])
        return out[:self._na], out[self._na:]

    def task_inverse_dynamics(self, X, Xd, Xdd, wrench=None, *, full: bool = False, guess=None):
        """Actuator torques for a task motion (IK, then the full velocity and acceleration from
        ``[phi_z; task_z] zd = [0; Xd]`` and its time derivative).

        Returns ``tau`` (n,) or (N, n), or with ``full`` a dict of ``tau``, ``lam``, ``q``,
        ``qd``, ``qdd``, ``z``."""
        nt = self._nt
        if (wrench is None and not full and guess is None and type(X) is _ND and type(Xd) is _ND
                and type(Xdd) is _ND and X.shape == Xd.shape == Xdd.shape == (nt,)):
            out = np.empty(self._na + self._m)
            if self._fast(self._k.task_id, self._P, self._D, X, Xd, Xdd, self._nowrench, out):
                return out[:self._na]
        Xa = np.asarray(X, dtype=float)
        if Xa.ndim == 2:
            Xd = np.asarray(Xd, dtype=float); Xdd = np.asarray(Xdd, dtype=float)
            return np.array([self.task_inverse_dynamics(Xa[j], Xd[j], Xdd[j], wrench)
                             for j in range(Xa.shape[0])]).reshape(-1, self._na)
        Xd = self._vec(Xd, self._nt, "Xd"); Xdd = self._vec(Xdd, self._nt, "Xdd")
        z = self.inverse_configuration(Xa, guess)
        K = self._K(z)
        zd = np.linalg.solve(K, np.concatenate([np.zeros(self._m), Xd]))
        rhs = np.concatenate([-self._f["phi_gamma"](z, zd), Xdd - self._f["task_gamma"](z, zd)])
        zdd = np.linalg.solve(K, rhs)
        tau, lam = self._full_id(z, zd, zdd, wrench)
        if full:
            return {"tau": tau, "lam": lam, "q": z[self._act], "qd": zd[self._act],
                    "qdd": zdd[self._act], "z": z}
        return tau

    def forward_dynamics(self, q, qd, tau, wrench=None, pose=None) -> np.ndarray:
        """qdd (n,) or (N, n) solving M_r qdd = tau - h_r + G^T J_t^T w (closures re-solved: no drift)."""
        if wrench is None and type(q) is _ND and type(qd) is _ND and type(tau) is _ND:
            # :meth:`_fast` written out: a control cycle's call, without its extra frame
            qdd = np.empty(self._na)
            try:
                if self._k.forward_dynamics(self._P, self._D, q, qd, tau, self._nowrench, qdd) == 0:
                    return qdd
            except TypeError:
                pass
        qa = q if type(q) is np.ndarray else np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda a, b, c, pose: self.forward_dynamics(a, b, c, wrench, pose),
                               [qa, qd, tau], 0, pose, (self._na,))
        na = self._na
        qa, qda, ta = self._arr(qa, na, "q"), self._arr(qd, na, "qd"), self._arr(tau, na, "tau")
        wf = self._nowrench if wrench is None else self._wrench_force(self.configuration(qa), wrench)
        qdd = np.empty(na)
        st = self._k.forward_dynamics(self._P, self._D, qa, qda, ta, wf, qdd)
        if st:
            self._raise(st, "forward dynamics", [(q, na, "q"), (qd, na, "qd"), (tau, na, "tau")])
        return qdd

    # ---------------------------------------------------------------- energies
    def kinetic_energy(self, q, qd, pose=None):
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.kinetic_energy, [qa, qd], 0, pose)
        z, zd, *_ = self._state(qa, qd, pose)
        return float(self._f["kinetic"](z, zd, self._p) + 0.5 * np.sum(self._arm * zd * zd))

    def potential_energy(self, q, pose=None):
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.potential_energy, [qa], 0, pose)
        return float(self._f["potential"](self.configuration(qa, pose), self._p))

    # ---------------------------------------------------------------- variants
    def to_mjcf(self, q0=None):
        """This mechanism as MJCF (:func:`dynamics.mjcf.mechanism_mjcf`), assembled at ``q0``."""
        from .mjcf import mechanism_mjcf
        return mechanism_mjcf(self, q0)

    def scaled(self, mass_factor: float = 1.0, inertia_factor: float | None = None) -> "MechanismModel":
        """Copy with every body mass times ``mass_factor`` and inertia times ``inertia_factor``
        (default ``mass_factor``); the derived code is shared (the inertial values are parameters)."""
        if inertia_factor is None:
            inertia_factor = mass_factor
        if not (mass_factor >= 0 and inertia_factor >= 0 and math.isfinite(mass_factor)
                and math.isfinite(inertia_factor)):
            raise ModelError("scale factors must be finite and >= 0")
        p = self._p.reshape(-1, 10).copy()
        p[:, :4] *= mass_factor
        p[:, 4:] *= inertia_factor
        spec = MechanismSpec(**{**self.spec.__dict__, "params": p.ravel()})
        return MechanismModel(spec, self.generated, self.source)


# ----------------------------------------------------------------------------- loader
def _inertia(sec: Section, planar: bool) -> np.ndarray:
    """[Ixx, Iyy, Izz, Ixy, Iyz, Izx] about the com, checked physically consistent."""
    v = sec.raw("inertia")
    if planar and isinstance(v, (int, float)) and not isinstance(v, bool):
        izz = sec.float("inertia", minimum=0.0)
        return np.array([0.0, 0.0, izz, 0.0, 0.0, 0.0])
    I6 = sec.vector("inertia", 6)
    Ixx, Iyy, Izz, Ixy, Iyz, Izx = I6
    T = np.array([[Ixx, Ixy, Izx], [Ixy, Iyy, Iyz], [Izx, Iyz, Izz]])
    ev = np.linalg.eigvalsh(T)
    tol = 1e-12 * max(1.0, float(np.max(np.abs(ev))))
    if ev[0] < -tol:
        raise sec.error("inertia", f"not positive semi-definite (principal moments {ev.tolist()})")
    a, b, c = ev
    if a + b < c - tol:
        raise sec.error("inertia", f"principal moments {ev.tolist()} violate the triangle inequality "
                                   "(I1 + I2 >= I3): no rigid body has them")
    return I6


def _body(sec: Section, planar: bool):
    name = sec.str("name")
    if name == "ground":
        raise sec.error("name", "'ground' is the fixed base, not a body")
    mass = sec.float("mass", minimum=0.0)
    com = sec.vector("com", 3)
    I6 = _inertia(sec, planar)
    if mass == 0.0 and np.any(I6 != 0.0):
        raise sec.error("inertia", "a massless body cannot have rotational inertia")
    sec.finish()
    return name, mass, com, I6


def _unit(sec: Section, key: str) -> np.ndarray:
    a = sec.vector(key, 3)
    nrm = float(np.linalg.norm(a))
    if nrm < 1e-9:
        raise sec.error(key, "must be a non-zero vector")
    return a / nrm


#: a spherical joint's default Euler axes: z, then the new y, then the new x (ZYX, intrinsic)
SPHERICAL_AXES = ((0.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 0.0, 0.0))
#: the spherical joints' middle Euler angle at home must stay this far from +-pi/2 [rad]
EULER_HOME_MARGIN_RAD = 0.35
#: two axes of a universal or spherical joint count as orthogonal below this |cos| of their angle
ORTHOGONAL_TOL = 1e-9


def _multi_joint(sec: Section, jt: str, planar: bool) -> tuple[list, list]:
    """The ``axes`` (k, 3), unit and mutually orthogonal, parent frame, and the ``home`` values (k,)
    [rad] of a universal (k = 2) or spherical (k = 3) joint."""
    k = MULTI_JOINTS[jt]
    if planar:
        raise sec.error("type", f"a planar mechanism has no {jt} joints (revolute and prismatic only)")
    if jt == "spherical" and not sec.has("axes"):
        A = np.array(SPHERICAL_AXES)
    else:
        A = sec.matrix("axes", (k, 3))
        nrm = np.linalg.norm(A, axis=1)
        if np.any(nrm < 1e-9):
            raise sec.error("axes", "every axis must be a non-zero vector")
        A = A / nrm[:, None]
        for i in range(k):
            for j in range(i + 1, k):
                c = abs(float(A[i] @ A[j]))
                if c > ORTHOGONAL_TOL:
                    raise sec.error("axes", f"axes {i + 1} and {j + 1} are not orthogonal (|cos| = {c:.3g}); "
                                            f"a {jt} joint's axes are mutually orthogonal")
    h = sec.vector("home", k)
    return A.tolist(), h.tolist()


def _actuation(sec: Section, home: list) -> list[tuple[tuple, tuple]]:
    """Limits ``(position_min, position_max, velocity_max, torque_max)`` and drive ``(armature,
    viscous, coulomb)`` of each coordinate of an actuated joint whose home values are ``home``
    (k,): a revolute or prismatic joint's fields are numbers, a universal or spherical joint's a
    number (every coordinate) or a list of k (:meth:`Section.numbers`)."""
    k = len(home)
    inf = math.inf

    def get(key, default=None, **kw):
        if k == 1:
            v = sec.float(key, **({} if default is None else {"default": default}), **kw)
            return np.array([v])
        return sec.numbers(key, k, *(() if default is None else (default,)), **kw)

    pmin = get("position_min") if sec.has("position_min") else np.full(k, -inf)
    pmax = get("position_max") if sec.has("position_max") else np.full(k, inf)
    vmax = get("velocity_max", minimum=0.0, strict_min=True) if sec.has("velocity_max") else np.full(k, inf)
    tmax = get("torque_max", minimum=0.0, strict_min=True) if sec.has("torque_max") else np.full(k, inf)
    rotor = get("rotor_inertia", 0.0, minimum=0.0)
    gear = get("gear_ratio", 1.0, minimum=GEAR_RATIO_RANGE[0], maximum=GEAR_RATIO_RANGE[1])
    visc = get("viscous", 0.0, minimum=0.0)
    coul = get("coulomb", 0.0, minimum=0.0)
    which = (lambda i: "") if k == 1 else (lambda i: f"coordinate {i + 1}: ")
    for i, h in enumerate(home):
        if not pmin[i] < pmax[i]:
            raise sec.error("position_max", f"{which(i)}must exceed position_min ({pmin[i]} vs {pmax[i]})")
        if not pmin[i] <= h <= pmax[i]:
            raise sec.error("home", f"{which(i)}{h} outside [{pmin[i]}, {pmax[i]}]")
    return [((pmin[i], pmax[i], vmax[i], tmax[i]), (rotor[i] * gear[i] ** 2, visc[i], coul[i]))
            for i in range(k)]


def load_mechanism(root: Section, base_dir: str | Path | None = None) -> MechanismModel:
    """Build a :class:`MechanismModel` from a robot file (format in the module docstring).

    Raises
    ------
    ConfigError
        Naming the file and field: unknown or bad values, a tree that is not a tree, a loop that
        does not close at the home values, a mobility different from the number of actuated
        joints, redundant closures, a singular home configuration, non-physical inertias.
    """
    root.raw("type")
    name = root.str("name", "mechanism")
    planar = root.bool("planar", False)
    gravity = root.vector("gravity", 3)
    # below 1e-9 (a condition number of 1e9) the singularity rule would never fire: refused
    tol = root.float("singularity_tolerance", 1e-6, minimum=1e-9, maximum=0.5)
    gap_tol = root.float("closure_tolerance", 1e-3, minimum=0.0, strict_min=True, maximum=1.0)

    bodies = []
    for sec in root.sections("bodies"):
        bodies.append((sec,) + _body(sec, planar))
    names = [b[1] for b in bodies]
    for i, nm in enumerate(names):
        if nm in names[:i]:
            raise bodies[i][0].error("name", f"body {nm!r} defined twice")

    jsecs = root.sections("joints")
    if not jsecs:
        raise root.error("joints", "at least one joint is required")
    joints, home, act, limits, drive, jnames, jtypes = [], [], [], [], [], [], []
    tree_names = []
    euler = []          # (spherical joint, index of its middle Euler angle in z)
    placed = {"ground"}
    for i, sec in enumerate(jsecs):
        jn = sec.str("name")
        if jn in tree_names:
            raise sec.error("name", f"joint {jn!r} defined twice")
        tree_names.append(jn)
        jt = sec.str("type", choices=["revolute", "prismatic", "universal", "spherical"])
        parent = sec.str("parent")
        child = sec.str("child")
        if parent not in placed:
            raise sec.error("parent", f"{parent!r} is not 'ground' or a body placed by an earlier joint "
                                      "(list parents before children)")
        if child not in names:
            raise sec.error("child", f"{child!r} is not a body (bodies: {names})")
        if child in placed:
            raise sec.error("child", f"body {child!r} already has a parent joint (a tree: one each; "
                                     "close loops with [[loops]])")
        placed.add(child)
        origin = sec.vector("origin", 3)
        first = len(home)
        if jt in MULTI_JOINTS:
            axes, hs = _multi_joint(sec, jt, planar)
            jnames += [f"{jn}.{k + 1}" for k in range(len(hs))]
            joints.append({"type": jt, "parent": parent, "child": child,
                           "origin": origin.tolist(), "axes": axes})
            if jt == "spherical":
                euler.append((sec, jn, first + 1))
        else:
            axis = _unit(sec, "axis")
            if planar and jt == "revolute" and abs(abs(axis[2]) - 1.0) > 1e-12:
                raise sec.error("axis", "a planar mechanism's revolute axes are +-z")
            if planar and jt == "prismatic" and abs(axis[2]) > 1e-12:
                raise sec.error("axis", "a planar mechanism's prismatic axes lie in the xy plane")
            hs = [sec.float("home")]
            jnames.append(jn)
            joints.append({"type": jt, "parent": parent, "child": child,
                           "origin": origin.tolist(), "axis": axis.tolist()})
        if sec.bool("actuated", False):
            # each coordinate of the joint an actuated coordinate of q, in file order
            for k, (lim, drv) in enumerate(_actuation(sec, hs)):
                act.append(first + k)
                limits.append(lim)
                drive.append(drv)
        sec.finish()
        jtypes += [jt] * len(hs)
        home += hs
    dup = [nm for k, nm in enumerate(jnames) if nm in jnames[:k]]
    if dup:
        raise root.error("joints", f"coordinate name {dup[0]!r} twice (a universal or spherical joint "
                                   "'j' names its coordinates 'j.1', 'j.2'(, 'j.3'))")
    missing = [nm for nm in names if nm not in placed]
    if missing:
        raise root.error("joints", f"body {missing[0]!r} has no parent joint")
    if not act:
        raise root.error("joints", "no joint is actuated (set actuated = true)")

    known = set(names) | {"ground"}
    loops, angle_rows = [], []
    for sec in root.sections("loops", []):
        lt = sec.str("type", "revolute", choices=["revolute", "spherical"])
        if planar and lt == "spherical":
            raise sec.error("type", "a planar mechanism closes loops with revolute joints")
        sec.str("name", "")
        lp = {"type": lt}
        for k in ("body_a", "body_b"):
            b = sec.str(k)
            if b not in known:
                raise sec.error(k, f"{b!r} is not 'ground' or a body")
            lp[k] = b
        if lp["body_a"] == lp["body_b"]:
            raise sec.error("body_b", "a loop joins two different bodies")
        lp["point_a"] = sec.vector("point_a", 3).tolist()
        lp["point_b"] = sec.vector("point_b", 3).tolist()
        angle_rows += [False] * (2 if planar else 3)
        if lt == "revolute" and not planar:
            aa, ab = _unit(sec, "axis_a"), _unit(sec, "axis_b")
            e1 = np.cross(ab, [1.0, 0, 0] if abs(ab[0]) < 0.9 else [0, 1.0, 0])
            e1 /= np.linalg.norm(e1)
            lp["axis_a"] = aa.tolist()
            lp["perp_b"] = [e1.tolist(), np.cross(ab, e1).tolist()]
            angle_rows += [True, True]
        sec.finish()
        loops.append((sec, lp))

    tsec = root.section("task")
    tb = tsec.str("body")
    if tb not in names:
        raise tsec.error("body", f"{tb!r} is not a body")
    coords = tsec.raw("coordinates")
    allowed = list(TASK_COORDINATES["planar" if planar else "spatial"])
    if (not isinstance(coords, list) or not coords or any(c not in allowed for c in coords)
            or len(set(coords)) != len(coords)):
        other = [c for c in (coords if isinstance(coords, list) else []) if c in TASK_COORDINATES["spatial"]
                 + TASK_COORDINATES["planar"] and c not in allowed]
        why = (f" ({other[0]!r} is a {'spatial' if planar else 'planar'} mechanism's coordinate)"
               if other else "")
        raise tsec.error("coordinates", f"a list of distinct names out of {allowed}, got {coords!r}{why}")
    if coords != sorted(coords, key=allowed.index):
        raise tsec.error("coordinates", f"{coords!r}: list them in the order {allowed}")
    if len(coords) != len(act):
        raise tsec.error("coordinates", f"{len(coords)} task coordinates for {len(act)} actuated coordinates "
                                        "(they must be as many)")
    tpoint = tsec.vector("point", 3)
    toff = None
    if tsec.has("orientation"):
        if planar:
            raise tsec.error("orientation", "a planar mechanism's task frame is its body's (phi)")
        from .stewart import rotation_matrix
        toff = rotation_matrix(tsec.vector("orientation", 3)).tolist()
    tsec.finish()
    # joints on the path from the ground to the task body (for "phi")
    path, b = [], tb
    by_child = {j["child"]: k for k, j in enumerate(joints)}
    while b != "ground":
        k = by_child[b]
        path.append(k)
        b = joints[k]["parent"]

    origins = [np.linalg.norm(j["origin"]) for j in joints] + \
              [np.linalg.norm(lp["point_a"]) for _, lp in loops]
    nz = [o for o in origins if o > 1e-9]
    ls = root.float("length_scale", float(np.mean(nz)) if nz else 1.0, minimum=0.0, strict_min=True)

    symbolic = {"planar": planar, "gravity": gravity.tolist(), "joints": joints,
                "bodies": [{"name": b[1], "com": b[3].tolist(),
                            # a body without mass and inertia (a universal joint's cross, a
                            # slider) is left out of the derivation: part of its digest
                            "massless": bool(b[2] == 0 and not np.any(b[4]))} for b in bodies],
                "loops": [lp for _, lp in loops],
                "task": {"body": tb, "point": tpoint.tolist(), "coordinates": list(coords), "path": path[::-1],
                         **({"offset": toff} if toff is not None else {})},
                "angle_rows": angle_rows}
    params = np.zeros(10 * len(bodies))
    for k, b in enumerate(bodies):
        params[10 * k] = b[2]
        params[10 * k + 1:10 * k + 4] = b[2] * b[3]
        params[10 * k + 4:10 * k + 10] = b[4]
    lim = np.array(limits)
    drv = np.array(drive)
    spec = MechanismSpec(symbolic, params, tuple(act), tuple(jnames), tuple(jtypes), np.array(home),
                         JointLimits(lim[:, 0], lim[:, 1], lim[:, 2], lim[:, 3]),
                         DriveParams(drv[:, 0], drv[:, 1], drv[:, 2]), tol, ls, name,
                         tuple((jn, i) for _, jn, i in euler))

    # the spherical joints' Euler singularity (checked on the file's home values, before the
    # derivation: the refinement below moves them by about closure_tolerance at most)
    # (the same rule for an actuated one: there the singularity is its drives' own, the first
    # and third motor axes aligned, a type-1 loss of rank of the task map)
    for sec, jn, i in euler:
        if abs(math.cos(home[i])) < math.sin(EULER_HOME_MARGIN_RAD):
            what = ("its first and third drives' axes aligned" if i in act else
                    "the parametrisation's singularity")
            raise sec.error("home", f"the middle Euler angle {home[i]:.4g} rad of spherical joint {jn!r} is "
                                    f"within {EULER_HOME_MARGIN_RAD} rad of +-pi/2 at home ({what}: choose "
                                    "its axes so that home is far from it)")
    from ._mechanism_derive import compile_lock, derive, digest_of
    # one process at a time derives and compiles a mechanism (the others then load its caches)
    with compile_lock(digest_of(symbolic)):
        gen = derive(symbolic)
        f = gen.funcs
        z0 = np.array(home, dtype=float)
        n = len(home)
        m = len(angle_rows)
        # mobility and independence of the closures
        if n - m != len(act):
            raise root.error("joints", f"mobility {n} joint coordinates - {m} closure equations = {n - m}, "
                                       f"but {len(act)} coordinates are actuated (an actuated universal or "
                                       "spherical joint counts 2 or 3)")
        # each loop must close at the home values (to closure_tolerance)
        r = f["phi"](z0)
        row = 0
        for sec, lp in loops:
            k = 2 if planar else 3
            gap = float(np.linalg.norm(r[row:row + k]))
            if gap > gap_tol:
                raise sec.error(None, f"the loop does not close at the joints' home values: gap {gap:.4g} m "
                                      f"> closure_tolerance {gap_tol:g} m")
            row += k + (2 if (lp["type"] == "revolute" and not planar) else 0)
        if m:
            Pz = f["phi_q"](z0)
            sv = np.linalg.svd(Pz, compute_uv=False)
            if sv[-1] < 1e-9 * max(sv[0], 1.0):
                raise root.error("loops", f"redundant closures: {m} equations of rank "
                                          f"{int(np.sum(sv > 1e-9 * max(sv[0], 1.0)))} at the home values "
                                          "(remove the closure equations that repeat others)")
        spec0 = MechanismSpec(**{**spec.__dict__, "home": z0})
        # refine the home configuration (actuated values held) to the Newton tolerance
        pas = [i for i in range(n) if i not in set(act)]
        zh = np.empty(n)
        D = _model_array(gen.kernels, params, act, pas, np.zeros(len(act)), np.zeros(len(coords)), np.zeros(n), 0.0, 0.0, z0)
        rt, P, _ = _kernels(gen.kernels)
        if not rt.newton_passive(P, z0[list(act)], z0.copy(), D, zh):
            raise root.error("joints", "the closures cannot be solved near the home values (a type-2 "
                                       "singularity or a loop far from closing)")
        spec = MechanismSpec(**{**spec0.__dict__, "home": zh})
        try:
            model = MechanismModel(spec, gen, root.file)
            rep = model.singularity(model.home_q)
        except (ModelError, np.linalg.LinAlgError) as err:
            raise ConfigError(f"home configuration: {err}", root.file, "joints") from err
    if rep.kind != "regular":
        note = f": {rep.extra['note']}" if "note" in rep.extra else ""
        raise root.error("task" if note else "joints",
                         f"the home configuration is singular ({rep.kind}; type-1 measure "
                         f"{rep.extra['type1_measure']:.3g}, type-2 measure "
                         f"{rep.extra['type2_measure']:.3g}){note}")
    if model._task_euler:
        c = model._task_euler_measure(model.home_configuration)
        if c < math.sin(EULER_HOME_MARGIN_RAD):
            raise tsec.error("coordinates", f"the task's beta is within {EULER_HOME_MARGIN_RAD} rad of +-pi/2 at "
                                            f"home: {model._task_euler_note(c)}")
    Mr = model.mass_matrix(model.home_q)
    if np.min(np.linalg.eigvalsh(0.5 * (Mr + Mr.T))) <= 0:
        raise root.error("bodies", "the mass matrix is not positive definite at home (massless mechanism?)")
    return model
