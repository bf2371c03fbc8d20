"""Closed-form test models and helpers for the controller tests (plus checks of the models).

* :class:`Pend` -- one link, point mass ``m`` at ``l`` plus a rotor inertia ``Jr``,
  swinging in the vertical x-z plane (``q = 0`` horizontal, gravity -z).
* :class:`Arm2` -- two-link planar arm in the vertical plane, point masses at the
  link ends (textbook closed form).
* :class:`Arm2Task` -- Arm2 seen as a "parallel" model whose task pose is the
  tool position ``X = (x, z)`` (closed-form FK/IK/Jacobian), to exercise the
  task-space laws independently of the real parallel models.
* :class:`SineTraj` -- q_d(t) = a + b sin(w t) (a Trajectory).
* :class:`FaultyDriver` -- wraps a Driver and injects faults into its feedback.
"""

from __future__ import annotations

import numpy as np

from drivers.base import Driver, Feedback
from dynamics.base import JointLimits, Model, ParallelModel, SingularityReport
from dynamics.errors import CommsError, UnreachableError
from trajectories.base import Trajectory

G = 9.81


class Pend(Model):
    name = "pend"

    def __init__(self, m=1.2, l=0.4, Jr=0.01, tau_max=np.inf):
        self.m, self.l, self.Jr, self.tau_max = m, l, Jr, tau_max

    @property
    def dof(self):
        return 1

    @property
    def limits(self):
        return JointLimits(np.array([-3.0]), np.array([3.0]), np.array([20.0]), np.array([self.tau_max]))

    def mass_matrix(self, q):
        return np.array([[self.Jr + self.m * self.l ** 2]])

    def bias(self, q, qd):
        return np.array([self.m * G * self.l * np.cos(q[0])])

    def coriolis_matrix(self, q, qd):
        return np.zeros((1, 1))

    def kinetic_energy(self, q, qd):
        return 0.5 * (self.Jr + self.m * self.l ** 2) * qd[0] ** 2

    def potential_energy(self, q):
        return self.m * G * self.l * np.sin(q[0])

    def forward_kinematics(self, q):
        T = np.eye(4)
        T[0, 3], T[2, 3] = self.l * np.cos(q[0]), self.l * np.sin(q[0])
        return T

    def jacobian(self, q):
        J = np.zeros((6, 1))
        J[0, 0], J[2, 0], J[4, 0] = -self.l * np.sin(q[0]), self.l * np.cos(q[0]), -1.0
        return J

    def scaled(self, mass_factor=1.0, inertia_factor=None):
        return Pend(self.m * mass_factor, self.l, self.Jr, self.tau_max)


class Arm2(Model):
    name = "arm2"

    def __init__(self, m1=1.0, m2=0.8, l1=0.4, l2=0.3, Jr=(0.01, 0.01), tau_max=(200.0, 200.0),
                 q_lim=3.0, v_max=20.0):
        self.m1, self.m2, self.l1, self.l2 = m1, m2, l1, l2
        self.Jr = np.asarray(Jr, float)
        self.tau_max = np.asarray(tau_max, float)
        self.q_lim, self.v_max = q_lim, v_max

    @property
    def dof(self):
        return 2

    @property
    def limits(self):
        return JointLimits(np.full(2, -self.q_lim), np.full(2, self.q_lim), np.full(2, self.v_max),
                           self.tau_max.copy())

    def mass_matrix(self, q):
        c2 = np.cos(q[1])
        m1, m2, l1, l2 = self.m1, self.m2, self.l1, self.l2
        M11 = m1 * l1 ** 2 + m2 * (l1 ** 2 + l2 ** 2 + 2 * l1 * l2 * c2)
        M12 = m2 * (l2 ** 2 + l1 * l2 * c2)
        M22 = m2 * l2 ** 2
        return np.array([[M11, M12], [M12, M22]]) + np.diag(self.Jr)

    def coriolis_matrix(self, q, qd):
        s = self.m2 * self.l1 * self.l2 * np.sin(q[1])
        return np.array([[-s * qd[1], -s * (qd[0] + qd[1])], [s * qd[0], 0.0]])

    def gravity(self, q):
        c1, c12 = np.cos(q[0]), np.cos(q[0] + q[1])
        return G * np.array([self.m1 * self.l1 * c1 + self.m2 * (self.l1 * c1 + self.l2 * c12),
                             self.m2 * self.l2 * c12])

    def bias(self, q, qd):
        q, qd = np.asarray(q, float), np.asarray(qd, float)
        return self.coriolis_matrix(q, qd) @ qd + self.gravity(q)

    def kinetic_energy(self, q, qd):
        return 0.5 * qd @ self.mass_matrix(q) @ qd

    def potential_energy(self, q):
        s1, s12 = np.sin(q[0]), np.sin(q[0] + q[1])
        return G * (self.m1 * self.l1 * s1 + self.m2 * (self.l1 * s1 + self.l2 * s12))

    def tool(self, q):
        return np.array([self.l1 * np.cos(q[0]) + self.l2 * np.cos(q[0] + q[1]),
                         self.l1 * np.sin(q[0]) + self.l2 * np.sin(q[0] + q[1])])

    def jac2(self, q):
        s1, c1 = np.sin(q[0]), np.cos(q[0])
        s12, c12 = np.sin(q[0] + q[1]), np.cos(q[0] + q[1])
        return np.array([[-self.l1 * s1 - self.l2 * s12, -self.l2 * s12],
                         [self.l1 * c1 + self.l2 * c12, self.l2 * c12]])

    def forward_kinematics(self, q):
        T = np.eye(4)
        T[0, 3], T[2, 3] = self.tool(q)
        return T

    def jacobian(self, q):
        J = np.zeros((6, 2))
        J2 = self.jac2(q)
        J[0], J[2], J[4] = J2[0], J2[1], -1.0
        return J

    def scaled(self, mass_factor=1.0, inertia_factor=None):
        return type(self)(self.m1 * mass_factor, self.m2 * mass_factor, self.l1, self.l2, self.Jr, self.tau_max,
                          self.q_lim, self.v_max)


class Arm2Task(Arm2, ParallelModel):
    """Arm2 with task pose X = tool (x, z); elbow-up IK (q2 > 0).  Records the pose hints received."""

    name = "arm2task"
    pose_hint_methods = frozenset({"mass_matrix"})

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.hints = []

    @property
    def task_dof(self):
        return 2

    @property
    def home_pose(self):
        return self.tool(np.array([0.3, 1.2]))

    def mass_matrix(self, q, pose=None):
        if pose is not None:
            self.hints.append(np.array(pose))
        return Arm2.mass_matrix(self, q)

    def bias(self, q, qd, pose=None):
        return Arm2.bias(self, q, qd)

    def inverse_kinematics(self, X):
        x, z = X
        c2 = (x * x + z * z - self.l1 ** 2 - self.l2 ** 2) / (2 * self.l1 * self.l2)
        if abs(c2) > 1:
            raise UnreachableError("arm2task: out of reach")
        q2 = np.arccos(c2)
        q1 = np.arctan2(z, x) - np.arctan2(self.l2 * np.sin(q2), self.l1 + self.l2 * np.cos(q2))
        return np.array([q1, q2])

    def forward_kinematics_task(self, q, guess=None):
        return self.tool(q)

    def task_jacobian(self, q, X):
        return self.jac2(q)

    def task_inverse_dynamics(self, X, Xd, Xdd, wrench=None):
        q = self.inverse_kinematics(X)
        J = self.jac2(q)
        qd = np.linalg.solve(J, Xd)
        eps = 1e-7
        Jdot = (self.jac2(q + eps * qd) - self.jac2(q - eps * qd)) / (2 * eps)
        qdd = np.linalg.solve(J, np.asarray(Xdd) - Jdot @ qd)
        return Arm2.mass_matrix(self, q) @ qdd + Arm2.bias(self, q, qd)

    def singularity(self, q, X):
        d = float(np.linalg.det(self.jac2(q)))
        c = float(np.linalg.cond(self.jac2(q)))
        return SingularityReport("regular", 1.0, d, 1.0, c, 1.0 / c)


class SineTraj(Trajectory):
    """q_d = a + b sin(w t) on [0, T] (not at rest at the ends; fine for tracking tests)."""

    def __init__(self, a, b, w, T):
        self.a, self.b = np.asarray(a, float), np.asarray(b, float)
        self.w, self.T = float(w), float(T)

    @property
    def duration_s(self):
        return self.T

    @property
    def dim(self):
        return self.a.size

    def _eval(self, t):
        t = t[:, None]
        s, c = np.sin(self.w * t), np.cos(self.w * t)
        w = self.w
        return (self.a + self.b * s, self.b * w * c, -self.b * w ** 2 * s, -self.b * w ** 3 * c)


class FaultyDriver(Driver):
    """Wrap a driver; ``hook(k, fb) -> fb`` may alter the feedback of cycle k (0 = enable).

    ``comms_error_at``: raise CommsError on that cycle() call.  Records every
    command torque sent in ``sent`` and the calls in ``calls``.
    """

    def __init__(self, inner: Driver, hook=None, comms_error_at=None):
        self.inner, self.hook, self.comms_error_at = inner, hook, comms_error_at
        self.k = 0
        self.sent = []
        self.calls = []

    @property
    def n_joints(self):
        return self.inner.n_joints

    def _h(self, fb):
        return fb if self.hook is None else self.hook(self.k, fb)

    def enable(self):
        self.calls.append("enable")
        fb = self.inner.enable()
        return self._h(fb)

    def disable(self):
        self.calls.append("disable")
        self.inner.disable()

    def cycle(self, command):
        self.calls.append("cycle")
        self.sent.append(np.array(command.torque_nm, float))
        self.k += 1
        if self.comms_error_at is not None and self.k == self.comms_error_at:
            raise CommsError("injected bus error")
        return self._h(self.inner.cycle(command))

    def close(self):
        self.inner.close()


def replace_fb(fb: Feedback, **kw) -> Feedback:
    d = dict(t_s=fb.t_s, position_rad=fb.position_rad, velocity_rad_s=fb.velocity_rad_s, torque_nm=fb.torque_nm,
             fault=fb.fault, fresh=fb.fresh, enabled=fb.enabled, info=fb.info)
    d.update(kw)
    return Feedback(**d)


# ---------------------------------------------------------------------------
# checks of the test models themselves (so a wrong test model cannot hide a bug)
# ---------------------------------------------------------------------------

def _num_dM(model, q, qd, eps=1e-6):
    return (model.mass_matrix(q + eps * qd) - model.mass_matrix(q - eps * qd)) / (2 * eps)


def test_arm2_passivity_and_lagrange():
    rng = np.random.default_rng(1)
    m = Arm2()
    for _ in range(5):
        q, qd = rng.normal(size=2), rng.normal(size=2)
        N = _num_dM(m, q, qd) - 2 * m.coriolis_matrix(q, qd)
        assert np.allclose(N, -N.T, atol=1e-7)
        # gravity = dV/dq
        eps = 1e-6
        gnum = np.array([(m.potential_energy(q + eps * e) - m.potential_energy(q - eps * e)) / (2 * eps)
                         for e in np.eye(2)])
        assert np.allclose(gnum, m.gravity(q), atol=1e-6)
        # d/dt (T + V) = qd . tau along a motion with tau = 0: M qdd + h = 0
        qdd = np.linalg.solve(m.mass_matrix(q), -m.bias(q, qd))
        dT = qd @ m.mass_matrix(q) @ qdd + 0.5 * qd @ _num_dM(m, q, qd) @ qd
        dV = m.gravity(q) @ qd
        assert abs(dT + dV) < 1e-6


def test_arm2task_kinematics():
    m = Arm2Task()
    q = np.array([0.2, 1.0])
    X = m.forward_kinematics_task(q)
    assert np.allclose(m.inverse_kinematics(X), q)
    eps = 1e-7
    Jn = np.column_stack([(m.tool(q + eps * e) - m.tool(q - eps * e)) / (2 * eps) for e in np.eye(2)])
    assert np.allclose(Jn, m.task_jacobian(q, X), atol=1e-7)
    # task inverse dynamics agrees with joint-space inverse dynamics
    qd, qdd = np.array([0.3, -0.4]), np.array([1.0, 0.5])
    J = m.jac2(q)
    Jdot = (m.jac2(q + eps * qd) - m.jac2(q - eps * qd)) / (2 * eps)
    Xd, Xdd = J @ qd, J @ qdd + Jdot @ qd
    tau = m.task_inverse_dynamics(X, Xd, Xdd)
    assert np.allclose(tau, Arm2.mass_matrix(m, q) @ qdd + Arm2.bias(m, q, qd), atol=1e-5)
