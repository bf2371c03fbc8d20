"""The MuJoCo engine of the simulated plant: an independent physics engine behind the same drives.

:class:`MujocoPlant` is a :class:`~drivers.sim.plant.Plant` (the drive train, brakes, sensors and
clock are the plant's, shared with the numba engine) whose rigid-body dynamics are MuJoCo's
(PyPI ``mujoco``, the official bindings; imported only when a run chooses
``[driver.plant] engine = "mujoco"``).  The robot is MJCF: written from the robot file by
:mod:`dynamics.mjcf` (serial chains, the 3RRR and the Stewart platform as closed chains), or the
user's own file (``mjcf = "arm.xml"``).

What the engine does with the plant's drive train
-------------------------------------------------
* Each of the controller's joints is an MJCF joint of the same name that an actuator drives
  (``<motor joint="...">``); that actuator becomes the drive: joint-side torque (gear 1),
  the saturated command as its control, and the current-loop lag as MuJoCo's exact first-order
  filter (``dyntype="filterexact"``, ``dynprm`` = the lag), so a held command is stepped by
  MuJoCo's own loop (``mj_step(m, d, nstep)``) with no Python per step.  A drive-side PD
  command (MIT ``kp``/``kd``) is evaluated once per step in Python, as the numba engine does.
* Viscous friction is the joint's ``damping``, Coulomb friction its ``frictionloss`` (MuJoCo's
  soft friction constraint).  A holding brake adds its torque to ``frictionloss``; a brake that
  never slips (infinite torque) is a joint equality constraint that holds the joint where the
  brake engaged.
* Encoder quantisation, noise, torque noise, drive limits and watchdogs are the plant's and the
  emulated drives' (unchanged).

Loop closures are MuJoCo equality constraints: soft, so the loop opens by a small amount under
load (:data:`dynamics.mjcf.CLOSURE_SOLREF`).  The plant records the largest closure error [m] at
every ``advance_to`` (:meth:`MujocoPlant.closure_log`); a run writes it as the log column
``closure_m`` and a summary line.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dynamics.base import Model
from dynamics.errors import ConfigError, ModelError
from dynamics.mjcf import CLOSURE_SOLIMP, CLOSURE_SOLREF

from .plant import Plant

try:
    import mujoco
except ImportError as _err:          # pragma: no cover - the optional extra is missing
    raise ConfigError("engine = \"mujoco\" needs the mujoco package: pip install 'torqueloop[mujoco]'",
                      field="engine") from _err

__all__ = ["MujocoPlant", "Payload"]


def _as_slice(idx: np.ndarray):
    """``idx`` as a slice when it is a run of consecutive indices, else itself."""
    if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
        return slice(int(idx[0]), int(idx[0]) + len(idx))
    return idx

_INTEGRATOR = {"rk4": mujoco.mjtIntegrator.mjINT_RK4, "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
               "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT, "euler": mujoco.mjtIntegrator.mjINT_EULER}


#: the longest MuJoCo step [s]: ``dt_max_s / substeps`` when shorter
MAX_STEP_S = 5e-4


class Payload:
    """A rigid body fixed to the tool (serial arm) or the platform that the controller does not model.

    Parameters
    ----------
    mass_kg : float
        Mass [kg] (> 0).
    com_m : array_like, shape (3,)
        Centre of mass in the tool frame [m].
    inertia_kg_m2 : array_like, shape (3,)
        Principal moments of inertia about the centre of mass, tool-frame axes [kg m^2].
    """

    def __init__(self, mass_kg: float, com_m=(0.0, 0.0, 0.0), inertia_kg_m2=(0.0, 0.0, 0.0)):
        self.mass_kg = float(mass_kg)
        self.com_m = np.asarray(com_m, dtype=float)
        self.inertia_kg_m2 = np.asarray(inertia_kg_m2, dtype=float)
        if not (math.isfinite(self.mass_kg) and self.mass_kg > 0):
            raise ConfigError(f"must be finite and > 0, got {mass_kg!r}", field="payload.mass_kg")
        if self.com_m.shape != (3,) or not np.all(np.isfinite(self.com_m)):
            raise ConfigError(f"expected 3 finite numbers, got {com_m!r}", field="payload.com_m")
        if self.inertia_kg_m2.shape != (3,) or not np.all(np.isfinite(self.inertia_kg_m2)) \
                or np.any(self.inertia_kg_m2 < 0):
            raise ConfigError(f"expected 3 finite numbers >= 0, got {inertia_kg_m2!r}",
                              field="payload.inertia_kg_m2")


class MujocoPlant(Plant):
    """A :class:`~drivers.sim.plant.Plant` whose rigid-body dynamics MuJoCo integrates.

    Parameters
    ----------
    model : dynamics.Model
        The robot the MJCF is written from (without ``mjcf_path``), and the source of the
        plant's defaults (friction, torque limits) and of its joint names.
    mjcf_path : str or Path, optional
        The user's own MJCF file instead of the one written from ``model``: the controller's
        joints are matched by name, each must be driven by an actuator; any other joint is
        passive.
    solref, solimp : sequence of float, optional
        Softness of every equality constraint (loop closures) of the MJCF; default: the file's
        (the written MJCF's are :data:`dynamics.mjcf.CLOSURE_SOLREF` / ``CLOSURE_SOLIMP``).
    payload : Payload, optional
        A body fixed to the tool or the platform (the controller's model does not know it).
    payload_body : str, optional
        The MJCF body the payload is fixed to (default: the written MJCF's tool body; required
        with ``mjcf_path``).
    mass_factor, inertia_factor : float
        With ``mjcf_path``: every body's mass and inertia (the payload's excepted) times these
        (``inertia_factor`` default: ``mass_factor``); a written MJCF is written from the
        scaled model instead.
    integrator : {"rk4", "implicitfast", "implicit", "euler"}
        MuJoCo's integrator (default RK4, as the numba engine's).
    **kw
        The :class:`~drivers.sim.plant.Plant` parameters; the MuJoCo timestep is the plant's
        largest step ``dt_max_s / substeps``, at most :data:`MAX_STEP_S` (shortened so that
        every ``advance_to`` interval is a whole number of steps).

    Raises
    ------
    ConfigError
        The MJCF does not compile (MuJoCo's message), its joints do not match the model's, a
        controller joint has no actuator, or a closed chain is not assembled at ``q0``.
    """

    INTEGRATORS = tuple(_INTEGRATOR)

    def __init__(self, model: Model, *, mjcf_path=None, solref=None, solimp=None,
                 payload: Payload | None = None, payload_body: str | None = None,
                 mass_factor: float = 1.0, inertia_factor: float | None = None, **kw):
        n = model.dof
        self._mjcf_path = None if mjcf_path is None else Path(mjcf_path)
        q0 = np.asarray(kw.get("q0"), dtype=float)
        if self._mjcf_path is None:
            try:
                robot = model.to_mjcf(q0)
            except ModelError as err:
                raise ConfigError(f"cannot write the MJCF of {model.name} at q0: {err}", field="q0") from err
            spec = mujoco.MjSpec.from_string(robot.xml)
            self._tool_body = robot.tool_body if payload_body is None else payload_body
            self._tool_pos = np.array(robot.tool_pos)
            closures = robot.closures
        else:
            try:
                spec = mujoco.MjSpec.from_file(str(self._mjcf_path))
            except Exception as err:                 # MuJoCo's parser: ValueError with its message
                raise ConfigError(f"{self._mjcf_path}: MuJoCo cannot read it: {err}", field="mjcf") from err
            self._tool_body = payload_body
            self._tool_pos = np.zeros(3)
            closures = tuple(e.name for e in spec.equalities)
        names = list(model.joint_names)
        self._joint_names = tuple(names)
        self._drive_actuators(spec, names)
        if solref is not None or solimp is not None:
            for e in spec.equalities:
                if solref is not None:
                    e.solref = list(solref)
                if solimp is not None:
                    e.solimp = list(solimp)
        if payload is not None:
            self._add_payload(spec, payload)
        # a joint equality per actuated joint: the brake that never slips (inactive until engaged)
        for j in names:
            e = spec.add_equality()
            e.type = mujoco.mjtEq.mjEQ_JOINT
            e.name1 = j
            e.name = f"brake_{j}"
            e.active = False
            e.solref, e.solimp = list(CLOSURE_SOLREF), list(CLOSURE_SOLIMP)
        for j in names:
            # Coulomb friction and slipping brakes: MuJoCo's friction loss is a soft constraint that
            # lets a joint creep under a load below it; as stiff as the loop closures (see the README)
            jt = spec.joint(j)
            jt.solref_friction, jt.solimp_friction = list(CLOSURE_SOLREF), list(CLOSURE_SOLIMP)
        lag = float(kw.get("current_lag_s", 0.0) or 0.0)
        rk4 = kw.get("integrator", "rk4") == "rk4"
        for a in self._drives.values():
            self._set_drive(a, lag, rk4)
        spec.option.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
        try:
            m = spec.compile()
        except Exception as err:
            where = self._mjcf_path if self._mjcf_path is not None else f"the MJCF written from {model.name}"
            raise ConfigError(f"{where}: MuJoCo cannot compile it: {err}",
                              field="mjcf" if self._mjcf_path is not None else "engine") from err
        if self._mjcf_path is not None and (mass_factor != 1.0 or inertia_factor not in (None, 1.0)):
            scale = [b for b in range(1, m.nbody) if m.body(b).name != "payload"]
            m.body_mass[scale] *= mass_factor
            m.body_inertia[scale] *= mass_factor if inertia_factor is None else inertia_factor
        self._m = m
        self._d = mujoco.MjData(m)
        self._spec = spec
        ids = [m.joint(j).id for j in names]
        self._qadr = np.array([m.jnt_qposadr[i] for i in ids])
        self._vadr = np.array([m.jnt_dofadr[i] for i in ids])
        self._act = np.array([m.actuator(self._drives[j].name).id for j in names])
        self._brake_eq = np.array([m.equality(f"brake_{j}").id for j in names])
        self._closure_eq = np.array([m.equality(c).id for c in closures], dtype=int)
        # the closures' constraint rows when they are the MJCF's first equalities, all connects
        connect = mujoco.mjtEq.mjEQ_CONNECT
        self._closure_connect = bool(len(self._closure_eq)) and all(
            m.eq_type[e] == connect for e in self._closure_eq)
        first = np.array_equal(self._closure_eq, np.arange(len(self._closure_eq)))
        self._closure_rows = 3 * len(self._closure_eq) if (self._closure_connect and first) else 0
        # friction defaults: the MJCF's own for the user's file, else the robot file's (written in it)
        if self._mjcf_path is not None:
            if kw.get("viscous") is None:
                kw["viscous"] = m.dof_damping[self._vadr].copy()
            if kw.get("coulomb") is None:
                kw["coulomb"] = m.dof_frictionloss[self._vadr].copy()
        kw.setdefault("integrator", "rk4")
        super().__init__(model, **kw)
        # MuJoCo's constraints are as stiff as its step allows (solref >= two steps): a closed
        # chain needs short steps whatever the control rate (measured: the 3RRR at 200 Hz
        # diverges with 2.5 ms steps, runs with 1 ms and 0.5 ms ones)
        self._h_max = min(self._h_max, MAX_STEP_S)
        m.opt.integrator = _INTEGRATOR[self._integrator]
        m.opt.timestep = self._h_max
        m.dof_damping[self._vadr] = self._viscous
        self._has_pd_steps = False
        self._wrench = None
        self._tool_id = m.body(self._tool_body).id if self._tool_body is not None else -1
        d = self._d
        d.qpos[:] = m.qpos0
        d.qpos[self._qadr] = self._q
        d.qvel[:] = 0.0
        if np.any(self._qd != 0.0):
            if len(self._closure_eq):
                raise ConfigError("a closed chain starts at rest on the MuJoCo engine (qd0 = 0)", field="qd0")
            d.qvel[self._vadr] = self._qd
        #: rows (time, the closures' constraint residuals) after each advance, and how many
        self._closure_buf = np.empty((1024, 1 + max(1, self._closure_rows)))
        self._closure_n = 0
        self._brakes_changed()
        mujoco.mj_forward(m, d)
        err = self._closure_now()
        if err > 1e-6:
            raise ConfigError(f"the closed chain of {self._where(model)} is not assembled at q0: its loop closures "
                              f"are {err:.3g} m apart (write the MJCF in the pose the run starts in)",
                              field="q0")
        # the hot path's views: slices where the indices are contiguous, else index arrays
        self._qsel = _as_slice(self._qadr)
        self._vsel = _as_slice(self._vadr)
        self._asel = _as_slice(self._act)
        self._ctrl = d.ctrl[self._asel] if isinstance(self._asel, slice) else None
        self._neg = np.empty(self._n)
        self._warnings = [d.warning[int(w)] for w in (mujoco.mjtWarning.mjWARN_BADQACC,
                                                      mujoco.mjtWarning.mjWARN_BADQPOS,
                                                      mujoco.mjtWarning.mjWARN_BADQVEL)]
        self._warned = sum(w.number for w in self._warnings)
        self._sync()

    # -- construction -----------------------------------------------------------------------------
    def _where(self, model) -> str:
        return str(self._mjcf_path) if self._mjcf_path is not None else f"the MJCF written from {model.name}"

    def _drive_actuators(self, spec, names: list) -> None:
        """The actuator of each controller joint (``_drives``, by joint name); refuse joints that
        are missing or not driven, and actuators on joints the controller does not have."""
        joints = {j.name for j in spec.joints}
        where = str(self._mjcf_path) if self._mjcf_path is not None else "the written MJCF"
        missing = [j for j in names if j not in joints]
        if missing:
            raise ConfigError(f"{where}: no joint named {missing} (the controller's joints are {names}; "
                              f"the MJCF has {sorted(joints)})", field="mjcf")
        drives = {}
        for a in spec.actuators:
            if a.trntype != mujoco.mjtTrn.mjTRN_JOINT or a.target not in names:
                raise ConfigError(f"{where}: actuator {a.name or '(unnamed)'!r} drives "
                                  f"{a.target!r}, not one of the controller's joints {names} (the plant "
                                  f"drives only those; leave the others passive)", field="mjcf")
            if a.target in drives:
                raise ConfigError(f"{where}: joint {a.target!r} has two actuators", field="mjcf")
            if not a.name:
                a.name = f"drive_{a.target}"
            drives[a.target] = a
        undriven = [j for j in names if j not in drives]
        if undriven:
            raise ConfigError(f"{where}: joint(s) {undriven} have no actuator: add <motor joint=\"...\"/> "
                              f"for every joint the controller drives", field="mjcf")
        self._drives = drives

    @staticmethod
    def _set_drive(a, lag_s: float, rk4: bool) -> None:
        """Make actuator ``a`` a joint-side torque drive, lagged by ``lag_s`` [s] (0: none), for
        MuJoCo's RK4 integrator or another."""
        a.gear = [1.0, 0, 0, 0, 0, 0]
        a.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        a.gainprm = [1.0] + [0.0] * 9
        a.biastype = mujoco.mjtBias.mjBIAS_NONE
        a.biasprm = [0.0] * 10
        a.ctrllimited = 0
        a.forcelimited = 0
        if lag_s > 0.0:
            # MuJoCo's exact filter is exact in its Euler-type integrators; its RK4 steps the filter
            # wrongly (measured: 0.395 after one 0.5 ms step of a 0.4 ms lag, exact 0.7135), so under
            # RK4 the plain filter, which RK4 integrates like the rigid body (0.693 there)
            a.dyntype = mujoco.mjtDyn.mjDYN_FILTER if rk4 else mujoco.mjtDyn.mjDYN_FILTEREXACT
            a.dynprm = [lag_s] + [0.0] * 9
        else:
            a.dyntype = mujoco.mjtDyn.mjDYN_NONE

    def _add_payload(self, spec, p: Payload) -> None:
        if self._tool_body is None:
            raise ConfigError("a payload on the user's MJCF needs payload_body (the body it is fixed to)",
                              field="payload_body")
        body = spec.body(self._tool_body)
        if body is None:
            raise ConfigError(f"no body named {self._tool_body!r} to fix the payload to", field="payload_body")
        pb = body.add_body()
        pb.name = "payload"
        pb.pos = list(self._tool_pos + p.com_m)
        pb.mass = p.mass_kg
        pb.inertia = list(p.inertia_kg_m2)
        pb.explicitinertial = True

    # -- the engine --------------------------------------------------------------------------------
    @property
    def mj_model(self):
        """The compiled ``mujoco.MjModel`` (read it; the plant owns it)."""
        return self._m

    @property
    def mj_data(self):
        """The ``mujoco.MjData`` the plant steps (read it; the plant owns it)."""
        return self._d

    def _sync(self) -> None:
        """Point ``_q``, ``_qd``, ``_tau_applied`` at the actuated joints' state and applied torque
        in MuJoCo's data: views that follow every step where the indices are contiguous (set once),
        arrays refilled after each advance where they are not."""
        if getattr(self, "_views", None) is not None:
            for src, sel, dst in self._gather:
                np.take(src, sel, out=dst)
            return
        d = self._d
        tau = d.act if self._lag_s > 0.0 else d.ctrl
        self._q = d.qpos[self._qsel]
        self._qd = d.qvel[self._vsel]
        self._tau_applied = tau[self._asel]
        self._views = all(isinstance(x, slice) for x in (self._qsel, self._vsel, self._asel))
        # MjData's arrays are fixed buffers: the gathers of the fields that are not views
        self._gather = [(src, sel, dst) for src, sel, dst in ((d.qpos, self._qsel, self._q),
                                                              (d.qvel, self._vsel, self._qd),
                                                              (tau, self._asel, self._tau_applied))
                        if not isinstance(sel, slice)]

    def _brakes_changed(self) -> None:
        m, d = self._m, self._d
        lock = self._braked & np.isinf(self._brake_nm)
        slip = np.where(self._braked & ~lock, self._brake_nm, 0.0)
        m.dof_frictionloss[self._vadr] = self._coulomb + slip
        for j in range(self._n):
            e = self._brake_eq[j]
            if lock[j] and not d.eq_active[e]:
                # the joint is held where the brake engaged: q - qpos0 = data[0]
                m.eq_data[e, :] = 0.0
                m.eq_data[e, 0] = d.qpos[self._qadr[j]] - m.qpos0[self._qadr[j]]
            d.eq_active[e] = bool(lock[j])

    def _mass_diagonal(self) -> np.ndarray:
        m, d = self._m, self._d
        mujoco.mj_forward(m, d)
        full = np.zeros((m.nv, m.nv))
        try:
            mujoco.mj_fullM(m, d, full)            # mujoco >= 4
        except TypeError:
            mujoco.mj_fullM(m, full, d.qM)         # mujoco 3
        return np.diagonal(full)[self._vadr].copy()

    def _advance(self, t_s: float) -> float:
        span = t_s - self._t
        if span <= 0.0:
            return self._t
        n_steps = self._steps(span)
        m, d = self._m, self._d
        m.opt.timestep = span / n_steps
        if self._wrench is not None:
            self._apply_wrench()
        if not self._pd:
            # the held command, saturated, for MuJoCo's own loop (the lag is the actuator's filter)
            if self._ctrl is not None and self._saturate:
                np.minimum(self._tau_ff, self._tau_max, out=self._ctrl)
                np.maximum(self._ctrl, np.negative(self._tau_max, out=self._neg), out=self._ctrl)
            elif self._ctrl is not None:
                self._ctrl[:] = self._tau_ff
            else:
                d.ctrl[self._act] = self._command_torque(self._q, self._qd)
            mujoco.mj_step(m, d, n_steps)
        else:
            for _ in range(n_steps):
                d.ctrl[self._act] = self._command_torque(d.qpos[self._qadr], d.qvel[self._vadr])
                mujoco.mj_step(m, d)
        self._t = t_s
        if sum(w.number for w in self._warnings) != self._warned:
            # MuJoCo found a non-finite or huge position, velocity or acceleration and reset its state
            raise ModelError(f"MuJoCo's state became unstable at t={self._t:.6f} s (MuJoCo reset it): "
                             f"the plant cannot continue")
        if not self._views:
            self._sync()
        if len(self._closure_eq):
            self._record_closure()
        return self._t

    def _closure_now(self) -> float:
        """The largest loop-closure error [m] in MuJoCo's last constraint evaluation (0 without one):
        the largest distance of a ``connect`` constraint's two points, else the largest residual."""
        if not len(self._closure_eq):
            return 0.0
        d = self._d
        k = self._closure_rows
        if k and d.nefc >= k:
            # MuJoCo puts the equality rows first, in the order of the equalities: the closures
            # (written before the brakes' joint equalities)
            pos = d.efc_pos[:k]
        else:
            rows = (d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY) & np.isin(d.efc_id, self._closure_eq)
            pos = d.efc_pos[rows]
            if not pos.size:
                return 0.0
        if self._closure_connect:
            p = pos.reshape(-1, 3)
            return math.sqrt(float(np.max(np.einsum("ij,ij->i", p, p))))
        return float(np.max(np.abs(pos)))

    def _record_closure(self) -> None:
        """Keep the time and the closures' constraint residuals (the norms are taken when read)."""
        i = self._closure_n
        if i == len(self._closure_buf):
            grow = np.empty((max(1024, 2 * i), self._closure_buf.shape[1]))
            grow[:i] = self._closure_buf
            self._closure_buf = grow
        k = self._closure_rows
        if k and self._d.nefc >= k:
            row = self._closure_buf[i]
            row[0] = self._t
            row[1:] = self._d.efc_pos[:k]
        else:
            self._closure_buf[i, 0] = self._t
            self._closure_buf[i, 1:] = math.nan
            self._closure_buf[i, 1] = self._closure_now()
        self._closure_n = i + 1

    def closure_log(self) -> tuple[np.ndarray, np.ndarray]:
        """``(t_s, error_m)``, shape (k,) each: the loop-closure error after every ``advance_to``
        (MuJoCo's constraint residual at the start of the interval's last step: the largest
        distance of a ``connect`` constraint's points; empty for an open chain)."""
        with self._lock:
            buf = self._closure_buf[:self._closure_n]
            t, res = buf[:, 0].copy(), buf[:, 1:]
            direct = np.isnan(res[:, 1:]).all(axis=1) if res.shape[1] > 1 else np.ones(len(res), bool)
            err = np.empty(len(res))
            err[direct] = res[direct, 0]
            if (~direct).any():
                r = res[~direct]
                err[~direct] = (np.sqrt(np.max(np.sum(r.reshape(len(r), -1, 3) ** 2, axis=2), axis=1))
                                if self._closure_connect else np.max(np.abs(r), axis=1))
            return t, err

    @property
    def pose(self) -> np.ndarray | None:
        """The platform pose of a parallel robot from MuJoCo's platform body: ``(x, y, phi)`` of a
        3RRR, ``(x, y, z, alpha, beta, gamma)`` (``R = Rz Ry Rx``) of a Stewart platform, the task
        point's ``(x, y, z)`` or ``(x, y)`` (task layouts "point", "planar_point"); None for a
        serial arm."""
        from dynamics.base import ParallelModel
        if not isinstance(self._model, ParallelModel) or self._tool_id < 0:
            return None
        with self._lock:
            mujoco.mj_kinematics(self._m, self._d)
            R = self._d.xmat[self._tool_id].reshape(3, 3)
            p = self._d.xpos[self._tool_id] + R @ np.asarray(self._tool_pos, dtype=float)    # the task point
            if self._model.task_layout == "point":
                return p[:3].copy()
            if self._model.task_layout == "planar_point":
                return p[:2].copy()
            if self._model.task_layout == "planar":
                return np.array([p[0], p[1], math.atan2(R[1, 0], R[0, 0])])
            beta = math.asin(max(-1.0, min(1.0, -R[2, 0])))
            return np.array([p[0], p[1], p[2], math.atan2(R[2, 1], R[2, 2]), beta,
                             math.atan2(R[1, 0], R[0, 0])])

    def energy(self) -> float:
        """Kinetic + potential energy of MuJoCo's state [J] (armature included; gravity only)."""
        with self._lock:
            mujoco.mj_forward(self._m, self._d)
            return float(self._d.energy[0] + self._d.energy[1])

    def set_external_wrench(self, wrench) -> None:
        """Hold a wrench ``[f; m]`` (world frame, moment about the tool frame's origin) on the tool
        body; MuJoCo applies it at the body's centre of mass, the moment moved there at the start
        of every ``advance_to``."""
        with self._lock:
            if wrench is None:
                self._wrench = None
                if self._tool_id >= 0:
                    self._d.xfrc_applied[self._tool_id] = 0.0
                return
            w = np.asarray(wrench, dtype=float)
            if w.shape != (6,) or not np.all(np.isfinite(w)):
                from dynamics.errors import DriverError
                raise DriverError(f"expected a finite wrench of 6 values, got {wrench!r}")
            if self._tool_id < 0:
                from dynamics.errors import DriverError
                raise DriverError("the MJCF names no tool body for the wrench (payload_body)")
            self._wrench = w.copy()

    def _apply_wrench(self) -> None:
        d = self._d
        b = self._tool_id
        R = d.xmat[b].reshape(3, 3)
        p_tool = d.xpos[b] + R @ self._tool_pos
        f, mo = self._wrench[:3], self._wrench[3:]
        d.xfrc_applied[b, :3] = f
        d.xfrc_applied[b, 3:] = mo + np.cross(p_tool - d.xipos[b], f)
