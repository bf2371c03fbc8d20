"""Full sessions: the real MIT / ODrive drivers against the emulators on a virtual bus."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics.config import Section
from dynamics.errors import ConfigError, DeviceFaultError, DriverError
from drivers.base import Command
from drivers.codecs import mit as mitc
from drivers.codecs import odrive as odc
from drivers.registry import build_driver
from drivers.sim import build_simulated
from drivers.sim.build import EmulatedDriver
from drivers.sim.direct import DirectPlantDriver
from dynamics.toy_models import PlanarTwoLink

MODEL = PlanarTwoLink()


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


#: the emulators are served inline (in the driver's thread, as lock-step runs are by default):
#: a serving thread processes a frame at the clock's time when it gets to it, so on a loaded
#: machine it could apply a command after the test moved the clock on (the broadcast ODrive
#: driver waits for no reply), and the runs below compare physics to the bit
SERVE = "inline"


def _mit_cfg(**extra):
    cfg = {"type": "sim_mit_can", "reply_timeout_s": 0.25,
           "plant": {"mass_factor": 1.1, "q0": [0.1, 0.2]},
           "emulator": {"variant": "cubemars8", "serve": SERVE},
           "joints": [{"can_id": 1, "model": "AK80-9", "gear_ratio": 6.0, "sign": -1,
                       "offset_rad": 0.05, "efficiency": 0.9},
                      {"can_id": 2, "model": "AK80-9"}]}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return cfg


def _odrive_cfg(**extra):
    cfg = {"type": "sim_odrive_can", "reply_timeout_s": 0.25, "feedback": "broadcast",
           "plant": {"mass_factor": 1.1, "q0": [0.1, 0.2]},
           "emulator": {"heartbeat_period_s": 0.01, "encoder_period_s": 0.001, "serve": SERVE},
           "joints": [{"node_id": 1, "gear_ratio": 6.0, "sign": -1, "torque_constant_nm_per_a": 0.08},
                      {"node_id": 2}]}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return cfg


def _build(cfg, clock):
    return build_driver(Section(cfg, "sim.toml", "driver"), now=clock, model=MODEL)


def _torques(k):
    return np.array([0.4 * np.sin(0.02 * k), 0.1 * np.cos(0.03 * k)])


def _run(drv, clock, n, t0=0.0):
    out = []
    for k in range(1, n + 1):
        clock.t = t0 + k * 1e-3
        out.append(drv.cycle(Command(_torques(k))))
    return out


# ---------------------------------------------------------------------------
# MIT
# ---------------------------------------------------------------------------
def test_mit_session_tracks_the_plant_and_is_deterministic():
    results = []
    for _ in range(2):
        clock = Clock()
        drv = _build(_mit_cfg(), clock)
        try:
            assert isinstance(drv, EmulatedDriver)
            fb0 = drv.enable()
            assert fb0.fresh.all() and fb0.enabled.all()
            fbs = _run(drv, clock, 150)
            assert all(fb.fresh.all() for fb in fbs)
            assert all(fb.info["missing"] == 0 for fb in fbs)
            fb = fbs[-1]
            q_true = drv.plant.state.q
            # feedback = true state to the protocol's 16-bit position resolution (25 rad / 65535)
            # (joint 0 has a 6:1 gear, so 6x finer on the joint side)
            assert abs(fb.position_rad[0] - q_true[0]) <= 25.0 / 65535 / 6 + 1e-12
            assert abs(fb.position_rad[1] - q_true[1]) <= 25.0 / 65535 + 1e-12
            assert drv.emulators[0].commands_applied(1) == 150
            results.append(np.array([f.position_rad for f in fbs]))
        finally:
            drv.close()
            drv.close()
    np.testing.assert_array_equal(results[0], results[1])


def _mit_quantised(tau):
    """Joint torques after the MIT protocol's 12-bit quantisation (mapping of _mit_cfg; the
    driver rounds to the nearest step by default)."""
    lim = mitc.MIT_MODELS["AK80-9"]
    out = []
    for t, (g, s, e) in zip(tau, [(6.0, -1, 0.9), (1.0, 1, 1.0)]):
        t_m = s * t / (g * e)
        c = mitc.decode_command(mitc.encode_command(0, 0, 0, 0, t_m, lim, nearest=True), lim)
        out.append(s * c.t_nm * g * e)
    return np.array(out)


def test_mit_session_equals_direct_backend_with_quantised_torques():
    clock_a, clock_b = Clock(), Clock()
    emu = _build(_mit_cfg(), clock_a)
    direct = _build({"type": "sim_direct", "plant": {"mass_factor": 1.1, "q0": [0.1, 0.2]}}, clock_b)
    assert isinstance(direct, DirectPlantDriver)
    try:
        emu.enable()
        direct.enable()
        a = _run(emu, clock_a, 200)
        for k in range(1, 201):
            clock_b.t = k * 1e-3
            b = direct.cycle(Command(_mit_quantised(_torques(k))))
        # same torques reach both plants: the true states agree to rounding
        np.testing.assert_allclose(emu.plant.state.q, direct.plant.state.q, atol=1e-9)
        # and the MIT feedback is the state to 16-bit resolution
        np.testing.assert_allclose(a[-1].position_rad, b.position_rad, atol=25.0 / 65535)
    finally:
        emu.close()
        direct.close()


def test_mit_watchdog_fault_silence_and_disable():
    clock = Clock()
    drv = _build(_mit_cfg(emulator={"watchdog_timeout_s": 0.02}), clock)
    emu = drv.emulators[0]
    plant = drv.plant
    try:
        drv.enable()
        _run(drv, clock, 20)
        # the loop stalls for 100 ms: the watchdog drops the torque at t_last + 20 ms
        clock.t = 0.12
        drv.sync()
        assert plant.t_s == 0.12
        np.testing.assert_array_equal(plant.applied_torque_nm, [0.0, 0.0])
        fb = drv.cycle(Command(np.array([0.3, 0.3])))
        assert fb.fresh.all()
        # reported torque: zero to one 12-bit LSB (36 N m / 4095, times gear 6 * 0.9 on joint 0)
        assert np.all(np.abs(fb.torque_nm) <= np.array([36 / 4095 * 5.4, 36 / 4095]) + 1e-12)
        # over-temperature on motor 2: reported, torque zero, motor mode left
        emu.inject_fault(2, 1, temperature_c=90)
        clock.t = 0.121
        fb = drv.cycle(Command(np.array([0.3, 0.3])))
        assert list(fb.fault) == [0, 1]
        assert fb.info["temperature_c"][1] == 90
        assert not emu.motor_mode(2)
        clock.t = 0.122
        drv.cycle(Command(np.array([0.3, 0.3])))
        assert plant.applied_torque_nm[1] == 0.0
        # a silent motor: not fresh, last values kept, the other joint unaffected
        emu.set_silent(1)
        clock.t = 0.123
        prev = drv.cycle(Command(np.array([0.3, 0.3])))
        clock.t = 0.124
        fb = drv.cycle(Command(np.array([0.3, 0.3])))
        assert list(fb.fresh) == [False, True] and fb.info["missing"] == 1
        assert fb.position_rad[0] == prev.position_rad[0] or not prev.fresh[0]
        emu.set_silent(1, False)
        drv.disable()
        assert not emu.motor_mode(1) and not emu.motor_mode(2)
        with pytest.raises(DriverError):
            drv.cycle(Command(np.zeros(2)))
    finally:
        drv.close()


def test_mit_disable_repeats_a_lost_exit():
    """The EXIT_MOTOR_MODE frame to one motor is lost: disable() sees no reply from it and sends
    the zero command and the exit once more, so the motor does leave motor mode."""
    clock = Clock()
    drv = _build(_mit_cfg(), clock)
    emu = drv.emulators[0]
    inner = drv.inner
    bus = inner._buses[0]
    send_frame = bus.send_frame
    lost = []

    def lossy(frame):
        if frame.arbitration_id == 2 and bytes(frame.data) == mitc.EXIT_MOTOR_MODE and not lost:
            lost.append(frame)
            return
        send_frame(frame)

    bus.send_frame = lossy
    try:
        drv.enable()
        _run(drv, clock, 5)
        drv.disable()
        assert lost and not emu.motor_mode(1) and not emu.motor_mode(2)
        assert inner.exit_unconfirmed == []
        # a motor that stays silent is reported, after one repeat, not waited for forever
        drv.enable()
        emu.set_silent(2)
        drv.disable()
        assert inner.exit_unconfirmed == [1]
    finally:
        drv.close()


@pytest.mark.parametrize("side", ["send", "recv"])
def test_mit_dropped_or_corrupt_frames_never_act_and_show_stale(side):
    clock = Clock()
    cfg = _mit_cfg(reply_timeout_s=0.03,
                   faults={"seed": 4, "drop_prob": 0.15, "corrupt_prob": 0.1, "side": side})
    drv = _build(cfg, clock)
    emu = drv.emulators[0]
    fbus = drv.fault_buses[0]
    try:
        # enable retries ENTER_MOTOR_MODE until every motor answered
        drv.enable()
        applied0 = [emu.commands_applied(i) for i in (1, 2)]
        fbs = _run(drv, clock, 60)
        fresh = np.array([fb.fresh for fb in fbs])
        drv.sync()
        # replies that missed their cycle's deadline (only on a starved machine) are
        # counted as "late" by the next cycle, or still queued at the end
        late = sum(fb.info["late"] for fb in fbs[1:]) + drv.inner.transports[0].drain()
        applied = [emu.commands_applied(i) - a for i, a in zip((1, 2), applied0)]
        stale = int((~fresh).sum())
        assert stale > 0
        if side == "send":
            # a lost or truncated command is never applied, and never answered
            assert sum(applied) == int(fresh.sum()) + late
            assert all(a >= f for a, f in zip(applied, fresh.sum(axis=0)))
        else:
            # every command arrived; lost or corrupt replies show as not fresh
            assert applied == [60, 60]
            assert sum(fb.info["corrupt"] for fb in fbs) > 0
        assert fbus.stats.dropped + fbus.stats.corrupted >= stale
    finally:
        drv.close()


# ---------------------------------------------------------------------------
# ODrive
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("feedback", ["broadcast", "rtr"])
def test_odrive_session_tracks_the_plant(feedback):
    clock = Clock()
    drv = _build(_odrive_cfg(feedback=feedback), clock)
    try:
        fb0 = drv.enable()
        assert fb0.enabled.all()
        fbs = _run(drv, clock, 150)
        assert all(fb.fresh.all() for fb in fbs)
        fb = fbs[-1]
        np.testing.assert_allclose(fb.position_rad, drv.plant.state.q, atol=1e-5)
        # Iq feedback times the torque constant: the joint torque applied up to the
        # last command (float32 on the wire)
        np.testing.assert_allclose(fb.torque_nm, _torques(149), atol=1e-6)
        drv.sync()
        np.testing.assert_allclose(drv.plant.applied_torque_nm, _torques(149), atol=1e-6)
    finally:
        drv.close()


def test_odrive_physics_independent_of_feedback_mode():
    states = []
    for feedback in ("broadcast", "rtr"):
        clock = Clock()
        drv = _build(_odrive_cfg(feedback=feedback), clock)
        try:
            drv.enable()
            _run(drv, clock, 80)
            drv.sync()
            states.append(drv.plant.state.q)
        finally:
            drv.close()
    np.testing.assert_array_equal(states[0], states[1])


def test_odrive_dropped_or_corrupt_commands_never_reach_the_plant():
    clock = Clock()
    # OdriveCanDriver.enable does not resend Set_Axis_State, so a lost one fails
    # the enable: the faults start once the axes are in closed loop
    drv = _build(_odrive_cfg(reply_timeout_s=0.03,
                             faults={"seed": 9, "drop_prob": 0.2, "corrupt_prob": 0.1,
                                     "side": "send", "during_enable": False}), clock)
    emu = drv.emulators[0]
    fbus = drv.fault_buses[0]
    try:
        drv.enable()
        assert fbus.active
        before = emu.commands_applied(1) + emu.commands_applied(2)
        dropped_before, corrupted_before = fbus.stats.dropped, fbus.stats.corrupted
        ignored_before = emu.frames_ignored
        fbs = _run(drv, clock, 50)
        drv.sync()
        applied = emu.commands_applied(1) + emu.commands_applied(2) - before
        dropped = fbus.stats.dropped - dropped_before
        # a truncated 8-byte Set_Input_Torque that still holds the whole float32 is the same command
        # to the firmware (it reads the signals it needs); one cut inside the float is ignored
        ignored = emu.frames_ignored - ignored_before
        assert dropped > 0 and fbus.stats.corrupted - corrupted_before >= max(ignored, 1)
        # broadcast feedback: the driver sends exactly one Set_Input_Torque per axis and cycle
        assert applied == 2 * 50 - dropped - ignored
        assert all(fb.fresh.all() for fb in fbs)  # feedback is broadcast: not affected
    finally:
        drv.close()


def test_two_buses_one_host_deterministic_with_a_stall():
    def run():
        clock = Clock()
        cfg = _odrive_cfg(emulator={"watchdog_timeout_s": 0.02},
                          buses={"left": {"interface": "virtual"}, "right": {"interface": "virtual"}})
        cfg["joints"] = [dict(cfg["joints"][0], bus="left"), dict(cfg["joints"][1], bus="right")]
        drv = _build(cfg, clock)
        try:
            assert len(drv.hosts) == 1 and len(drv.hosts[0].buses) == 2
            drv.enable()
            fbs = _run(drv, clock, 30)
            clock.t = 0.08                       # stall: both watchdogs fire at 0.05 s
            drv.sync()
            fb = drv.cycle(Command(np.zeros(2)))
            assert not fb.enabled.any()
            return np.array([f.position_rad for f in fbs]), drv.plant.state.q
        finally:
            drv.close()

    (a, qa), (b, qb) = run(), run()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(qa, qb)


def test_odrive_watchdog_error_and_recovery():
    clock = Clock()
    drv = _build(_odrive_cfg(emulator={"watchdog_timeout_s": 0.02}), clock)
    emu = drv.emulators[0]
    try:
        drv.enable()
        _run(drv, clock, 20)
        clock.t = 0.2  # the loop stalls: both axes trip their watchdog at 0.04 s
        drv.sync()
        fb = drv.cycle(Command(np.zeros(2)))
        assert not fb.enabled.any()
        assert all(odc.axis_error_names(int(e)) == ["WATCHDOG_TIMER_EXPIRED"] for e in fb.fault)
        assert emu.axis_state(1) == odc.AxisState.IDLE
        clock.t = 0.21
        with pytest.raises(DeviceFaultError, match="WATCHDOG"):
            drv.enable()
        drv.clear_errors()
        clock.t = 0.22
        fb = drv.enable()
        assert fb.enabled.all() and emu.axis_error(1) == 0
    finally:
        drv.close()


def test_odrive_enable_asks_again_when_the_state_request_is_lost():
    """A lost Set_Axis_State frame (CAN has no end-to-end ack): the axis keeps reporting IDLE
    without an error, and enable() repeats the request instead of timing out."""
    clock = Clock()
    drv = _build(_odrive_cfg(enable_timeout_s=2.0), clock)
    emu = drv.emulators[0]
    inner = drv.inner
    send = inner._send
    dropped = []

    def lossy(j, cmd, data=b"", *, remote=False):
        if cmd == odc.Cmd.SET_AXIS_STATE and j == 1 and not dropped:
            dropped.append(cmd)       # the first request to the second axis never arrives
            return
        send(j, cmd, data, remote=remote)

    inner._send = lossy
    try:
        fb = drv.enable()
        assert dropped and fb.enabled.all()
        assert emu.axis_state(2) == odc.AxisState.CLOSED_LOOP_CONTROL
        assert inner.state_requests_resent >= 1
    finally:
        drv.close()


def test_odrive_enable_feeds_the_axes_already_in_closed_loop_while_it_waits_for_the_others():
    """An axis that reached closed loop keeps getting frames while enable() waits for another
    (here eight lost Set_Axis_State frames, each asked again after 50 ms of heartbeats): with a
    watchdog shorter than that wait, an unfed first axis tripped and enable() failed on a
    healthy drive."""
    import time as _time

    warm = _build(_odrive_cfg(), Clock())          # the compiled kernels loaded: no first-use stall
    try:
        warm.enable()
        _run(warm, Clock(), 3)
    finally:
        warm.close()
    t0 = [None]                                    # the clock stands at 0 until the enable

    def clock():                                   # loop time passes during enable (a wall clock)
        return 0.0 if t0[0] is None else _time.monotonic() - t0[0]
    # a coarse plant step: its Python model must keep up with the wall clock on a loaded machine
    drv = _build(_odrive_cfg(enable_timeout_s=4.0, emulator={"watchdog_timeout_s": 0.25},
                             plant={"substeps": 1, "dt_max_s": 0.01}), clock)
    t0[0] = _time.monotonic()
    emu = drv.emulators[0]
    inner = drv.inner
    send = inner._send
    dropped = []

    def lossy(j, cmd, data=b"", *, remote=False):
        if cmd == odc.Cmd.SET_AXIS_STATE and j == 1 and len(dropped) < 8:
            dropped.append(clock())   # the second axis' first eight requests never arrive
            return
        send(j, cmd, data, remote=remote)

    inner._send = lossy
    try:
        fb = drv.enable()
        assert len(dropped) == 8 and inner.state_requests_resent >= 8
        assert clock() > 0.35                      # longer than the watchdog: the first axis was fed
        assert fb.enabled.all() and not fb.fault.any()
        assert emu.axis_error(1) == 0 and emu.axis_state(1) == odc.AxisState.CLOSED_LOOP_CONTROL
    finally:
        drv.close()


def test_odrive_injected_error_is_reported_and_disable_idles():
    clock = Clock()
    drv = _build(_odrive_cfg(), clock)
    emu = drv.emulators[0]
    try:
        drv.enable()
        _run(drv, clock, 5)
        emu.inject_error(2, 0x2000)
        fbs = _run(drv, clock, 20, t0=0.005)
        fb = fbs[-1]
        assert fb.fault[1] == 0x2000 and not fb.enabled[1] and fb.enabled[0]
        assert drv.plant.applied_torque_nm[1] == 0.0
        drv.disable()
        drv.sync()
        assert emu.axis_state(1) == odc.AxisState.IDLE and emu.axis_state(2) == odc.AxisState.IDLE
    finally:
        drv.close()


# ---------------------------------------------------------------------------
# builder errors
# ---------------------------------------------------------------------------
def test_build_simulated_direct_and_config_errors():
    clock = Clock()
    drv = build_simulated(Section({"type": "sim_direct", "plant": {"seed": 1,
                                                                   "position_noise_std_rad": 1e-3}},
                                  "x.toml", "driver"), model=MODEL, now=clock)
    assert isinstance(drv, DirectPlantDriver)
    drv.close()
    with pytest.raises(ConfigError) as ei:
        _build({"type": "sim_direct", "plant": {"mass_factr": 1.1}}, clock)
    assert ei.value.field == "driver.plant.mass_factr" and ei.value.file == "sim.toml"
    with pytest.raises(ConfigError) as ei:
        _build({"type": "sim_direct", "plant": {"q0": [0.0]}}, clock)
    assert ei.value.field == "driver.plant.q0"
    with pytest.raises(ConfigError) as ei:
        _build({"type": "sim_direct", "plant": {"position_noise_std_rad": 1e-3}}, clock)
    assert ei.value.field == "driver.plant.seed"
    with pytest.raises(ConfigError) as ei:
        _build(_mit_cfg(emulator={"variant": "classic7"}), clock)
    assert ei.value.field == "driver.emulator.variant"
    with pytest.raises(ConfigError) as ei:
        _build(_mit_cfg(faults={"drop_prob": 0.1}), clock)
    assert ei.value.field == "driver.faults.seed"


def test_mit_reply_quantisation_matches_codec():
    """A single reply decoded by the real driver equals the codec's quantisation of the state
    (parity with the codec, which ``test_mit_thirdparty.py::test_reply_decoding_exact_vs_both_libraries``
    checks independently), and, independent of the codec, each joint is at its plant start
    within half a reply step: 2 * 12.5 rad / 65535 = 0.38 mrad on the motor, divided by the
    gear ratio 6 on joint 1."""
    clock = Clock()
    drv = _build(_mit_cfg(), clock)
    try:
        fb = drv.enable()
        lim = mitc.MIT_MODELS["AK80-9"]
        q = drv.plant.state.q[1]
        r = mitc.decode_reply(mitc.encode_reply(2, q, 0.0, 0.0, lim), lim, centered=True)
        assert fb.position_rad[1] == r.p_rad
        assert fb.velocity_rad_s[1] == r.v_rad_s and abs(r.v_rad_s) < 1e-12   # at rest: zero, not -1/2 LSB
        step = 2 * 12.5 / 65535                     # AK80-9 position range +-12.5 rad, 16 bits
        assert abs(fb.position_rad[0] - 0.1) <= 0.5 * step / 6.0 + 1e-12    # q0 of the run's plant
        assert abs(fb.position_rad[1] - 0.2) <= 0.5 * step + 1e-12
    finally:
        drv.close()
