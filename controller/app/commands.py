"""Implementations of the CLI sub-commands.

Only :mod:`controller.app.cli` and this module write to the terminal; the library
code returns values and raises errors from the one error tree.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dynamics import load_model
from dynamics.config import parse_sets, read_toml, write_toml
from dynamics.errors import ConfigError, SafetyError, TorqueloopError

__all__ = ["check", "run", "plot", "export", "animate", "tune", "robustness", "identify", "bringup", "parse_sets",
           "format_summary"]


def check(path: str, overrides: dict | None = None) -> str:
    """Validate a robot file or a run config; return a human-readable report.

    ``overrides`` (dotted keys, as ``run --set``) apply to run configs only.
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError("file not found", file=str(p))
    is_robot = p.suffix.lower() == ".urdf" or "type" in read_toml(p)
    if is_robot:
        if overrides:
            raise ConfigError("--set applies to run configs, not robot files", file=str(p))
        return load_model(p).summary()
    from .run import check_run_config
    return check_run_config(p, overrides=overrides)


def _bars_on(stream) -> bool:
    """Whether progress bars go to ``stream``: a terminal, and tqdm installed."""
    try:
        if not stream.isatty():
            return False
        import tqdm  # noqa: F401
    except (ImportError, AttributeError, ValueError):
        return False
    return True


def progress_bar(total: float, desc: str, unit: str, stream=None):
    """A ``tqdm`` progress bar on ``stream`` (default stderr) when it is a terminal, else None:
    nothing extra goes to a pipe or a file (nor without tqdm)."""
    stream = sys.stderr if stream is None else stream
    if not _bars_on(stream):
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, file=stream, leave=True, dynamic_ncols=True,
                mininterval=0.25, bar_format="  {desc} {percentage:5.1f}%|{bar}| {n:.2f}/{total:.2f} {unit} "
                                             "[{elapsed}<{remaining}]" if unit == "s" else None)


class _Progress:
    """A clock wrapper that shows an offline run's progress (simulated time) on a terminal."""

    def __init__(self, inner, total_s: float, stream=None, every_s: float = 0.25):
        self.inner, self.total_s = inner, max(total_s, 1e-9)
        self.every_s = every_s
        self._last_wall = 0.0
        self._t0 = None
        self._bar = progress_bar(self.total_s, "run", "s", stream)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def now(self):
        return self.inner.now()

    def start(self):
        return self.inner.start()

    def stop(self):
        return self.inner.stop()

    def wait_until(self, t_s):
        late = self.inner.wait_until(t_s)
        if self._t0 is None:
            self._t0 = t_s
        w = time.perf_counter()
        if w - self._last_wall >= self.every_s:
            self._last_wall = w
            self._draw(t_s - self._t0)
        return late

    def _draw(self, t):
        if self._bar is not None:
            self._bar.n = min(max(t, 0.0), self.total_s)
            self._bar.refresh()

    def done(self):
        if self._bar is not None:
            self._draw(self.total_s)
            self._bar.close()


def run_progress(no_progress: bool = False):
    """What wraps an offline run's clock to show its progress on a terminal
    (``wrap(clock, total_s)``, with ``done()``), or None (a pipe, ``--no-progress``)."""
    if no_progress or not _bars_on(sys.stderr):
        return None
    return _Progress


def _fmt(v, unit="", scale=1.0, digits=4) -> str:
    if v is None:
        return "-"
    return f"{float(v) * scale:.{digits}g}{unit}"


def format_summary(spec, result, metrics: dict) -> str:
    """The end-of-run summary table (units, timing health: :func:`controller.app.report.format_summary`)."""
    from .report import format_summary as _format

    return _format(spec, result, metrics)


def _signal_warnings() -> list[str]:
    """What the signals this process inherited ignored mean for the run (said at start)."""
    from ..loop import ALWAYS_HANDLED, ignored_stop_signals

    out = []
    for sig in ignored_stop_signals():
        if sig.name in ALWAYS_HANDLED:
            out.append(f"{sig.name} was inherited ignored (a background job?): the run handles it anyway, "
                       f"{sig.name} stops the robot (safe stop)")
        else:
            out.append(f"{sig.name} is ignored (started with nohup?): closing the terminal will NOT stop the "
                       "robot; stop it with Ctrl-C or `kill -TERM` (safe stop)")
    return out


def _confirm_hardware(spec, args) -> None:
    if not spec.hardware:
        return
    if args.yes_hardware:
        return
    if not sys.stdin.isatty():
        raise SafetyError("this config drives REAL hardware; pass --yes-hardware to confirm "
                          "(no terminal to ask)")
    sys.stderr.write(f"'{spec.name}' will drive REAL motors through {spec.driver_type}. "
                     "Clear the workspace; type 'yes' to continue: ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() != "yes":
        raise SafetyError("hardware run not confirmed")


def new_out_dir(stem: str, parent: Path = Path("runs")) -> Path:
    """A new folder ``parent/<stem>-<YYYYmmdd-HHMMSS>`` for a command's output, claimed by
    creating it: two commands started in the same second (a script, parallel tests) get
    ``...-2``, ``...-3`` instead of writing into one folder.  Where the folder cannot be made
    for another reason, its path is returned as it is, for the output checks to report."""
    base = parent / f"{stem}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    for i in range(1, 10_000):
        path = base if i == 1 else base.with_name(f"{base.name}-{i}")
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError:
            return path
        return path
    return path


def run(args) -> int:
    """``torqueloop run``: build, run, write log, summary and plots. Exit 0 only if completed."""
    from .run import build_run, load_run, summary_metrics, validate_run
    from ..telemetry import write_json

    overrides = parse_sets(args.set)
    if getattr(args, "mcap", False):
        overrides["telemetry.mcap"] = True
    if getattr(args, "live", False):
        overrides["telemetry.live"] = True
    if getattr(args, "live_port", None) is not None:
        overrides["telemetry.live_port"] = args.live_port
    spec = load_run(args.config, overrides=overrides, duration_s=args.duration)
    _check_wait_viewer(args, args.config, spec.telemetry_live is not None)
    out = Path(args.out) if args.out else new_out_dir(spec.name)
    # the same validation as `check` (feasibility, singularity, bus budget, protections), and
    # a writable output folder with room for the log, before anything is enabled
    try:
        validation = validate_run(spec, out_dir=out)
        for w in validation.warnings + _signal_warnings():
            print(f"torqueloop: WARNING: {w}", file=sys.stderr)
        _confirm_hardware(spec, args)
        try:
            run_obj = build_run(spec, out_dir=out, meta={"cli_overrides": overrides})
        except ConfigError as err:
            if err.file is not None or err.field is None:
                raise
            raise ConfigError(err.message, str(args.config), err.field) from err     # name the file too
    except BaseException:
        if not args.out:        # refused before it ran: no empty folder of ours left behind
            try:
                out.rmdir()
            except OSError:
                pass
        raise
    progress = None
    wrap = None if spec.hardware else run_progress(args.no_progress)
    if wrap is not None:
        progress = wrap(run_obj.loop.clock, spec.duration_s)
        run_obj.loop.clock = progress
    rec = None if run_obj.loop.telemetry is None else run_obj.loop.telemetry.recorder
    if rec is not None and rec.live_address is not None:
        print(f"torqueloop: live view at {rec.live_address} (Foxglove: Open connection > Foxglove "
              f"WebSocket; PlotJuggler: Foxglove WebSocket client)", flush=True)
        print(f"torqueloop: live page at {rec.live_page} (open it in a browser)", flush=True)
        if args.wait_viewer > 0:
            print(f"torqueloop: waiting up to {args.wait_viewer:g} s for a viewer", flush=True)
            if not rec.wait_viewer(args.wait_viewer):
                print("torqueloop: no viewer subscribed; running anyway", file=sys.stderr)
    print(f"torqueloop: running '{spec.name}' -> {out}", flush=True)
    recover = None
    if getattr(args, "recover", False) or getattr(args, "yes_recover", False):
        hold_s = getattr(args, "hold_s", 2.0)
        if not (math.isfinite(hold_s) and 0.0 < hold_s <= 3600.0):
            raise ConfigError(f"must be in (0, 3600] s, got {hold_s!r}", args.config, "--hold-s")

        def recover(message):
            print(f"torqueloop: {message}", file=sys.stderr)
            return True if args.yes_recover else _ask("clear the faults, re-enable and hold")
        recover = _Recover(recover, hold_s)
    try:
        result = run_obj.execute(recover=recover)
    finally:
        if progress is not None:
            progress.done()
    metrics = summary_metrics(spec, result)
    print(format_summary(spec, result, metrics))
    try:
        write_json(out / "summary.json", json.loads(json.dumps(metrics, default=_json_default)))
    except OSError as err:
        print(f"  summary.json not written: {err}")
    if not args.no_plots and result.log_unwritten is None:
        from .plots import plot_run
        try:
            written = plot_run(out)
            print(f"  plots: {', '.join(str(p) for p in written)}")
        except (ConfigError, OSError) as err:
            print(f"  plots skipped: {err}")
    print(f"  log: {out / 'log.npy'} (numpy structured array; "
          f"controller.telemetry.log_dataframe(path): a pandas DataFrame)")
    if spec.telemetry_mcap:
        print(f"  mcap: {out / 'log.mcap'} (Foxglove, PlotJuggler; ROS 2 JointState on /joint_states)")
    rec = getattr(result, "recovery", None)
    for m in result.messages:
        if m.startswith("recovery:"):
            print(f"  {m}")
    if rec is not None:
        print(f"  recovery: faults cleared, drives re-enabled, hold {rec.status.upper()} after {rec.n_cycles} "
              f"cycles{'' if not rec.faults else ' (' + '; '.join(f.cause for f in rec.faults) + ')'}; "
              f"events in {out / 'meta.json'}")
    return exit_code(result)


class _Recover:
    """The operator's answer and the hold length of ``run --recover`` (what Run.execute passes to
    Run.recover)."""

    def __init__(self, ask, hold_s: float):
        self.ask, self.hold_s = ask, hold_s

    def __call__(self, message: str) -> bool:
        return self.ask(message)


def exit_code(result) -> int:
    """``torqueloop run``'s exit code for a run result: 0 completed, 1 stopped or faulted after
    it ran, 2 a start-up failure (enable refused: nothing ran)."""
    if result.status == "fault" and result.n_cycles == 0:
        return 2
    return 0 if result.status == "completed" else 1


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def plot(args) -> int:
    """``torqueloop plot``."""
    from .plots import plot_run

    written = plot_run(args.log, args.out)
    for p in written:
        print(p)
    if getattr(args, "animate", False):
        out = None if args.out is None else Path(args.out) / "animation.gif"
        args = _animate_args(args, out)
        return animate(args)
    return 0


def export(args) -> int:
    """``torqueloop export RUN_DIR --format mcap|csv|parquet [-o FILE]``: a run on disk (its ``log.npy``
    and ``meta.json``) as ``log.mcap``, ``log.csv`` or ``log.parquet`` (default beside them)."""
    from ..telemetry import read_log, read_meta, to_csv

    run_dir = Path(args.run_dir)
    _run_folder(run_dir)
    out = Path(args.out) if args.out else run_dir / f"log.{args.format}"
    if args.format == "csv":
        read_meta(run_dir)      # the folder is a run's: its metadata reads
        to_csv(read_log(run_dir, flat=True), out)
        print(out)
        return 0
    if args.format == "parquet":
        from ..telemetry import to_parquet
        to_parquet(run_dir, out, read_meta(run_dir))
        print(out)
        return 0
    from ..telemetry import column_labels
    from ..telemetry_mcap import mcap_available, write_mcap
    why = mcap_available()
    if why is not None:
        raise TorqueloopError(why)
    flat, meta = read_log(run_dir, flat=True), read_meta(run_dir)
    start_ns = _start_ns(run_dir, meta)
    st = write_mcap(out, read_log(run_dir), meta, column_labels(flat, "q"), column_labels(flat, "err"),
                    start_ns=start_ns, frames=_frames(run_dir, meta, start_ns))
    print(f"{out} ({st['rows_written']} rows, {st['messages']} messages, {st['tf_messages']} on /tf)")
    return 0


def _check_wait_viewer(args, file: str, live: bool) -> None:
    """``--wait-viewer``: a time in [0, 1 day] and only with the live view."""
    w = getattr(args, "wait_viewer", 0.0)
    if not (math.isfinite(w) and 0.0 <= w <= 86400.0):
        raise ConfigError(f"must be in [0, 86400] s, got {w!r}", str(file), "--wait-viewer")
    if w > 0 and not live:
        raise ConfigError("needs the live view (--live or [telemetry] live = true)", str(file), "--wait-viewer")


def _run_folder(run_dir: Path) -> None:
    """Refuse what is not a run's folder (log.npy and meta.json): exit 2 naming it."""
    if not run_dir.is_dir():
        raise ConfigError(f"not a run folder: {'no such folder' if not run_dir.exists() else 'a file'} "
                          "(it takes the folder a run wrote: log.npy and meta.json)", str(run_dir))
    for name in ("log.npy", "meta.json"):
        if not (run_dir / name).is_file():
            raise ConfigError(f"not a run folder: no {name} in it", str(run_dir))


def _start_ns(run_dir: Path, meta: dict) -> int:
    from ..telemetry import utc_ns
    try:
        return utc_ns(meta["start_time_utc"])
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"meta.json has no readable start_time_utc ({type(err).__name__}: {err})",
                          str(run_dir / "meta.json"), "start_time_utc") from err


def _frames(run_dir: Path, meta: dict, start_ns: int):
    """The run's robot frames for ``/tf`` (:class:`controller.telemetry_ros2.FrameEncoder`), or
    None (said on stderr) when its model cannot be loaded."""
    from ..telemetry_ros2 import FrameEncoder
    from .plots import _model_from_meta
    try:
        return FrameEncoder(_model_from_meta(meta), start_ns, str(meta.get("space", "joint")))
    except (TorqueloopError, OSError) as err:
        print(f"torqueloop: {run_dir}: no /tf (the robot's frames): {err}", file=sys.stderr)
        return None


def replay(args) -> int:
    """``torqueloop replay RUN_DIR --live [--speed X]``: a run on disk streamed through the live
    view's server (:func:`controller.telemetry_live.replay`) at ``--speed`` times its pace."""
    from ..telemetry import column_labels, read_log, read_meta
    from ..telemetry_live import live_available, replay as replay_live

    run_dir = Path(args.run_dir)
    if not args.live:
        raise ConfigError("replay streams to a live viewer: add --live", str(run_dir), "--live")
    _check_wait_viewer(args, run_dir, True)
    if not (math.isfinite(args.speed) and 0.0 < args.speed <= 1e6):
        raise ConfigError(f"must be in (0, 1e6], got {args.speed!r}", str(run_dir), "--speed")
    _run_folder(run_dir)
    why = live_available()
    if why is not None:
        raise TorqueloopError(why)
    flat, meta = read_log(run_dir, flat=True), read_meta(run_dir)
    tel = (meta.get("config") or {}).get("telemetry") or {}
    rate = args.rate if args.rate is not None else tel.get("live_rate_hz", 50.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"must be > 0, got {rate!r}", str(run_dir), "--rate")
    port = args.live_port if args.live_port is not None else 0
    if not 0 <= port <= 65535:
        raise ConfigError(f"must be in 0 .. 65535, got {port!r}", str(run_dir), "--live-port")
    log = read_log(run_dir)
    duration = float(log["t"][-1] - log["t"][0]) if log.shape[0] else 0.0

    def ready(address, page):
        print(f"torqueloop: live view at {address} (Foxglove: Open connection > Foxglove WebSocket)", flush=True)
        print(f"torqueloop: live page at {page} (open it in a browser)", flush=True)
        if args.wait_viewer > 0:
            print(f"torqueloop: waiting up to {args.wait_viewer:g} s for a viewer", flush=True)
        print(f"torqueloop: replaying {log.shape[0]} rows ({duration:.6g} s) at {args.speed:g}x", flush=True)

    try:
        st = replay_live(log, meta, column_labels(flat, "q"), column_labels(flat, "err"),
                         start_ns=_start_ns(run_dir, meta), speed=args.speed, rate_hz=float(rate), port=port,
                         wait_viewer_s=args.wait_viewer, on_ready=ready,
                         frames=_frames(run_dir, meta, _start_ns(run_dir, meta)))
    except ConfigError as err:
        if err.field != "telemetry.live_port":
            raise
        raise ConfigError(err.message, str(run_dir), "--live-port") from err
    print(f"torqueloop: replay done: {st['rows_sent']} rows, {st['messages']} messages")
    return 0


def _animate_args(args, out):
    import argparse

    return argparse.Namespace(log=args.log, out=out, fps=getattr(args, "fps", 20.0),
                              max_frames=getattr(args, "max_frames", 200))


def animate(args) -> int:
    """``torqueloop animate``: a stick-figure animation of the robot from a run's log (GIF or HTML)."""
    from .animate import animate_run

    bar = _sweep_progress("animate", unit="frame")     # on a terminal only; nothing extra on a pipe
    try:
        path, frames = animate_run(args.log, args.out, fps=args.fps, max_frames=args.max_frames, progress=bar)
    finally:
        bar.close()
    print(f"{path} ({frames} frames)")
    return 0


def tune(args) -> int:
    """``torqueloop tune``: Monte-Carlo gain search; writes table, plot, best config."""
    from dynamics.config import Section, apply_overrides

    from .tune import TuneSpec, run_tune

    path = Path(args.config)
    data = read_toml(path)
    if "tune" not in data:
        raise ConfigError("no [tune] table in the config", str(path), "tune")
    spec = TuneSpec.from_section(Section(data["tune"], str(path), "tune"))
    if args.samples is not None:
        spec.candidates = args.samples
    if getattr(args, "address", None) is not None:
        spec.address = args.address
    base = {k: v for k, v in data.items() if k != "tune"}
    # relative paths in the config refer to its folder: make them absolute for workers
    base = _absolutise(base, path.parent)
    out = _sweep_out(args, data, path, "tune")
    out.mkdir(parents=True, exist_ok=True)
    print(f"torqueloop tune: {spec.plan()}", flush=True)
    t0 = time.perf_counter()
    bar = _sweep_progress("tune", getattr(args, "no_progress", False))
    try:
        result = run_tune(spec, base, str(path), workers=args.workers, engine=args.engine, progress=bar)
    finally:
        bar.close()
    result.write_table(out / "ranking.csv")
    best = result.best
    if not math.isfinite(best.score):
        raise SafetyError("no candidate completed its runs; see ranking.csv")
    best_cfg = apply_overrides(base, best.values, file=str(path))
    write_toml(out / "best.toml", best_cfg)
    try:
        from .plots import plot_tune
        png = plot_tune(result, out)
    except ConfigError as err:  # no matplotlib
        png = f"skipped ({err})"
    print(f"torqueloop tune: {len(result.candidates)} candidates x {spec.monte_carlo} plant draws "
          f"in {time.perf_counter() - t0:.1f} s ({result.engine} engine)")
    print("  " + engine_line(result.report))
    if result.lost:
        print(f"  WARNING: {result.lost} runs were lost with their worker and not retried to completion: "
              "their candidates score inf (see failed_runs and first_failure in ranking.csv)")
    score_head = f"score [{result.score_unit}]"
    width = max(12, len(score_head))
    print("  rank  " + "  ".join(f"{k:>22}" for k in spec.params) + f"  {score_head:>{width}}")
    for r, c in enumerate(result.ranked[:10], 1):
        print(f"  {r:4d}  " + "  ".join(f"{c.values[k]:22.5g}" for k in spec.params) + f"  {c.score:{width}.5g}")
    print(f"  score = {spec.metric} x (1 + penalties) [{result.score_unit}]")
    for w in result.edge_warnings():
        print(f"  WARNING: {w}")
    print(f"  table: {out / 'ranking.csv'}\n  best config: {out / 'best.toml'}\n  plot: {png}")
    return 0


def robustness(args) -> int:
    """``torqueloop robustness``: Monte-Carlo runs over the plant's uncertainty; writes the report,
    the samples, plots and the worst runs as run configs.  Exit 0 (the report is the result)."""
    from dynamics.config import Section

    from .robustness import format_report, run_robustness, write_report
    from .tune_config import RobustnessSpec

    path = Path(args.config)
    data = read_toml(path)
    if "robustness" not in data:
        raise ConfigError("no [robustness] table in the config", str(path), "robustness")
    spec = RobustnessSpec.from_section(Section(data["robustness"], str(path), "robustness"))
    if args.samples is not None:
        if args.samples < 1:
            raise ConfigError("--samples needs at least 1", str(path), "robustness.samples")
        spec.samples = args.samples
    if args.address is not None:
        spec.address = args.address
    if args.duration is not None:
        if not args.duration > 0:
            raise ConfigError("--duration needs a value > 0", str(path), "robustness.duration_s")
        spec.duration_s = args.duration
    if args.seed is not None:
        if args.seed < 0:
            raise ConfigError("--seed needs a value >= 0", str(path), "robustness.seed")
        spec.seed = args.seed
    for key, value in parse_sets(args.tolerance).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"--tolerance {key} needs a number, got {value!r}", str(path),
                              f"robustness.tolerance.{key}")
        spec.tolerance[key] = float(value)
    base = _absolutise({k: v for k, v in data.items() if k not in ("robustness", "tune")}, path.parent)
    out = _sweep_out(args, data, path, "robustness")
    t0 = time.perf_counter()
    bar = _sweep_progress("robustness", getattr(args, "no_progress", False))
    try:
        result = run_robustness(spec, base, str(path), workers=args.workers, engine=args.engine, progress=bar)
    finally:
        bar.close()
    written = write_report(result, out, plots=not args.no_plots)
    print(f"torqueloop robustness: {spec.samples} runs in {time.perf_counter() - t0:.1f} s "
          f"({result.report.engine} engine)")
    print("  " + engine_line(result.report))
    print(format_report(result))
    print("  written: " + ", ".join(str(p) for p in written))
    return 0


def _sweep_out(args, data: dict, path: Path, command: str) -> Path:
    """A sweep's output folder: ``-o``, or a new ``runs/<command>-<name>-<time>`` (:func:`new_out_dir`)."""
    return Path(args.out) if args.out else new_out_dir(f"{command}-{data.get('name', path.stem)}")


def _sweep_progress(text: str, off: bool = False, unit: str = "run"):
    """A ``progress(done, total)`` that shows a progress bar of a sweep's runs (or frames...:
    ``unit``) on a terminal (``text``: its label), nothing on a pipe; its ``close()`` ends the bar."""
    state = {}

    def progress(done, total):
        bar = state.get("bar")
        if off:
            return
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = state["bar"] = progress_bar(total, text, unit)
            if bar is None:
                return
        bar.n = done
        bar.refresh()

    def close():
        if state.get("bar") is not None:
            state["bar"].close()
    progress.close = close
    return progress


def engine_line(report) -> str:
    """One line on how a sweep ran (:class:`controller.app.engines.EngineReport`)."""
    if report is None:
        return ""
    warm = [s.seconds for s in report.stats if not s.cold]
    cold = [s.seconds for s in report.stats if s.cold]
    return (f"{report.workers} worker process(es), {report.tasks} tasks of {report.rollouts_per_task} run(s) "
            f"({report.task_bytes / 1024:.1f} kB a task, config {report.shared_bytes / 1024:.1f} kB once); "
            f"a run {1e3 * float(np.median(warm)) if warm else math.nan:.0f} ms "
            f"(first in a process {1e3 * float(np.median(cold)) if cold else math.nan:.0f} ms)")


def _absolutise(data: dict, base_dir: Path) -> dict:
    import copy

    d = copy.deepcopy(data)
    for *secs, key in (("robot", "file"), ("plant", "robot"), ("driver", "plant", "robot"),
                       ("trajectory", "path")):
        node = d
        for sec in secs:
            node = node.get(sec) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(key), str):
            p = Path(node[key])
            if not p.is_absolute():
                node[key] = str((base_dir / p).resolve())
    return d




def identify(args) -> int:
    """``torqueloop identify``: excitation and validation runs, estimation, identified robot file."""
    from .identify import load_identify, run_identification

    spec = load_identify(args.config, overrides=parse_sets(args.set) if args.set else None)
    out = Path(args.out) if args.out else new_out_dir(f"identify-{spec.name}")
    print(f"torqueloop identify: '{spec.name}' -> {out}", flush=True)
    confirmed = []

    def confirm(run_spec):          # asked once, before anything is built or moves
        if run_spec.hardware and not confirmed:
            _confirm_hardware(run_spec, args)
            confirmed.append(True)

    res = run_identification(spec, out, confirm=confirm, progress=lambda line: print(f"  {line}", flush=True),
                             run_progress=run_progress(getattr(args, "no_progress", False)))
    print(res.report)
    print(f"  identified robot file: {res.robot_file}\n  report: {out / 'report.txt'}")
    return 0


def _ask(prompt: str) -> bool:
    """Ask the operator on the terminal; ``yes`` confirms (no terminal: refused)."""
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(f"{prompt}; type 'yes' to continue: ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() == "yes"


def bringup(args) -> int:
    """``torqueloop bringup``: the joint-by-joint bring-up and its calibration file; exit 0 when
    nothing blocking was found, 1 when something was (the fixes are printed)."""
    from .bringup import bringup as _bringup
    from .run import load_run

    spec = load_run(args.config, overrides=parse_sets(args.set) if args.set else None)
    _confirm_hardware(spec, args)
    yes_zero = getattr(args, "yes_set_zero", False)
    res = _bringup(spec, set_zero=args.set_zero,
                   confirm_set_zero=(lambda msg: True) if yes_zero else _ask)
    print(res.report())
    print(f"  calibration: {res.calibration_file}" + ("" if res.ok else
          " (open findings: a hardware run refuses it until they are fixed and bringup is run again)"))
    return 0 if res.ok else 1
