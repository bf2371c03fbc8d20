"""Every model's dynamics take the caller's arrays as they come: read-only (``numpy.load`` with
``mmap_mode="r"``, ``np.broadcast_to``, a frozen array) or strided, with the same result, bit for
bit, as a contiguous writable copy (not a numba typing error, not another code path's rounding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
METHODS = ("inverse_dynamics", "forward_dynamics", "mass_matrix", "bias", "gravity", "coriolis_matrix",
           "kinetic_energy", "potential_energy", "forward_kinematics", "jacobian")


def _read_only(a):
    a = np.array(a, dtype=float)
    a.setflags(write=False)
    return a


def _strided(a):
    return np.repeat(np.asarray(a, dtype=float), 2)[::2]


@pytest.mark.parametrize("robot", ["seed000_arm", "arm6_demo", "3rrr_vertical", "stewart", "seed003_2r"])
def test_read_only_and_strided_inputs_give_the_same_bits(robot):
    m = load_model(ROBOTS / f"{robot}.toml")
    n = m.dof
    if hasattr(m, "home_q"):
        q = np.asarray(m.home_q, dtype=float) + 0.01
    elif hasattr(m, "leg_lengths"):
        q = m.leg_lengths(m.home_pose) + 0.001
    else:
        q = np.full(n, 0.3)
    rng = np.random.default_rng(0)
    qd, qdd, tau = rng.uniform(-0.3, 0.3, (3, n))
    args = {"inverse_dynamics": (q, qd, qdd), "forward_dynamics": (q, qd, tau), "bias": (q, qd),
            "coriolis_matrix": (q, qd), "kinetic_energy": (q, qd)}
    checked = 0
    for meth in METHODS:
        if not hasattr(m, meth):
            continue
        a = args.get(meth, (q,))
        want = np.asarray(getattr(m, meth)(*a))
        for form in (_read_only, _strided):
            got = np.asarray(getattr(m, meth)(*(form(x) for x in a)))
            assert got.dtype == want.dtype and got.shape == want.shape, (meth, form.__name__)
            assert got.tobytes() == want.tobytes(), (meth, form.__name__, np.max(np.abs(got - want)))
            checked += 1
    assert checked >= 12
