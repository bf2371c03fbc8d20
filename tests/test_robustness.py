"""``torqueloop robustness``: seeded Monte-Carlo runs over the plant's uncertainty, the same on every
engine, the share within tolerance counted from the runs, worst runs that ``torqueloop run``
replays, the plant's payload, spreads from an identification."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from controller.app.cli import main
from controller.app.commands import _absolutise
from controller.app.robustness import identified_spreads, run_robustness, summary, write_report
from controller.app.tune_config import NormalSpread, RobustnessSpec
from dynamics import load_model
from dynamics.config import Section, read_toml
from dynamics.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
BASE = RUNS / "3rrr_circle_tune.toml"          # the 3RRR circle on the in-process plant
DEMO = RUNS / "3rrr_circle_robustness.toml"

TABLE = {"samples": 6, "seed": 4, "duration_s": 1.5, "worst_cases": 2,
         "uncertainty": {"driver.plant.mass_factor": [1.1, 0.05, "normal"],
                         "driver.plant.coulomb": [0.03, 0.15],
                         "driver.plant.current_lag_s": [0.0002, 0.001],
                         "driver.plant.payload_kg": [0.0, 0.5]},
         "tolerance": {"max_position_error_m": 1.0, "singularity_margin_min": 0.05,
                       "torque_peak_ratio_max": 0.5}}
TIMING = {"wall_time_s", "real_time_factor", "timing", "timing_health"}


def _setup(table: dict | None = None) -> tuple[RobustnessSpec, dict]:
    data = read_toml(BASE)
    spec = RobustnessSpec.from_section(Section(dict(table or TABLE), str(BASE), "robustness"))
    return spec, _absolutise({k: v for k, v in data.items() if k != "tune"}, BASE.parent)


@pytest.fixture(scope="module")
def reference():
    spec, base = _setup()
    res = run_robustness(spec, base, str(BASE), workers=1, engine="local")
    assert all(m["status"] == "completed" for m in res.metrics), [m.get("error") for m in res.metrics]
    return res


def _same(a, b, name):
    assert a.overrides == b.overrides, name
    for i, (x, y) in enumerate(zip(a.metrics, b.metrics)):
        assert x.keys() == y.keys(), (name, i)
        for k in x:
            if k not in TIMING:
                assert np.array_equal(np.asarray(x[k], dtype=object), np.asarray(y[k], dtype=object)), (name, i, k)
    sa, sb = summary(a), summary(b)
    assert sa == sb, name


def test_reproducible_with_the_seed_and_different_with_another(reference):
    spec, base = _setup()
    again = run_robustness(spec, base, str(BASE), workers=1, engine="local")
    _same(reference, again, "same seed")
    # every run carries its own plant seed, and its draw is the seed's
    assert len({ov["driver.plant.seed"] for ov in reference.overrides}) == spec.samples
    spec.seed = 5
    other = run_robustness(spec, base, str(BASE), workers=1, engine="local")
    assert other.overrides[0]["driver.plant.mass_factor"] != reference.overrides[0]["driver.plant.mass_factor"]
    # the draws follow their distributions' bounds (uniform within, payload cut at 0 never needed)
    for ov in reference.overrides:
        assert 0.03 <= ov["driver.plant.coulomb"] <= 0.15 and 0.0 <= ov["driver.plant.payload_kg"] <= 0.5


@pytest.mark.parametrize("engine, workers", [("batch", 2), ("local", 2), ("dask", 2), ("ray", 2)])
def test_the_same_report_on_every_engine(reference, engine, workers):
    if engine == "dask":
        pytest.importorskip("dask.distributed", reason="dask[distributed] is in the test extra")
    if engine == "ray":
        pytest.importorskip("ray")
    spec, base = _setup()
    res = run_robustness(spec, base, str(BASE), workers=workers, engine=engine)
    assert res.report.engine == engine
    _same(reference, res, engine)


def test_share_within_tolerance_is_counted_from_the_runs(reference, tmp_path):
    """A bound at the median of the runs' errors lets half of them through; each bound counts
    separately, the faulted or failed runs never count as within."""
    v = reference.values("max_position_error_m")
    med = float(np.median(v))
    reference.spec.tolerance = {"max_position_error_m": med}
    try:
        assert reference.within.sum() == int(np.sum(v <= med)) == 3
        s = summary(reference)
        assert s["share_within"] == 0.5 and s["tolerance"]["max_position_error_m"]["share"] == 0.5
        # singularity margin is a lower bound: a bound above every run's margin rejects them all
        m = reference.values("singularity_margin_min")
        assert np.all((m > 0) & (m < 1))
        reference.spec.tolerance = {"singularity_margin_min": float(m.max()) + 1e-9}
        assert reference.within.sum() == 0
        reference.spec.tolerance = {"singularity_margin_min": float(m.min())}
        assert reference.within.all()
        reference.spec.tolerance = {"no_such_metric": 1.0}
        with pytest.raises(ConfigError) as err:
            reference.within
        assert err.value.field == "robustness.tolerance.no_such_metric"
    finally:
        reference.spec.tolerance = dict(TABLE["tolerance"])
    # the envelope's maximum is the run's largest position error (the summary's, independently)
    for mm in reference.metrics:
        assert max(mm["_envelope"]) == pytest.approx(mm["max_position_error_m"], rel=1e-12)
    written = write_report(reference, tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "samples.csv")))
    assert [int(r["within"]) for r in rows] == list(reference.within.astype(int))
    assert {p.name for p in written} >= {"report.txt", "robustness.json", "worst_1.toml", "worst_2.toml",
                                         "robustness_hist.png", "robustness_envelope.png"}


def test_the_worst_run_replays_with_torqueloop_run(reference, tmp_path):
    """``worst_1.toml`` is a complete run config: ``torqueloop run`` gives the run's metrics."""
    write_report(reference, tmp_path, plots=False)
    worst = reference.worst()
    v = reference.values("max_position_error_m")
    assert worst[0] == int(np.nanargmax(v)) and worst[1] == int(np.argsort(-v)[1])
    rc = main(["run", str(tmp_path / "worst_1.toml"), "-o", str(tmp_path / "replay"), "--no-plots",
               "--no-progress"])
    assert rc == 0
    got = json.loads((tmp_path / "replay" / "summary.json").read_text())
    ref = reference.metrics[worst[0]]
    for key in ("max_position_error_m", "rms_position_error_m", "rms_orientation_error_rad", "n_cycles"):
        assert got[key] == ref[key], key
    assert got["peak_torque"] == list(ref["peak_torque"])


def test_payload_adds_the_platform_load_to_the_torques():
    """The payload's torques balance its inertial force by virtual work:
    dtau . qd = m (a_x, a_y, 0) . Xd for every velocity, Xd = J_x qd (the model's Jacobian)."""
    model = load_model(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")
    m = 0.37
    heavy = model.with_payload(m)
    X = np.asarray(model.home_pose, float) + np.array([0.01, -0.02, 0.05])
    acc = np.array([0.7, -1.3, 0.4])
    dtau = (heavy.task_inverse_dynamics(X, np.zeros(3), acc)
            - model.task_inverse_dynamics(X, np.zeros(3), acc))
    q = model.inverse_kinematics(X)
    J = model.task_jacobian(q, X)
    rng = np.random.default_rng(0)
    for _ in range(3):
        qd = rng.normal(size=3)
        assert dtau @ qd == pytest.approx(m * np.array([acc[0], acc[1], 0.0]) @ (J @ qd), rel=1e-9)
    with pytest.raises(Exception):
        model.with_payload(-1.0)
    serial = load_model(ROOT / "hil_configs" / "robots" / "seed003_2r.toml")
    with pytest.raises(Exception, match="payload"):
        serial.with_payload(0.1)


def test_a_payload_on_a_model_without_one_names_the_field(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    text = (RUNS / "seed003_2r.toml").read_text().replace("[driver.plant]", "[driver.plant]\npayload_kg = 0.2", 1)
    assert "payload_kg" in text
    cfg.write_text(text.replace('file = "../robots/', f'file = "{RUNS.parent / "robots"}/'))
    assert main(["run", str(cfg), "-o", str(tmp_path / "o"), "--no-plots", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "field 'driver.plant.payload_kg'" in err and str(cfg) in err


def test_spreads_from_an_identification(tmp_path):
    names = ["theta1", "theta2", "theta3"]
    ident = {"base_names": ["L1.ZZR", "platform.M", "theta1.Fv", "theta2.Fv", "theta3.Fv", "theta1.Fc",
                            "theta2.Fc", "theta3.Fc"],
             "base_ls": [0.01, 0.5, 0.02, 0.03, 0.025, 0.1, 0.08, 0.09],
             "base_std": [0.001, 0.1, 0.002, 0.003, 0.001, 0.01, 0.02, 0.03]}
    path = tmp_path / "identification.json"
    path.write_text(json.dumps(ident))
    sp = identified_spreads(path, names)
    assert sp["driver.plant.viscous"] == NormalSpread((0.02, 0.03, 0.025), (0.002, 0.003, 0.001), 0.0)
    assert sp["driver.plant.coulomb"].mean == (0.1, 0.08, 0.09)
    mf = sp["driver.plant.mass_factor"]
    assert (mf.mean, mf.low) == (1.0, 0.0) and mf.std == pytest.approx(0.15, rel=1e-12)   # median of 0.1, 0.2
    draws = np.array([sp["driver.plant.viscous"].draw(np.random.default_rng(i)) for i in range(400)])
    assert np.all(draws >= 0) and np.allclose(draws.mean(axis=0), [0.02, 0.03, 0.025], atol=5e-4)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError) as err:
        identified_spreads(tmp_path / "bad.json", names)
    assert err.value.field == "robustness.identification"


@pytest.mark.parametrize("key, value, field", [("samples", 0, "robustness.samples"),
                                               ("engine", "spark", "robustness.engine"),
                                               ("uncertainty", {"driver.plant.coulomb": [0.2, 0.1]},
                                                "robustness.uncertainty.driver.plant.coulomb"),
                                               ("uncertainty", {"driver.plant.coulomb": [0.1, -1, "normal"]},
                                                "robustness.uncertainty.driver.plant.coulomb"),
                                               ("tolerance", {"max_position_error_m": "small"},
                                                "robustness.tolerance.max_position_error_m"),
                                               ("worst_by_x", 1, "robustness.worst_by_x")])
def test_config_errors_name_the_field(key, value, field):
    with pytest.raises(ConfigError) as err:
        RobustnessSpec.from_section(Section({**TABLE, key: value}, "x.toml", "robustness"))
    assert err.value.file == "x.toml" and err.value.field == field


def test_the_command_on_the_shipped_demo(tmp_path, capsys):
    """The shipped 3RRR demo's table, two short runs: exit 0, the report and the configs; a bad
    --tolerance is a config error (exit 2)."""
    rc = main(["robustness", str(DEMO), "--samples", "2", "--workers", "1", "--engine", "local",
               "--tolerance", "max_position_error_m=0.01", "--duration", "1.0", "-o", str(tmp_path / "r"), "--no-plots",
               "--seed", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "within tolerance" in out and (tmp_path / "r" / "worst_1.toml").exists()
    rep = json.loads((tmp_path / "r" / "robustness.json").read_text())
    assert rep["samples"] == 2 and rep["seed"] == 3 and rep["tolerance"]["max_position_error_m"]["bound"] == 0.01
    assert main(["robustness", str(DEMO), "--tolerance", "max_position_error_m=small", "-o",
                 str(tmp_path / "x")]) == 2
    assert not math.isnan(rep["share_within"])
