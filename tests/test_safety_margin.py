"""The safety supervisor's singularity check on a 3RRR by one compiled call
(``controller.safety._rrr_regular_margin``): the same pose and margin as the model's forward
kinematics and ``singularity`` to the bit, and the same supervisor results (margins, poses,
faults and their messages) as with the model's methods alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import controller.safety as S
from controller.app import run as api
from controller.laws import State
from drivers.base import Feedback
from dynamics import load_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rrr():
    return load_model(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")


def test_regular_margin_equals_the_models_to_the_bit(rrr):
    """Parity test: the supervisor's compiled check against the model's forward kinematics and
    ``singularity``. The independent checks of the same quantities are
    ``test_3rrr_kinematics.py::test_ik_satisfies_constraints_and_fk_round_trip`` (the pose),
    ``test_perf_fastpaths.py::test_closed_form_singular_values_match_lapack`` (the margin's
    singular values against LAPACK) and ``test_3rrr_kinematics.py::test_type2_singularity``."""
    rng = np.random.default_rng(3)
    home = np.asarray(rrr.home_pose, float)
    used = 0
    for _ in range(300):
        X = home + rng.normal(0, [0.03, 0.03, 0.3])
        try:
            q = np.asarray(rrr.inverse_kinematics(X), float)
        except Exception:  # noqa: BLE001 - outside the workspace
            continue
        guess = X + rng.normal(0, 1e-3, 3)
        Xc, out = np.full(3, np.nan), np.full(1, np.nan)
        st = S._rrr_regular_margin(rrr._P, float(rrr._tol_sing), q, guess, Xc, out)
        Xm = np.asarray(rrr.forward_kinematics_task(q, guess=guess), float)
        rep = rrr.singularity(q, Xm)
        if rep.kind == "regular":
            assert st == 0
            used += 1
            assert Xc.tobytes() == Xm.tobytes()
            assert out[0] == rep.margin and np.float64(rep.margin).tobytes() == out[0].tobytes()
        else:
            assert st != 0
    assert used > 100
    # non-finite inputs are left to the model (which raises)
    for q, g in ((np.array([np.nan, 0.0, 0.0]), home), (np.zeros(3), np.array([0.0, np.inf, 0.0]))):
        assert S._rrr_regular_margin(rrr._P, float(rrr._tol_sing), q, g, np.empty(3), np.empty(1)) != 0


def _supervisor_run(spec, cycles):
    """Checks of a sequence of cycles (every one a singularity check); what they leave."""
    X0 = np.asarray(spec.trajectory.sample(0.0).pos, dtype=float)
    saf = api.make_safety(spec, pose0=X0)
    saf.config.singularity_every = 1
    saf.reset()
    n = 3
    out = []
    for t, q in cycles:
        fb = Feedback(t, q, np.zeros(n), np.zeros(n), np.zeros(n, int), np.ones(n, bool), np.ones(n, bool), {})
        ref = spec.trajectory.sample(t)
        try:
            cmd, ss = saf.check(t, State(t, q, np.zeros(n)), fb, ref, np.zeros(n), error=np.zeros(3))
            out.append((cmd.tobytes(), ss.code, ss.action))
        except Exception as exc:  # noqa: BLE001 - compared
            out.append(repr(exc))
        out.append((np.float64(saf.last_margin).tobytes(), None if saf.pose is None else saf.pose.tobytes()))
    return out, [(f.t_s, f.cause, f.joint, repr(f.values), f.message) for f in saf.faults]


def test_supervisor_same_as_with_the_models_methods(monkeypatch):
    """Parity test (the supervisor with and without its compiled check); the supervisor's
    behaviour near a singularity is checked independently in
    ``test_singularity_guard.py::test_guard_fires_before_the_torque_limit_and_the_plant_stops_short``."""
    spec = api.load_run(ROOT / "hil_configs" / "runs" / "3rrr_circle.toml", duration_s=1.0)
    model = spec.model
    cycles = []
    for k in range(60):
        t = 0.001 * k
        X = np.asarray(spec.trajectory.sample(t).pos, float)
        cycles.append((t, np.asarray(model.inverse_kinematics(X), float)))
    # a cycle with a non-finite angle (the model raises: "singularity check failed") and a
    # pose of the circle again after it
    cycles.insert(30, (0.03, np.array([np.nan, 0.0, 0.0])))
    fast = _supervisor_run(spec, cycles)
    with monkeypatch.context() as m:
        calls = []
        m.setattr(S, "_rrr_regular_margin", lambda *a: calls.append(1) or 1)    # the model's methods only
        slow = _supervisor_run(spec, cycles)
        assert calls
    assert fast == slow
    assert any("singularity check failed" in f[4] for f in fast[1])


def test_supervisor_loads_the_compiled_check_when_made():
    """A 3RRR supervisor loads the compiled singularity check when made (a new process: no
    earlier call), so its first call, in the first control cycle, finds it ready."""
    import subprocess
    import sys

    code = ("import numpy as np\n"
            "import controller.safety as S\n"
            "from controller.app import run as api\n"
            f"spec = api.load_run({str(ROOT / 'hil_configs' / 'runs' / '3rrr_circle.toml')!r}, duration_s=0.1)\n"
            "assert not S._rrr_regular_margin.signatures\n"
            "saf = api.make_safety(spec, pose0=np.asarray(spec.trajectory.sample(0.0).pos, float))\n"
            "print(len(S._rrr_regular_margin.signatures), saf.last_margin, saf._margin_prev)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "nan", "None"]        # loaded; the supervisor's state untouched


def test_predicted_margin_is_the_rule_as_written_in_python():
    """``_safety_rules.predicted_margin`` (the one form the supervisor and the compiled loop
    use) against the rule written out in Python: the same bits over random values, signed
    zeros, NaN and infinities, with and without a last margin and a horizon. That part is a
    parity test against a transcription of the rule; the independent expectations are the
    hand-computed predictions first (binary-exact numbers) and the supervisor's behaviour in
    ``test_ctrl_safety.py::test_singularity_guard_is_predictive``."""
    import math
    import struct

    from controller._safety_rules import predicted_margin

    # hand-computed (m, t, have, t0, m0, h) -> prediction:
    # falling 0.75 -> 0.5 over dt = 0.25 s: rate -1 /s, to t + dt + h = 0.75 s on: 0.5 - 0.75
    assert predicted_margin(0.5, 1.25, True, 1.0, 0.75, 0.5) == -0.25
    # the same without a horizon (or a negative one, taken as none): 0.5 - 0.25
    assert predicted_margin(0.5, 1.25, True, 1.0, 0.75, 0.0) == 0.25
    assert predicted_margin(0.5, 1.25, True, 1.0, 0.75, -1.0) == 0.25
    # rising 0.25 -> 0.5, no last margin, or no time between the checks: the margin itself
    assert predicted_margin(0.5, 1.25, True, 1.0, 0.25, 0.5) == 0.5
    assert predicted_margin(0.5, 1.25, False, 1.0, 0.75, 0.5) == 0.5
    assert predicted_margin(0.5, 1.0, True, 1.0, 0.75, 0.5) == 0.5

    def ref(m, t, have, t0, m0, h):
        # to the next check (one check interval dt on) plus the horizon h
        predicted = m
        if have:
            dt = t - t0
            if dt > 0:
                predicted = m + min(0.0, (m - m0) / dt) * (dt + max(h, 0.0))
        return predicted

    rng = np.random.default_rng(4)
    special = [0.0, -0.0, 1e-300, -1e-300, 0.5, 2.0, math.inf, -math.inf, math.nan]
    bits = lambda x: struct.pack("<d", x)
    for _ in range(3000):
        m, m0 = (float(rng.choice(special)) if rng.random() < 0.3 else float(rng.normal(0.05, 0.05))
                 for _ in range(2))
        t0 = float(rng.uniform(0, 5))
        t = t0 + float(rng.choice([0.0, -0.01, 0.01, float(rng.uniform(0, 1))]))
        h = float(rng.choice([0.0, 0.05, 0.2, -1.0]))
        have = bool(rng.random() < 0.8)
        assert bits(predicted_margin(m, t, have, t0, m0, h)) == bits(ref(m, t, have, t0, m0, h))


def test_singularity_code_is_the_rule_as_written_in_python():
    """``_safety_rules.singularity_code`` against the guard's rule written out in Python: below
    the minimum, predicted below it, or, while the margin falls by more than 1 % of itself,
    the torque at the predicted margin (``|tau| m / predicted``, forces growing as 1 / margin)
    beyond 80 % of a limit; NaN never passes. The random part is a parity test against a
    transcription of the rule; the hand-computed verdicts first are the independent
    expectations (and ``test_singularity_guard.py::test_guard_fires_before_the_torque_limit_and_the_plant_stops_short``
    the guard's behaviour on a simulated plant)."""
    import math

    from controller._safety_rules import S_BELOW, S_OK, S_PREDICTED, S_TORQUE, singularity_code

    lim2 = np.array([10.0, 10.0])
    # below the minimum 0.01, or NaN: below; predicted below it: predicted
    assert singularity_code(0.005, 0.005, 0.01, np.zeros(2), lim2) == S_BELOW
    assert singularity_code(math.nan, 0.05, 0.01, np.zeros(2), lim2) == S_BELOW
    assert singularity_code(0.05, 0.005, 0.01, np.zeros(2), lim2) == S_PREDICTED
    # falling 0.05 -> 0.04 (20 %): 7 N m of 10 grows to 7 * 0.05 / 0.04 = 8.75 > 8 (80 %)
    assert singularity_code(0.05, 0.04, 0.01, np.array([-7.0, 1.0]), lim2) == S_TORQUE
    # 6 N m grows to 6 * 0.05 / 0.04 = 7.5 <= 8: ok
    assert singularity_code(0.05, 0.04, 0.01, np.array([6.0, -6.0]), lim2) == S_OK
    # falling 0.05 -> 0.0499 (0.2 %, under 1 %): 9 N m is not looked at
    assert singularity_code(0.05, 0.0499, 0.01, np.array([9.0, 0.0]), lim2) == S_OK
    # a NaN torque while falling never passes
    assert singularity_code(0.05, 0.04, 0.01, np.array([math.nan, 0.0]), lim2) == S_TORQUE

    def ref(m, p, m_min, tau, lim):
        if not m >= m_min:
            return S_BELOW
        if not p >= m_min:
            return S_PREDICTED
        if p < m * 0.99:                  # falling by more than 1 % of itself
            ratios = np.abs(tau) / lim
            worst = math.nan if np.isnan(ratios).any() else float(ratios.max())
            if not worst * m <= 0.8 * p:
                return S_TORQUE
        return S_OK

    rng = np.random.default_rng(5)
    seen = set()
    for _ in range(3000):
        m = float(rng.choice([math.nan, 0.0, 0.02, 0.05, float(rng.uniform(0, 0.2))]))
        p = m - float(rng.choice([0.0, -0.01, 0.001, 0.01, float(rng.uniform(0, 0.05))]))
        lim = rng.uniform(1, 10, 3)
        tau = lim * rng.uniform(-1.1, 1.1, 3)
        if rng.random() < 0.05:
            tau[int(rng.integers(3))] = math.nan
        got = singularity_code(m, p, 0.01, tau, lim)
        assert got == ref(m, p, 0.01, tau, lim), (m, p, tau, lim)
        seen.add(int(got))
    assert seen == {S_OK, S_BELOW, S_PREDICTED, S_TORQUE}
