"""Property-based config mutations (issues 12, 37): every malformed value of every field of the
shipped configs gives a ConfigError naming the file and the field, never a traceback, and
nothing that switches a protection off is accepted; a hardware driver table ``check`` passes is
one ``run`` builds (``python -m tests.config_mutations 2500`` prints the figures)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from tests.config_mutations import HARDWARE_CONFIGS, RUN_CONFIGS, VALUES, classify, mutate
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from config_mutations import HARDWARE_CONFIGS, RUN_CONFIGS, VALUES, classify, mutate

CONFIGS = RUN_CONFIGS + HARDWARE_CONFIGS


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cfg=st.sampled_from(CONFIGS), leaf=st.integers(0, 10_000), value=st.integers(0, len(VALUES) - 1),
       robot=st.booleans())
def test_mutated_config_is_refused_by_name_or_safe(tmp_path_factory, cfg, leaf, value, robot):
    tmp = tmp_path_factory.mktemp("mut")
    info: dict = {}
    path = mutate(cfg, tmp, leaf, value, robot=robot, info=info)
    outcome, detail = classify(path, info)
    assert outcome in ("clean", "accepted"), detail
    if outcome == "accepted":
        from controller.app.run import load_run, make_safety
        from controller.safety import SAFETY_RANGES
        spec = load_run(path)
        s = make_safety(spec)
        assert np.all(np.isfinite(s.tau_max)) and np.all(s.tau_max <= SAFETY_RANGES["torque_max"][1])
        assert 1.0 <= spec.rate_hz <= 40_000.0 and np.isfinite(spec.duration_s)


@pytest.mark.parametrize("field,value", [
    ("safety.startup_tolerance", 1e300), ("safety.tracking_error_max", 1e300), ("safety.stale_cycles", 10**18),
    ("safety.singularity_every", 10**18), ("safety.singularity_margin_min", 0.0), ("safety.brake_kd_nm_s_per_rad", 0.0),
    ("safety.hold_time_s", 1e300), ("safety.brake_time_s", 1e300), ("safety.torque_max", 1e300),
    ("controller.wn_rad_s", 1e300), ("controller.zeta", 1e300), ("loop.rate_hz", 0.001), ("loop.rate_hz", 1e9),
    ("driver.type", ""), ("safety.tracking_error_max", [0.01, 0.01]), ("safety.startup_tolerance", [0.1, 0.1]),
    # issue 37: values that switched a protection off and were accepted
    ("safety.singularity_margin_min", 1e-300), ("safety.brake_kd_nm_s_per_rad", 1e-300),
    ("safety.soft_kd_nm_s_per_rad", 0.0), ("safety.hold_kp_nm_per_rad", 1e-300),
    ("safety.position_margin_rad", 1e-300),     # a soft zone no encoder resolves
    ("safety.position_margin_rad", 0.0),        # no soft zone, unless listed in disabled_protections
])
def test_values_that_switch_protection_off_are_refused(field, value):
    from controller.app.run import load_run, validate_run
    from dynamics.errors import ConfigError

    cfg = Path(__file__).resolve().parents[1] / "hil_configs" / "runs" / "3rrr_circle.toml"
    with pytest.raises(ConfigError) as ei:
        validate_run(load_run(cfg, overrides={field: value}))
    assert ei.value.file == str(cfg)
    assert ei.value.field == field or ei.value.field.startswith(field.split(".")[0]), (ei.value.field, field)


@pytest.mark.parametrize("field,value", [
    ("driver.follow.tol_nm", 1e300),            # the limp check off
    ("driver.joints", [{"can_id": 1}]),         # a joint table run refuses (no model or limits)
    ("driver.temperature_max_c", 1e9),
    ("safety.singularity_margin_min", 1e-300),  # also in the hardware template
])
def test_check_refuses_what_run_refuses_on_hardware(field, value):
    """``check`` reads a hardware driver table as ``run`` builds it (on private virtual buses):
    before, 16 of 18 probed tables passed check and were refused by run."""
    from controller.app.run import check_run_config
    from dynamics.errors import ConfigError

    cfg = Path(__file__).resolve().parents[1] / "hil_configs" / "hardware" / "3rrr_mit_can_socketcan.toml"
    with pytest.raises(ConfigError) as ei:
        check_run_config(cfg, overrides={field: value})
    assert ei.value.file == str(cfg) and ei.value.field.startswith(field.split(".")[0])


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cfg=st.sampled_from(CONFIGS), key=st.integers(0, 10_000), edit=st.integers(0, 2),
       where=st.integers(0, 40))
def test_a_misspelt_key_is_named_with_the_right_one(tmp_path_factory, cfg, key, edit, where):
    """Any key of any table of a shipped config, misspelt by one typing slip: ``check`` refuses the
    file naming the misspelt key and the key it should be (also when the right key is required,
    or its absence changes what the rest of the table means)."""
    from controller.app.commands import check
    from dynamics.errors import ConfigError

    try:
        from tests.config_mutations import misspelt_config
    except ImportError:  # pragma: no cover
        from config_mutations import misspelt_config
    path, right, typo = misspelt_config(cfg, tmp_path_factory.mktemp("typo"), key, edit, where)
    if not typo:
        return
    with pytest.raises(ConfigError) as ei:
        check(str(path))
    text = str(ei.value)
    assert ei.value.file == str(path), text
    assert typo in text and f"'{right}'" in text, (right, typo, text)


# --- issue 37 item 7, the remainders: values weak or off only for this robot, emulator, drive ----
RUNS = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"
ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


@pytest.mark.parametrize("config,field,value", [
    # a brake 1000x weaker than the robot ships: above the fixed floor (1e-3), too weak for its inertia
    ("seed000_fast.toml", "safety.brake_kd_nm_s_per_rad", 0.001),       # ships 20
    ("stewart_motion.toml", "safety.brake_kd_nm_s_per_rad", 0.001),     # ships 2000 (N s/m)
    ("seed003_2r.toml", "safety.brake_kd_nm_s_per_rad", 0.1),           # ships 100
    # the emulated drives' command timeout: 1e9 s is the watchdog switched off
    ("3rrr_circle.toml", "driver.emulator.watchdog_timeout_s", 1e9),
    ("3rrr_circle.toml", "driver.emulator.watchdog_timeout_s", 1e300),
    ("stewart_motion.toml", "driver.emulator.watchdog_timeout_s", 1e9),
    ("3rrr_circle.toml", "driver.emulator.watchdog_timeout_s", 1e-300),  # would fire without end
    ("3rrr_circle.toml", "driver.enable_timeout_s", 1e300),
    ("3rrr_circle.toml", "driver.enable_timeout_s", 0.0),
    ("stewart_motion.toml", "driver.enable_timeout_s", 1e300),
    ("3rrr_circle_cia402.toml", "driver.enable_timeout_s", 0.0),
])
def test_values_off_or_too_weak_for_this_robot_are_refused(config, field, value):
    """Exit 2 naming the file and the field (``check`` and ``run`` share :func:`validate_run`; the
    emulator's table is read when the simulated stack is built, as ``check`` does)."""
    from controller.app.run import check_run_config
    from dynamics.errors import ConfigError

    cfg = RUNS / config
    with pytest.raises(ConfigError) as ei:
        check_run_config(cfg, overrides={field: value})
    assert ei.value.file == str(cfg) and ei.value.field == field, (ei.value.file, ei.value.field, str(ei.value))


@pytest.mark.parametrize("robot,value", [(r, v) for r in ("3rrr_horizontal.toml", "arm6_demo.toml")
                                         for v in (0.0, -9.0, 1e300, 0.001, math.inf)])
def test_a_robot_files_gear_ratio_is_plausible(tmp_path, robot, value):
    """``drive.gear_ratio`` (3RRR) and ``joints[i].gear_ratio`` (serial arms): 0, negative, 1e300, a
    thousandth of the shipped one: refused naming the robot file and the field (the armature
    rotor_inertia x gear_ratio^2 was 0, overflowed or was a millionth)."""
    import tomllib

    import tomli_w

    from dynamics.errors import ConfigError
    from dynamics import load_model

    data = tomllib.loads((ROBOTS / robot).read_text())
    if "drive" in data:
        data["drive"]["gear_ratio"] = value
        field = "drive.gear_ratio"
    else:
        data["joints"][1]["gear_ratio"] = value
        field = "gear_ratio"
    path = tmp_path / robot
    path.write_bytes(tomli_w.dumps(data).encode())
    with pytest.raises(ConfigError) as ei:
        load_model(path)
    assert ei.value.file == str(path) and ei.value.field.endswith(field), (ei.value.file, ei.value.field)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(config=st.sampled_from(["seed000_fast.toml", "stewart_motion.toml", "3rrr_circle.toml"]),
       log_kd=st.floats(-3.0, 1.8))     # kd dt / M_jj < 1 on these robots (explicit steps stable)
def test_an_accepted_brake_stops_the_robot_in_the_longest_brake(config, log_kd):
    """Property: a ``brake_kd`` the validation accepts takes at least 63 % (1 - 1/e) of every joint's
    speed out within the longest brake (10 s), the joint alone under the brake's damping, stepped at
    the loop's period from the model's inertia at the start; one it refuses does not, and the least
    value its message names is accepted."""
    import re

    from controller.app.run import _joint_start, load_run, validate_run
    from controller.safety import SAFETY_RANGES
    from dynamics.errors import ConfigError

    kd = 10.0 ** log_kd
    cfg = RUNS / config
    spec = load_run(cfg, overrides={"safety.brake_kd_nm_s_per_rad": kd})

    def speed_left(kd_):
        q0, X0 = _joint_start(spec)
        m = spec.model
        M = (m.mass_matrix(q0, pose=X0) if X0 is not None and "mass_matrix" in m.pose_hint_methods
             else m.mass_matrix(q0))
        v = np.ones(m.dof)
        dt = spec.period_s
        for _ in range(int(round(SAFETY_RANGES["brake_time_s"][1] / dt))):
            v = v - dt * kd_ * v / np.diag(M)        # M_jj dv/dt = -kd v, explicit steps
        return float(np.max(np.abs(v)))

    try:
        validate_run(spec)
    except ConfigError as err:
        assert err.file == str(cfg) and err.field == "safety.brake_kd_nm_s_per_rad", (err.field, str(err))
        assert speed_left(kd) > np.exp(-1.0) * 0.99
        least = float(re.search(r"use at least ([0-9.eE+-]+)", err.message).group(1))
        validate_run(load_run(cfg, overrides={"safety.brake_kd_nm_s_per_rad": 1.01 * least}))
        return
    assert speed_left(kd) <= np.exp(-1.0) * 1.01
