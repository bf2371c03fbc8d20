"""The CAN drivers' own share of a cycle for 6 and 3 axes: the driver on a replayed bus, no emulator.

Issue 38's target: the driver's share of a cycle (encode, exchange, decode, feedback) for 6 axes
<= 50 us for every protocol, beside MIT's 3-axis 32 us (``bench_cycle``: the MIT cycle with the
motors' replies replayed).  ``bench_protocols`` times ``driver.cycle`` with the emulated devices
and the plant served inside it (on hardware the drives' own CPUs); here they are taken out the
same way for every CAN protocol:

1. the shipped run is made through its emulated path, and every frame the driver's transports
   received is recorded with the loop clock's time and the number of frames the driver had sent
   on that bus before it (the devices' real codec output; CiA 402's batch exchange is declined
   there, so the driver takes its frame-by-frame path, the one a real bus takes);
2. the same run's loop is built with the **hardware** driver of the protocol (``odrive_can``,
   ``cia402_can``, ``mit_can``: :func:`drivers.registry.build_driver`'s builder, the section the
   emulated run gave it) on a minimal python-can bus (:class:`can.BusABC`) per transport, which
   checks every frame sent against the recorded one of its rank and gives a recorded frame once
   the driver has sent as many frames as it had then and the loop clock has reached its time:
   causality and timing as recorded (the frames recorded must be every frame received);
3. the replayed run's log must equal the emulated run's (every column but the timing), else the
   benchmark fails: the same commands went out and the same feedback came back.

Rows: the median of ``driver.cycle`` (timed around each call, the cycles of ``repeat`` runs after a
warm-up run; ``--quick``: one short run, no warm-up): the driver's own share, with python-can's ``BusABC.send``/``recv`` as on hardware;
``ref``: the same call in the emulated run (devices and plant inside), measured in the same process.

Run alone: ``.venv/bin/python -m benchmarks.bench_driver_share [--quick]``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
#: (config, hardware driver module, label)
CASES = (
    (ROOT / "tests" / "data" / "ur20" / "ur20_odrive_geared.toml", "odrive", "ODrive CAN, 6 axes, 400 Hz"),
    (RUNS / "3rrr_circle_cia402.toml", "cia402", "CiA 402, 3 drives, 500 Hz"),
    (RUNS / "3rrr_circle.toml", "mit", "MIT CAN, 3 drives, 1 kHz (reference)"),
)


def _replay_bus(frames, sent_before, sent_frames, now):
    """A python-can bus giving the recorded ``frames`` (fields) in order, each once the frames
    sent on it reach its ``sent_before`` count and the loop clock ``now()`` its time; every frame
    sent must be the recorded one of its rank (``sent_frames``: (id, data, remote)), else
    RuntimeError: the replay is then not the recorded run."""
    import can

    class ReplayBus(can.BusABC):
        def __init__(self):
            self.sent = 0
            self._i = 0
            self._can_protocol = can.CanProtocol.CAN_20
            super().__init__(channel="replay")

        def send(self, msg, timeout=None):
            k = self.sent
            got = (msg.arbitration_id, b"" if msg.is_remote_frame else bytes(msg.data), bool(msg.is_remote_frame))
            if k >= len(sent_frames) or sent_frames[k] != got:
                want = sent_frames[k] if k < len(sent_frames) else "nothing"
                raise RuntimeError(f"replay: frame {k} sent is {got}, the recorded run sent {want}")
            self.sent = k + 1

        def _recv_internal(self, timeout):
            i = self._i
            if i >= len(frames):
                return None, False
            n_sent, t, f = sent_before[i], frames[i][0], frames[i][1]
            if self.sent < n_sent or now() + 1e-12 < t:
                return None, False
            self._i = i + 1
            arb, data, ts, err, remote, ext, dlc = f
            msg = can.Message(timestamp=time.time(), arbitration_id=arb, data=data, is_extended_id=ext,
                              is_remote_frame=remote, is_error_frame=err, dlc=dlc if remote else len(data),
                              is_rx=True, channel="replay", check=False)
            return msg, False

    return ReplayBus()


def _timed_cycle(driver, acc):
    cycle = driver.cycle
    pc = time.perf_counter

    def timed(cmd):
        t0 = pc()
        fb = cycle(cmd)
        acc.append(pc() - t0)
        return fb
    driver.cycle = timed


def _record(spec, module, out: Path):
    """The emulated run, recording what each of its driver's transports received: (result, log,
    the hardware builder's section, {transport name: [(sent before, t, fields)]}, cycle times)."""
    import importlib

    from controller.app import run as api
    from controller.telemetry import read_log

    real = importlib.import_module(f"drivers.{module}")
    build = real.build
    got = {}

    def capturing_build(section, **kw):
        got["section"] = section
        return build(section, **kw)

    real.build = capturing_build
    try:
        run = api.build_run(spec, out_dir=out)
    finally:
        real.build = build
    clock = run.clock
    records, sent_frames, start = {}, {}, {}
    for t in run.driver.transports:
        rec = records[t.name] = []
        sent = sent_frames[t.name] = []
        start[t.name] = t.frames_received
        send, send_batch, recv_fields = t.send, t.send_batch, t.recv_fields

        def c_send(arb, data=b"", is_extended_id=False, *, is_remote=False, dlc=None, _send=send, _out=sent):
            _send(arb, data, is_extended_id, is_remote=is_remote, dlc=dlc)
            _out.append((arb, b"" if is_remote else bytes(data), bool(is_remote)))

        def c_send_batch(frames, _send_batch=send_batch, _out=sent):
            _send_batch(frames)
            _out.extend((arb, b"" if r is not None else bytes(d), r is not None) for arb, d, r in frames)

        def c_recv_fields(timeout_s=0.0, _recv=recv_fields, _rec=rec, _out=sent):
            f = _recv(timeout_s)
            if f is not None:
                _rec.append((len(_out), clock.now(), f))
            return f

        # (recv_fields_upto reads through the instance's recv_fields, this one, once it is set)
        t.send, t.send_batch, t.recv_fields = c_send, c_send_batch, c_recv_fields
        # the batch exchanges (an inline bus's: CiA 402, MIT) declined: the frame-by-frame path
        t.exchange_fields = lambda frames, n: None
        t.serve_batch = lambda arbs, payloads, out_arb, out: None
    acc = []
    _timed_cycle(run.loop.driver, acc)
    res = run.execute()
    for t in run.driver.transports:
        if len(records[t.name]) != t.frames_received - start[t.name]:
            raise RuntimeError(f"{spec.name}: {len(records[t.name])} frames recorded on {t.name}, "
                               f"{t.frames_received - start[t.name]} received")
    return res, read_log(out), got["section"], (records, sent_frames), np.array(acc)


def _replayed(spec, module, section, records, out: Path):
    """The run's loop with the hardware driver on replaying buses: (result, log, cycle times)."""
    import importlib

    from controller.clock import LockstepClock
    from controller.loop import ControlLoop
    from controller.telemetry import TelemetryWriter, read_log
    from drivers.transport import CanTransport

    from controller.app import run as api

    real = importlib.import_module(f"drivers.{module}")
    clock = LockstepClock()
    transports = {}
    records, sent_frames = records
    for name, rec in records.items():
        bus = _replay_bus([(t, f) for _, t, f in rec], [n for n, _, _ in rec], sent_frames[name], clock.now)
        transports[name] = CanTransport.from_bus(bus, name=name)
    driver = real.build(section, now=clock.now, transports=transports)
    _, X0 = api._joint_start(spec)
    law = api.make_controller(spec, pose0=X0)
    n_axes = len(api.controller_quantities(spec.model, spec.space))
    tel = TelemetryWriter(out, spec.model.dof, n_axes, buffer_rows=spec.telemetry_buffer_rows)
    loop = ControlLoop(driver, law, spec.trajectory, api.make_safety(spec, pose0=X0), clock,
                       period_s=spec.period_s, telemetry=tel, duration_s=spec.duration_s, handle_signals=False)
    acc = []
    _timed_cycle(driver, acc)
    try:
        res = loop.run()
    finally:
        driver.close()
    return res, read_log(out), np.array(acc)


def _check_same(log_a, log_b, what):
    for name in log_a.dtype.names:
        if name in ("compute_s", "lateness_s"):
            continue
        if not np.array_equal(log_a[name], log_b[name], equal_nan=log_a[name].dtype.kind == "f"):
            raise RuntimeError(f"{what}: the replayed run differs from the emulated run in column {name!r}")


def run(quick: bool = False) -> list[dict]:
    from controller.app import run as api

    duration = 0.5 if quick else 2.0
    repeat = 1 if quick else 3
    warm = 0 if quick else 1             # rounds not counted (imports, numba caches, allocations)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for path, module, label in CASES:
            spec = api.load_run(path, duration_s=duration)
            own, emulated = [], []
            n = 0
            for r in range(warm + repeat):
                res_e, log_e, section, records, acc_e = _record(spec, module, tmp / f"{spec.name}-e{r}")
                res_r, log_r, acc_r = _replayed(spec, module, section, records, tmp / f"{spec.name}-r{r}")
                _check_same(log_e, log_r, spec.name)
                for key, res in (("emulated", res_e), ("replayed", res_r)):
                    if res.status != "completed":
                        raise RuntimeError(f"{spec.name} {key}: {res.status}: {res.faults[:1]}")
                if r < warm:
                    continue
                own.append(acc_r)
                emulated.append(acc_e)
                n = res_r.n_cycles
            own_all, emu_all = np.concatenate(own), np.concatenate(emulated)
            med, p99, ref = (float(np.median(own_all)) * 1e6, float(np.quantile(own_all, 0.99)) * 1e6,
                             float(np.median(emu_all)) * 1e6)
            axes = spec.model.dof
            rows.append({"case": f"{label}: driver.cycle, replayed bus", "median_us": med, "p99_us": p99,
                         "ref": "driver.cycle, emulated run on its frame path (devices and plant inside)", "ref_median_us": ref,
                         "ratio": med / ref, "per_axis_us": med / axes,
                         "note": f"{path.name}, {n} cycles x {repeat} runs; hardware driver "
                                 f"drivers.{module} on {len(records[0])} python-can replay bus(es); "
                                 f"log equal to the emulated run's; target for 6 axes <= 50 us"})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_driver_share [--quick]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_driver_share", *sys.argv[1:]]))
