"""The compiled call of the 3RRR task-space computed torque (``controller.laws``): its constants
in one tuple, its shape check in compiled code.  The call equals the kernel to the bit, a
mismatched shape runs no kernel and hands the step to the numpy path as before.

Parity tests (the call against the kernel, the compiled path against the numpy path). The
independent checks of the law's torques: ``test_ctrl_laws.py::test_task_ct_on_real_3rrr_tracks_exactly_without_delay``
(exact tracking of the matched plant) and
``test_ctrl_laws.py::test_task_ct_integral_removes_the_offset_of_a_heavier_plant``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller import _law_kernels as LK
from controller.laws import (_RRR_TCT_CONSTS, _ST_SHAPE, Ref, Saturation, State, TaskComputedTorque,
                             _rrr_task_computed_torque_call)
from dynamics import load_model

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


@pytest.fixture(scope="module")
def rrr():
    return load_model(ROBOTS / "3rrr_horizontal.toml")


def _outputs():
    """X, e, tau, mask, z_out, filled with sentinels (to see what a call wrote)."""
    return np.full(3, -7.0), np.full(3, -7.0), np.full(3, -7.0), np.ones(3, dtype=np.bool_), np.full(3, -7.0)


@pytest.mark.parametrize("ki", [None, 50.0])
@pytest.mark.parametrize("sat", [None, 0.5])
@pytest.mark.parametrize("friction", ["none", "measured"])
def test_call_equals_kernel_to_the_bit(rrr, ki, sat, friction):
    law = TaskComputedTorque(rrr, kp=1600.0, kd=80.0, ki=ki, integral_limit=0.01 if ki else None,
                             saturation=None if sat is None else Saturation(np.full(3, sat)), friction=friction)
    c = law.compiled_args
    assert c["checks_shapes"]
    assert all(x is c[k] for x, k in zip(c["consts"], _RRR_TCT_CONSTS))     # the same objects
    rng = np.random.default_rng(5)
    for _ in range(30):
        X = np.asarray(rrr.home_pose, float) + rng.normal(0, [0.01, 0.01, 0.05])
        q = np.asarray(rrr.inverse_kinematics(X), float)
        qd, pos, vel, acc, z = (rng.normal(0, s, 3) for s in (1.0, 0.01, 0.1, 1.0, 0.001))
        pose = X + rng.normal(0, 1e-3, 3)
        dt = float(rng.uniform(0.0, 0.002))
        a, b = _outputs(), _outputs()
        st_a = _rrr_task_computed_torque_call(c["consts"], q, qd, pose, X + pos, vel, acc, z, dt, *a)
        st_b = LK.rrr_task_computed_torque(c["P"], c["branch"], q, qd, pose, X + pos, vel, acc, c["kp"], c["kd"],
                                           c["ki"], c["has_ki"], z, dt, c["z_limit"], c["fric"], c["fmode"],
                                           c["has_sat"], c["sat_lim"], *b)
        assert st_a == st_b == 0
        for x, y in zip(a, b):
            assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("bad", ["q", "qd", "pos", "vel", "acc"])
@pytest.mark.parametrize("shape", [(4,), (2,), (3, 1)])
def test_mismatched_shape_runs_no_kernel(rrr, bad, shape):
    law = TaskComputedTorque(rrr, kp=1600.0, kd=80.0)
    X = np.asarray(rrr.home_pose, float)
    args = {"q": np.asarray(rrr.inverse_kinematics(X), float), "qd": np.zeros(3), "pos": X.copy(),
            "vel": np.zeros(3), "acc": np.zeros(3)}
    args[bad] = np.zeros(shape)
    out = _outputs()
    st = _rrr_task_computed_torque_call(law.compiled_args["consts"], args["q"], args["qd"], X, args["pos"],
                                        args["vel"], args["acc"], np.zeros(3), 0.0, *out)
    assert st == _ST_SHAPE
    for x, y in zip(out, _outputs()):
        assert x.tobytes() == y.tobytes()                               # nothing written


def test_law_with_mismatched_shape_takes_the_numpy_path(rrr):
    """A reference of the wrong size: the compiled call declines, the numpy law runs (and
    fails as it does without a compiled form); the law's pose is not moved."""
    a, b = TaskComputedTorque(rrr, kp=1600.0, kd=80.0), TaskComputedTorque(rrr, kp=1600.0, kd=80.0)
    b._compiled_args = lambda: None
    X = np.asarray(rrr.home_pose, float)
    state = State(0.0, np.asarray(rrr.inverse_kinematics(X), float), np.zeros(3))
    ref = Ref(np.zeros(4), np.zeros(4), np.zeros(4))
    pose0 = a.pose
    with pytest.raises(Exception) as ea:
        a.compute(0.0, ref, state)
    with pytest.raises(Exception) as eb:
        b.compute(0.0, ref, state)
    assert type(ea.value) is type(eb.value) and str(ea.value) == str(eb.value)
    # a well-shaped step afterwards is the compiled one, equal to the numpy law to rounding
    ref = Ref(X + 0.001, np.zeros(3), np.zeros(3))
    np.testing.assert_allclose(a.compute(0.001, ref, state), b.compute(0.001, ref, state), rtol=1e-12, atol=1e-12)
    assert pose0 is not a.pose
