"""Bus-load budget: frame lengths against the published worst-case formula, MIT/ODrive verdicts."""

import pytest

from drivers import busload as bl
from dynamics.errors import ConfigError


def test_classic_frame_bits_known_values():
    # Davis et al. 2007: 8-byte base frame 111 bits nominal, 135 worst case; extended 131 / 160
    assert bl.classic_frame_bits(8, stuffing="none") == 111
    assert bl.classic_frame_bits(8) == 135
    assert bl.classic_frame_bits(8, extended=True, stuffing="none") == 131
    assert bl.classic_frame_bits(8, extended=True) == 160
    # 0 bytes (remote frame): 47 nominal + floor(33/4) = 8 stuff bits
    assert bl.classic_frame_bits(0) == 55
    # MIT classic reply, 6 bytes: 95 + floor(81/4) = 115
    assert bl.classic_frame_bits(6) == 115
    with pytest.raises(ConfigError):
        bl.classic_frame_bits(9)
    with pytest.raises(ConfigError):
        bl.classic_frame_bits(8, stuffing="some")


def test_fd_frames():
    assert bl.fd_payload_length(9) == 12 and bl.fd_payload_length(33) == 48 and bl.fd_payload_length(8) == 8
    nom, dat = bl.fd_frame_bits(8, stuffing="none")
    # 17 arbitration + 12 tail at nominal; ESI+DLC+64 data + 4 SBC + 17 CRC + 6 fixed stuff + delimiter
    assert (nom, dat) == (29, 1 + 4 + 64 + 4 + 17 + 6 + 1)
    nom64, dat64 = bl.fd_frame_bits(64, stuffing="none")
    assert dat64 == 1 + 4 + 512 + 4 + 21 + 7 + 1
    fd = bl.BusSpec(1e6, fd=True, data_bitrate_bit_s=5e6)
    classic = bl.BusSpec(1e6)
    assert bl.frame_time_s(8, fd) < 0.5 * bl.frame_time_s(8, classic)
    # FD with equal rates is longer than classic for 8 bytes (bigger CRC, extra control bits)
    assert bl.frame_time_s(8, bl.BusSpec(1e6, fd=True), stuffing="none") > bl.frame_time_s(8, classic, stuffing="none")


def test_frame_rate_capacity_of_1mbit_bus():
    t8 = bl.frame_time_s(8, bl.BusSpec(1e6))
    assert 1.0 / t8 == pytest.approx(7407.4, abs=0.1)     # worst-case 8-byte frames per second
    assert 1.0 / bl.frame_time_s(6, bl.BusSpec(1e6)) == pytest.approx(8695.7, abs=0.1)


def test_six_mit_at_1khz_do_not_fit_one_bus():
    rep = bl.mit_budget(6, 1000.0)
    assert rep.verdict == "over" and not rep.fits
    (ld,) = rep.loads
    assert ld.utilisation == pytest.approx(6 * (135 + 115) * 1e-6 * 1000)   # 1.5
    assert ld.frames_per_s == 12000
    text = " ".join(rep.remedies)
    assert "split the 6 devices over 3 buses" in text
    assert "lower the loop rate to <= 466 Hz" in text
    assert "CAN FD" in text
    assert "OVER" in rep.summary()
    # even without any stuffing six do not fit (1236 bits per 1 ms cycle)
    assert bl.mit_budget(6, 1000.0, stuffing="none").verdict == "over"
    # and the suggested split really fits
    two = bl.budget({"a": (bl.BusSpec(name="a"), bl.mit_flows(2, 1000.0)),
                     "b": (bl.BusSpec(name="b"), bl.mit_flows(2, 1000.0)),
                     "c": (bl.BusSpec(name="c"), bl.mit_flows(2, 1000.0))}, 1000.0)
    assert two.verdict == "ok" and two.remedies == ()


def test_three_mit_at_1khz_fit():
    rep = bl.mit_budget(3, 1000.0)
    assert rep.fits and rep.verdict == "tight"          # 75 % worst case
    assert rep.loads[0].cycle_time_s == pytest.approx(750e-6)
    assert bl.mit_budget(3, 1000.0, stuffing="none").verdict == "ok"  # 61.8 % nominal
    assert bl.mit_budget(2, 1000.0).verdict == "ok" and bl.mit_budget(2, 1000.0).remedies == ()


def test_odrive_budget_and_rate_remedy():
    rep = bl.odrive_budget(4, 1000.0, heartbeat_rate_hz=10.0)
    (ld,) = rep.loads
    # 4 x (torque 8 B as in the DBC: 135 bits + estimates 8 B: 135 bits) per ms + 40 heartbeats/s
    assert ld.utilisation == pytest.approx(4 * (135 + 135) * 1e-3 + 40 * 135e-6)
    rtr = bl.odrive_budget(4, 1000.0, feedback="rtr")
    assert rtr.loads[0].utilisation > ld.utilisation
    slow = bl.odrive_budget(6, 500.0, bus=bl.BusSpec(500_000.0))
    assert slow.verdict == "over"
    assert any("raise the bit rate to 1 Mbit/s" in r for r in slow.remedies)
    with pytest.raises(ConfigError):
        bl.odrive_flows(2, 100.0, feedback="poll")
    with pytest.raises(ConfigError):
        bl.BusSpec(0.0)


def test_report_str_is_the_summary():
    rep = bl.mit_budget(6, 1000.0)
    assert str(rep) == rep.summary() and "remedy:" in str(rep)


def test_odrive_rtr_feedback_counts_requests_and_answers():
    bc = {f.name: f for f in bl.odrive_flows(2, 1000.0)}
    rtr = {f.name: f for f in bl.odrive_flows(2, 1000.0, feedback="rtr", torque_feedback="iq")}
    assert "ODrive RTR Encoder_Estimates" not in bc
    for name in ("ODrive RTR Encoder_Estimates", "ODrive Encoder_Estimates", "ODrive RTR Get_Iq", "ODrive Get_Iq"):
        assert rtr[name].rate_hz == 1000.0 and rtr[name].count == 2
    with pytest.raises(ConfigError):
        bl.odrive_flows(2, 100.0, feedback="rtr", torque_feedback="current")


def test_run_budget_uses_the_drivers_feedback_setting():
    """stewart_motion.toml asks for estimates by RTR (torque_feedback none): 2 axes per bus x
    (torque + RTR + answer) at 1 kHz + heartbeats; the budget used to count broadcasts only."""
    from pathlib import Path

    from controller.app.run import bus_budget, load_run

    runs = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"
    rep = bus_budget(load_run(runs / "stewart_motion.toml"))
    assert [round(ld.frames_per_s) for ld in rep.loads] == [6020] * 3
    rep = bus_budget(load_run(runs / "stewart_motion.toml", overrides={"driver.feedback": "broadcast"}))
    assert [round(ld.frames_per_s) for ld in rep.loads] == [4020] * 3
