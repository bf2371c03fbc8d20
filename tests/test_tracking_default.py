"""Tracking-error protection on by default in simulation (issue 36).

Without ``[safety] tracking_error_max`` a simulated run gets a limit derived from its gains and
trajectory (:func:`controller.app.run.default_tracking_error`): every healthy shipped run stays
clear of it, and an arm whose drives cannot hold it (the UR20 newcomer on 10 N m drives, run
past the capability check) trips it within 50 ms, with a fault that says the drives saturated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, default_tracking_error, load_run, make_safety, parse_run
from dynamics.config import read_toml

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
UR20 = ROOT / "tests" / "data" / "ur20"


def _without_limit(path: Path, **safety):
    data = read_toml(path)
    data.setdefault("safety", {}).pop("tracking_error_max", None)
    data["safety"].update(safety)
    return parse_run(data, file=str(path), base_dir=path.parent)


def test_default_is_on_in_simulation_and_off_only_when_listed():
    spec = _without_limit(RUNS / "seed003_2r.toml")
    em = np.atleast_1d(make_safety(spec).err_max)
    assert np.all(np.isfinite(em)) and em.tolist() == pytest.approx(default_tracking_error(spec).tolist())
    spec = _without_limit(RUNS / "seed003_2r.toml", disabled_protections=["tracking_error_max"])
    assert not np.any(np.isfinite(np.atleast_1d(make_safety(spec).err_max)))


def test_default_scales_with_the_gains():
    """Softer gains, larger healthy errors: the limit grows (the healthy bound is 1/Kp)."""
    stiff = _without_limit(UR20 / "ur20_odrive_geared.toml")
    soft = _without_limit(UR20 / "ur20_odrive_geared.toml")
    soft.controller.wn_rad_s = 5.0
    assert np.all(default_tracking_error(soft) >= default_tracking_error(stiff))
    assert np.any(default_tracking_error(soft) > 2.0 * default_tracking_error(stiff))


def test_falling_arm_trips_within_50_ms_and_says_the_drives_saturated():
    """The newcomer's UR20 on 10 N m drives, built past the capability check (as the Python API
    could): it falls from the first cycle; the derived limit stops it within 50 ms."""
    spec = load_run(UR20 / "ur20_odrive_newcomer.toml", duration_s=0.5)
    assert spec.safety.tracking_error_max is None
    run = build_run(spec)
    result = run.execute()
    assert result.status == "fault"
    first = result.faults[0]
    assert first.cause == "tracking_error", [str(f) for f in result.faults]
    assert first.t_s <= 0.05, str(first)
    assert "drives saturated" in first.message and "at its limit" in first.message


def test_healthy_geared_ur20_stays_clear_of_the_default():
    spec = _without_limit(UR20 / "ur20_odrive_geared.toml")
    result = build_run(spec).execute()
    assert result.status == "completed", [str(f) for f in result.faults]


def _unmodelled_plant(path: Path) -> bool:
    """A run whose plant is deliberately not the controller's model family: an MJCF robot of
    its own or a payload the controller does not know (the MuJoCo runs' point). The derived
    default assumes the usual mismatch (mass factors, friction, lag); such a run sets its own
    ``tracking_error_max``."""
    plant = (read_toml(path).get("driver") or {}).get("plant") or {}
    return "mjcf" in plant or "payload" in plant or "payload_kg" in plant


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(RUNS.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_run_stays_clear_of_the_default(path):
    if _unmodelled_plant(path):
        assert "tracking_error_max" in (read_toml(path).get("safety") or {}), \
            f"{path.name}: an unmodelled plant needs its own safety.tracking_error_max"
        return
    spec = _without_limit(path)
    result = build_run(spec).execute()
    assert result.status == "completed", [str(f) for f in result.faults]
    err = np.asarray(result.metrics["max_abs_error"], dtype=float)
    assert np.all(err < default_tracking_error(spec)), (err, default_tracking_error(spec))
