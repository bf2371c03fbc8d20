"""``SafetySupervisor.check`` with a cycle's values evaluated as they are by one compiled call
(``controller.safety._evaluate_checked``, no conversion) against the same supervisor with every
value converted and validated first (the compiled call declined): the same commands, states,
faults, messages and errors, cycle by cycle, for clean, clipping, soft-limit, non-finite, stale,
faulted, mis-shaped and odd-typed cycles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import controller.safety as S
from controller.app import run as api
from controller.laws import State
from drivers.base import Feedback

ROOT = Path(__file__).resolve().parents[1]


def _cycles(spec, kind, rng):
    """(t, state, feedback, ref, tau, error) of a sequence of cycles of one ``kind``."""
    model = spec.model
    n = 3
    out = []
    for k in range(40):
        t = 0.001 * k
        ref = spec.trajectory.sample(t)
        q = np.asarray(model.inverse_kinematics(np.asarray(ref.pos, float)), float) + rng.normal(0, 1e-4, n)
        qd = rng.normal(0, 0.1, n)
        tau = rng.normal(0, 0.5, n)
        err = rng.normal(0, 1e-3, 3)
        fault, enabled, fresh = np.zeros(n, int), np.ones(n, bool), np.ones(n, bool)
        if kind == "clip" and k % 3 == 0:
            tau = tau * 1000.0
        elif kind == "soft" and k % 4 == 0:
            q = q.copy()
            q[1] = model.limits.position_max[1] - 0.01 if np.isfinite(model.limits.position_max[1]) else q[1]
        elif kind == "nan" and k == 20:
            tau = tau.copy()
            tau[2] = np.nan
        elif kind == "stale" and k > 10:
            fresh = np.array([True, k % 2 == 0, True])
        elif kind == "device" and k == 15:
            fault = np.array([0, 7, 0])
        elif kind == "error" and k == 12:
            err = np.array([1.0, 0.0, 0.0])
        elif kind == "shapes" and k == 9:
            tau = np.zeros(4)
        elif kind == "err shape" and k == 9:
            err = np.zeros(2)
        elif kind == "feedback shape" and k == 9:
            fault = np.zeros(2, int)            # the rules would read past its end
        elif kind == "feedback shape" and k == 11:
            fresh = np.ones(5, bool)
        elif kind == "types" and k % 5 == 0:
            q, qd = q.tolist(), qd.astype(np.float32)
            fault = fault.astype(np.int32)
        elif kind == "subclass" and k % 2 == 0:
            tau = tau.view(type("Sub", (np.ndarray,), {}))
            q = np.ma.array(q, mask=[False, True, False])
        elif kind == "no error" and k % 2 == 0:
            err = None
        elif kind == "no feedback" and k % 2 == 0:
            out.append((t, State(t, q, qd), None, ref, tau, err))
            continue
        elif kind == "stop" and k == 25:
            out.append("stop")
        fb = Feedback(t, q, qd, np.zeros(n), fault, fresh, enabled, {})
        out.append((t, State(t, q, qd), fb, ref, tau, err))
    return out


def _run(spec, cycles):
    saf = api.make_safety(spec, pose0=np.asarray(spec.trajectory.sample(0.0).pos, float))
    saf.reset()
    res = []
    for c in cycles:
        if c == "stop":
            saf.request_stop("test")
            continue
        t, state, fb, ref, tau, err = c
        try:
            cmd, ss = saf.check(t, state, fb, ref, tau, error=err)
            res.append((type(cmd), np.asarray(cmd).dtype.str, np.asarray(cmd).tobytes(), ss.code, ss.action,
                        np.asarray(ss.saturated).tobytes(), [f.message for f in ss.new_faults]))
        except Exception as exc:  # noqa: BLE001 - compared
            res.append((type(exc), str(exc)))
        res.append((saf._jbits.tobytes(), saf._ebits.tobytes(), saf.latched, saf._stale.tobytes()))
    return res, [(f.t_s, f.cause, f.joint, repr(f.values), f.message) for f in saf.faults]


@pytest.mark.parametrize("kind", ["clean", "clip", "soft", "nan", "stale", "device", "error", "shapes", "err shape",
                                  "feedback shape", "types", "subclass", "no error", "no feedback", "stop"])
def test_compiled_rules_call_changes_nothing(kind, monkeypatch):
    spec = api.load_run(ROOT / "hil_configs" / "runs" / "3rrr_circle.toml", duration_s=1.0)
    cycles = _cycles(spec, kind, np.random.default_rng(len(kind)))
    calls = []
    real = S._rules_checker()

    def counting(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(S, "_rules_checker", lambda: counting)
    fast = _run(spec, cycles)
    used = len(calls)

    def declined(*a):
        raise TypeError("declined")

    monkeypatch.setattr(S, "_rules_checker", lambda: declined)
    slow = _run(spec, cycles)
    assert fast == slow
    if kind in ("clean", "clip", "stale"):
        assert used > 10                        # the compiled call did run


def test_clean_cycles_return_at_once(monkeypatch):
    """A clean cycle of the shipped run's kinds of values does not reach the conversions."""
    spec = api.load_run(ROOT / "hil_configs" / "runs" / "3rrr_circle.toml", duration_s=1.0)
    cycles = _cycles(spec, "clean", np.random.default_rng(0))
    converted = []
    real = np.asarray
    monkeypatch.setattr(S.np, "asarray", lambda *a, **k: converted.append(1) or real(*a, **k))
    saf = api.make_safety(spec, pose0=np.asarray(spec.trajectory.sample(0.0).pos, float))
    saf.config.singularity_every = 10**6
    saf.reset()
    saf.check(0.0, *cycles[0][1:4], cycles[0][4], error=cycles[0][5])     # the first: singularity check due
    converted.clear()
    for t, state, fb, ref, tau, err in cycles[1:]:
        cmd, ss = saf.check(t, state, fb, ref, tau, error=err)
        assert ss.action == "run" and cmd is not tau
    assert not converted


def test_feedback_vectors_of_another_length_are_refused():
    """A feedback whose fault, enabled or fresh vector is not (n,) is a SafetyError naming the
    shapes (the compiled rules would read past a short vector's end), on both paths."""
    spec = api.load_run(ROOT / "hil_configs" / "runs" / "3rrr_circle.toml", duration_s=1.0)
    t, state, fb, ref, tau, err = _cycles(spec, "clean", np.random.default_rng(1))[3]
    saf = api.make_safety(spec, pose0=np.asarray(spec.trajectory.sample(0.0).pos, float))
    saf.reset()
    for bad in ({"fault": np.zeros(2, int)}, {"enabled": np.ones(1, bool)}, {"fresh": np.ones(4, bool)}):
        short = Feedback(fb.t_s, fb.position_rad, fb.velocity_rad_s, fb.torque_nm,
                         bad.get("fault", fb.fault), bad.get("fresh", fb.fresh), bad.get("enabled", fb.enabled), {})
        with pytest.raises(S.SafetyError, match=r"fault, enabled and fresh must have shape \(3,\)"):
            saf.check(t, state, short, ref, tau, error=err)

