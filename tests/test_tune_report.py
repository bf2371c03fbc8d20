"""Gain search: separate random streams, edge-of-range warnings, the score's unit, the best marked."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from controller.app.commands import _absolutise  # noqa: E402
from controller.app.plots import tune_figure  # noqa: E402
from controller.app.tune import (Candidate, ParamRange, TuneResult, TuneSpec, metric_unit,  # noqa: E402
                             random_streams, run_tune)
from dynamics.config import read_toml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"


def _spec(candidates: int) -> TuneSpec:
    return TuneSpec(params={"controller.wn_rad_s": ParamRange(10.0, 60.0, log=True),
                            "controller.zeta": ParamRange(0.6, 1.4)},
                    uncertainty={"driver.plant.mass_factor": ParamRange(0.9, 1.2),
                                 "driver.plant.coulomb": ParamRange(0.0, 2.0)},
                    method="random", candidates=candidates, monte_carlo=2, metric="rms_error_norm",
                    duration_s=0.15, seed=5)


def test_the_plan_said_before_a_search_counts_its_runs():
    """A grid's `candidates` are per axis: 9 points on 2 axes are 81 candidates; the plan says the
    total runs, counted here from the tasks the search makes."""
    from controller.app.tune import make_candidates, make_draws, make_tasks

    file = RUNS / "seed003_2r.toml"
    base = _absolutise(read_toml(file), file.parent)
    for method, k in (("grid", 9), ("random", 7)):
        spec = _spec(k)
        spec.method = method
        cand, plant = random_streams(spec.seed)
        tasks = make_tasks(spec, base, str(file), make_candidates(spec, cand), make_draws(spec, plant))
        assert spec.n_candidates() == (81 if method == "grid" else 7)
        assert spec.plan().endswith(f"= {len(tasks)} runs")
        assert len(tasks) == spec.n_candidates() * 2
    assert spec.plan() == "7 random candidates x 2 plant draws = 14 runs"


def test_samples_do_not_change_the_plants_or_the_first_candidates():
    """The same candidate scores the same with 2 and with 16 candidates (one shared stream made
    the 2-candidate search draw other plants)."""
    file = RUNS / "seed003_2r.toml"
    base = _absolutise(read_toml(file), file.parent)
    small = run_tune(_spec(2), base, str(file), workers=1)
    large = run_tune(_spec(16), base, str(file), workers=1)
    assert small.draws == large.draws
    for c2, c16 in zip(small.candidates, large.candidates[:2]):
        assert c2.values == c16.values
        assert all(math.isfinite(s) for s in c2.scores)
        assert c2.scores == c16.scores          # bit-identical: same plants, same seeds
    # the streams really are independent: the plants do not repeat the candidates' numbers
    cand, plant = random_streams(5)
    assert cand.uniform() != plant.uniform()


def _result(values, scores, method="random", log=False) -> TuneResult:
    spec = TuneSpec(params={"controller.wn_rad_s": ParamRange(10.0, 100.0, log=log)}, uncertainty={},
                    method=method, metric="rms_position_error_m")
    cands = [Candidate(i, {"controller.wn_rad_s": v}, scores=[s]) for i, (v, s) in enumerate(zip(values, scores))]
    return TuneResult(spec, cands, [{}])


def test_winner_at_the_edge_of_the_range_is_warned_about():
    inner = _result([20.0, 50.0, 80.0], [3.0, 1.0, 2.0])
    assert inner.edge_warnings() == []
    high = _result([20.0, 50.0, 97.0], [3.0, 2.0, 1.0])
    (w,) = high.edge_warnings()
    assert "controller.wn_rad_s = 97" in w and "high edge" in w and "[10, 100]" in w
    low = _result([10.2, 50.0], [1.0, 2.0])
    assert "low edge" in low.edge_warnings()[0]
    # on a log range "near" is measured in log space: 12 is 8 % of the way from 10 to 100 in log
    assert _result([12.0, 50.0], [1.0, 2.0], log=True).edge_warnings() == []
    assert _result([12.0, 50.0], [1.0, 2.0], log=False).edge_warnings() != []
    # a grid's end points are edges, its inner points are not
    assert _result([10.0, 55.0, 100.0], [2.0, 1.0, 3.0], method="grid").edge_warnings() == []
    assert _result([10.0, 55.0, 100.0], [2.0, 3.0, 1.0], method="grid").edge_warnings() != []
    # nothing completed: no winner to warn about
    assert _result([97.0], [math.inf]).edge_warnings() == []


def test_score_has_the_metrics_unit(tmp_path):
    assert metric_unit("rms_position_error_m") == "m"
    assert metric_unit("rms_orientation_error_rad") == "rad"
    assert metric_unit("saturation_fraction") == "1"
    r = _result([20.0, 50.0], [3e-4, 1e-4])
    assert r.score_unit == "m"
    r.write_table(tmp_path / "ranking.csv")
    head = next(csv.reader(open(tmp_path / "ranking.csv")))
    assert "score [m]" in head and "mean_rms_position_error_m [m]" in head


def test_tune_plot_marks_the_best_with_units():
    r = _result([20.0, 50.0, 80.0], [3e-4, 1e-4, 2e-4])
    fig = tune_figure(r)
    try:
        (ax,) = fig.axes
        assert ax.get_ylabel() == "score [m]"
        best = [c for c in ax.collections if c.get_label().startswith("best")]
        assert len(best) == 1
        np.testing.assert_allclose(best[0].get_offsets(), [[50.0, 1e-4]])
        edges = sorted(ln.get_xdata()[0] for ln in ax.get_lines())
        assert edges == [10.0, 100.0]
    finally:
        plt.close(fig)


def test_a_log_range_of_less_than_two_decades_has_labelled_ticks_inside_it():
    """A log axis from 12 to 60 holds no power of ten: without labelled 2 and 5 ticks it would
    show no number at all."""
    r = _result([12.0, 30.0, 60.0], [3e-4, 1e-4, 2e-4], log=True)
    r.spec.params["controller.wn_rad_s"] = ParamRange(12.0, 60.0, log=True)
    fig = tune_figure(r)
    try:
        (ax,) = fig.axes
        fig.canvas.draw()
        lo, hi = ax.get_xlim()
        shown = [float(t.get_text()) for t in ax.get_xticklabels(minor=True) + ax.get_xticklabels()
                 if t.get_text() and lo <= t.get_position()[0] <= hi]
        assert ax.get_xscale() == "log" and len(shown) >= 2 and 20.0 in shown and 50.0 in shown
    finally:
        plt.close(fig)
