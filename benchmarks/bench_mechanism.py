"""Per-call cost of a mechanism model's generated numba kernels against the hand-written 3RRR.

The planar 3RRR written as a mechanism file (``hil_configs/robots/3rrr_mechanism.toml``, the
robot of ``3rrr_horizontal.toml``) is loaded as a :class:`dynamics.mechanism.MechanismModel`
(equations derived with sympy, code generated and compiled with numba) and timed against the
hand-written :class:`dynamics.planar3rrr.Planar3RRR` of ``3rrr_horizontal.toml`` in the same
process, interleaved (:func:`benchmarks._timing.interleaved_samples`), so that machine load hits
both alike.  ``run(quick)`` returns rows ``{case, median_us, p99_us, ref, ref_median_us, ratio,
ratio_paired, max_abs_diff, note}`` (protocol of ``benchmarks/run.py``): ``ratio`` = median
mechanism / median hand-written time, ``ratio_paired`` = the median over the sampling rounds of
the two models' ratio in the same round (less sensitive to load changing during the run);
target ``ratio <= 2``.

Each call takes the next sample of a 1 kHz path (the platform on a 2 cm circle at 1 Hz with a
0.1 rad rotation wave), as a control loop does, so that the Newton solves start from the
previous cycle's solution, not from the answer:

* ``inverse_dynamics`` / ``forward_dynamics``: the hand model with the pose hint of the path
  (its fast path), the mechanism from its last configuration (it needs no hint);
* ``inverse_kinematics``: the hand model's closed form against the mechanism's Newton on the
  closures and the task equations;
* ``forward_kinematics_task``: the hand model's Newton from the previous pose (``guess``)
  against the mechanism's Newton on the closures from its last configuration.

Times are per call from Python, including input checks and the allocation of the results.
``max_abs_diff`` is the largest difference between the two models' results over the path.

Run alone: ``python -m benchmarks.bench_mechanism [--quick]`` or through
``python benchmarks/run.py --only bench_mechanism``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from benchmarks._timing import interleaved_samples, stats

ROOT = Path(__file__).resolve().parents[1]
HAND = ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml"
MECH = ROOT / "hil_configs" / "robots" / "3rrr_mechanism.toml"
TARGET_RATIO = 2.0
RATE_HZ = 1000.0


def _path(hand, n: int):
    """n samples at 1 kHz: X (n, 3), and q, qd, qdd, tau (n, 3) of the hand model."""
    t = np.arange(n) / RATE_HZ
    w = 2 * np.pi
    X0 = hand.home_pose
    X = X0 + np.stack([0.02 * np.cos(w * t) - 0.02, 0.02 * np.sin(w * t), 0.1 * np.sin(w * t)], axis=1)
    Xd = np.stack([-0.02 * w * np.sin(w * t), 0.02 * w * np.cos(w * t), 0.1 * w * np.cos(w * t)], axis=1)
    Xdd = np.stack([-0.02 * w * w * np.cos(w * t), -0.02 * w * w * np.sin(w * t),
                    -0.1 * w * w * np.sin(w * t)], axis=1)
    cols = {k: [] for k in ("q", "qd", "qdd", "tau")}
    for k in range(n):
        full = hand.task_inverse_dynamics(X[k], Xd[k], Xdd[k], full=True)
        for c in cols:
            cols[c].append(full[c])
    return X, *(np.array(cols[c]) for c in ("q", "qd", "qdd", "tau"))


def _cycler(fn, n):
    """A function of no arguments calling ``fn(k)`` for k = 0, 1, ..., n - 1, 0, 1, ..."""
    state = [0]

    def call():
        k = state[0]
        state[0] = k + 1 if k + 1 < n else 0
        return fn(k)
    return call


def run(quick: bool = False) -> list[dict]:
    from dynamics import load_model

    repeat, number = (15, 300) if quick else (60, 1000)
    hand = load_model(HAND)
    mech = load_model(MECH)
    n = 1000
    X, q, qd, qdd, tau = _path(hand, n)
    Xprev = np.roll(X, 1, axis=0)

    pairs = {
        "inverse_dynamics": (lambda k: hand.inverse_dynamics(q[k], qd[k], qdd[k], pose=X[k]),
                             lambda k: mech.inverse_dynamics(q[k], qd[k], qdd[k], pose=X[k])),
        "forward_dynamics": (lambda k: hand.forward_dynamics(q[k], qd[k], tau[k], pose=X[k]),
                             lambda k: mech.forward_dynamics(q[k], qd[k], tau[k], pose=X[k])),
        "inverse_kinematics": (lambda k: hand.inverse_kinematics(X[k]),
                               lambda k: mech.inverse_kinematics(X[k])),
        "forward_kinematics_task": (lambda k: hand.forward_kinematics_task(q[k], guess=Xprev[k]),
                                    lambda k: mech.forward_kinematics_task(q[k])),
    }
    notes = {
        "inverse_dynamics": "hand: pose hint; mechanism: Newton for the passive joints from its last solution",
        "forward_dynamics": "hand: pose hint; mechanism: Newton for the passive joints from its last solution",
        "inverse_kinematics": "hand: closed form; mechanism: Newton on closures + task from its last solution",
        "forward_kinematics_task": "hand: Newton from the previous pose; mechanism: Newton from its last solution",
    }
    rows = []
    for name, (fh, fm) in pairs.items():
        # the same path through both, once, for the agreement column (and the warm starts)
        diff = max(float(np.max(np.abs(fh(k) - fm(k)))) for k in range(n))
        smp = interleaved_samples({"hand": (_cycler(fh, n), ()), "mech": (_cycler(fm, n), ())},
                                  repeat=repeat, number=number)
        (mh, _), (mm, pm) = stats(smp["hand"]), stats(smp["mech"])
        ratio = mm / mh
        paired = float(np.median(np.asarray(smp["mech"]) / np.asarray(smp["hand"])))
        rows.append({"case": f"3rrr_mechanism {name}", "median_us": mm, "p99_us": pm,
                     "ref": f"Planar3RRR {name}", "ref_median_us": mh, "ratio": ratio,
                     "ratio_paired": paired, "max_abs_diff": diff,
                     "note": f"{notes[name]}; target ratio <= {TARGET_RATIO:g}: "
                             f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}"})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_mechanism [--quick]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_mechanism", *sys.argv[1:]]))
