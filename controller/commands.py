"""Implementations of the CLI sub-commands.

Only :mod:`controller.cli` and this module write to the terminal; the library
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
from dynamics.config import read_toml
from dynamics.errors import ConfigError, SafetyError

__all__ = ["check", "run", "plot", "tune", "identify", "parse_sets", "format_summary"]


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


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["controller.kind=pd_gravity", "plant.mass_scale=1.2"]`` -> dict (values parsed as TOML)."""
    import tomllib

    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set needs KEY=VALUE, got {item!r}")
        key, _, val = item.partition("=")
        key = key.strip()
        try:
            out[key] = tomllib.loads(f"v = {val}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = val  # bare string
    return out


class _Progress:
    """A clock wrapper that reports progress of an offline run on stderr."""

    def __init__(self, inner, total_s: float, stream=sys.stderr, every_s: float = 0.25):
        self.inner, self.total_s, self.stream = inner, max(total_s, 1e-9), stream
        self.every_s = every_s
        self._last_wall = 0.0
        self._t0 = None

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
        frac = min(max(t / self.total_s, 0.0), 1.0)
        bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
        self.stream.write(f"\r  [{bar}] {100 * frac:5.1f} %  t = {t:6.2f} / {self.total_s:.2f} s")
        self.stream.flush()

    def done(self):
        self._draw(self.total_s)
        self.stream.write("\n")
        self.stream.flush()


def _fmt(v, unit="", scale=1.0, digits=4) -> str:
    if v is None:
        return "-"
    return f"{float(v) * scale:.{digits}g}{unit}"


def format_summary(spec, result, metrics: dict) -> str:
    """The end-of-run summary table."""
    lines = [f"run '{spec.name}': {result.status.upper()} after {result.n_cycles} cycles "
             f"({result.n_cycles * spec.period_s:.3f} s simulated/controlled, wall {result.wall_time_s:.2f} s, "
             f"real-time factor {metrics.get('real_time_factor', math.nan):.1f}x)"]
    lines.append(f"  controller {spec.controller.kind} ({spec.space} space) at {spec.rate_hz:g} Hz; "
                 f"driver {spec.driver_type} ({'hardware' if spec.hardware else 'simulated plant'})")
    if "rms_position_error_m" in metrics:
        lines.append(f"  task position error : RMS {_fmt(metrics['rms_position_error_m'], ' mm', 1e3)}, "
                     f"max {_fmt(metrics['max_position_error_m'], ' mm', 1e3)}")
        lines.append(f"  orientation error   : RMS {_fmt(metrics['rms_orientation_error_rad'], ' mrad', 1e3)}, "
                     f"max {_fmt(metrics['max_orientation_error_rad'], ' mrad', 1e3)}")
    names = list(spec.model.joint_names)
    axes = names if spec.space == "joint" else (
        ["x", "y", "phi"] if len(metrics.get("rms_error", [])) == 3 else ["x", "y", "z", "a", "b", "g"])
    rms = metrics.get("rms_error", [])
    mx = metrics.get("max_abs_error", [])
    lines.append("  axis      RMS error     max error")
    for i, a in enumerate(axes[:len(rms)]):
        lines.append(f"  {a:<8} {rms[i]:12.4g}  {mx[i]:12.4g}")
    peak = metrics.get("peak_torque", [])
    tmax = spec.model.limits.torque_max
    lines.append("  joint     peak |tau|    limit     saturated")
    sat = metrics.get("saturation_fraction_per_joint") or [None] * len(peak)
    for j, nm in enumerate(names[:len(peak)]):
        s = "-" if sat[j] is None else f"{100 * sat[j]:.1f} %"
        lines.append(f"  {nm:<8} {peak[j]:10.4g}  {tmax[j]:9.4g}  {s:>9}")
    tm = metrics.get("timing", {})
    if tm:
        lat = tm.get("lateness", {})
        comp = tm.get("compute", {})
        cyc = tm.get("cycle", {})
        lines.append(f"  timing: compute p50 {_fmt(comp.get('p50'), ' us', 1e6)} p99 {_fmt(comp.get('p99'), ' us', 1e6)}; "
                     f"cycle p50 {_fmt(cyc.get('p50'), ' us', 1e6)} p99 {_fmt(cyc.get('p99'), ' us', 1e6)}; "
                     f"lateness p99 {_fmt(lat.get('p99'), ' us', 1e6)} p99.9 {_fmt(lat.get('p99.9'), ' us', 1e6)}"
                     f" max {_fmt(lat.get('max'), ' us', 1e6)}; missed deadlines {tm.get('missed_deadlines', 0)}")
    if result.faults:
        lines.append("  faults:")
        for f in result.faults:
            lines.append(f"    {f}")
    for m in result.messages:
        lines.append(f"  note: {m}")
    return "\n".join(lines)


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


def run(args) -> int:
    """``torqueloop run``: build, run, write log, summary and plots. Exit 0 only if completed."""
    from .run import build_run, load_run, summary_metrics

    overrides = parse_sets(args.set)
    spec = load_run(args.config, overrides=overrides, duration_s=args.duration)
    _confirm_hardware(spec, args)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("runs") / f"{spec.name}-{stamp}"
    run_obj = build_run(spec, out_dir=out, meta={"cli_overrides": overrides})
    progress = None
    if not args.no_progress and not spec.hardware and sys.stderr.isatty():
        progress = _Progress(run_obj.loop.clock, spec.duration_s)
        run_obj.loop.clock = progress
    print(f"torqueloop: running '{spec.name}' -> {out}")
    try:
        result = run_obj.execute()
    finally:
        if progress is not None:
            progress.done()
    metrics = summary_metrics(spec, result)
    (out / "summary.json").write_text(json.dumps(metrics, indent=2, default=_json_default))
    print(format_summary(spec, result, metrics))
    if not args.no_plots:
        from .plots import plot_run
        try:
            written = plot_run(out)
            print(f"  plots: {', '.join(str(p) for p in written)}")
        except ConfigError as err:
            print(f"  plots skipped: {err}")
    print(f"  log: {out / 'log.npy'} (numpy structured array; pandas.DataFrame(numpy.load(path)))")
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
    return 0


def tune(args) -> int:
    """``torqueloop tune``: Monte-Carlo gain search; writes table, plot, best config."""
    from dynamics.config import Section
    from .tune import TuneSpec, apply_overrides, run_tune

    path = Path(args.config)
    data = read_toml(path)
    if "tune" not in data:
        raise ConfigError("no [tune] table in the config", str(path), "tune")
    spec = TuneSpec.from_section(Section(data["tune"], str(path), "tune"))
    if args.samples is not None:
        spec.candidates = args.samples
    base = {k: v for k, v in data.items() if k != "tune"}
    # relative paths in the config refer to its folder: make them absolute for workers
    base = _absolutise(base, path.parent)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("runs") / f"tune-{data.get('name', path.stem)}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)

    def progress(done, total):
        sys.stderr.write(f"\r  evaluated {done}/{total} runs")
        sys.stderr.flush()

    t0 = time.perf_counter()
    result = run_tune(spec, base, str(path), workers=args.workers, engine=args.engine, progress=progress)
    sys.stderr.write("\n")
    result.write_table(out / "ranking.csv")
    best = result.best
    if not math.isfinite(best.score):
        raise SafetyError("no candidate completed its runs; see ranking.csv")
    best_cfg = apply_overrides(base, best.values, file=str(path))
    _write_toml(out / "best.toml", best_cfg)
    _plot_tune(result, out)
    print(f"torqueloop tune: {len(result.candidates)} candidates x {spec.monte_carlo} plant draws "
          f"in {time.perf_counter() - t0:.1f} s ({args.engine or spec.engine} engine)")
    print("  rank  " + "  ".join(f"{k:>22}" for k in spec.params) + f"  {'score':>12}")
    for r, c in enumerate(result.ranked[:10], 1):
        print(f"  {r:4d}  " + "  ".join(f"{c.values[k]:22.5g}" for k in spec.params) + f"  {c.score:12.5g}")
    print(f"  table: {out / 'ranking.csv'}\n  best config: {out / 'best.toml'}\n  plot: {out / 'tune.png'}")
    return 0


def _absolutise(data: dict, base_dir: Path) -> dict:
    import copy

    d = copy.deepcopy(data)
    for sec, key in (("robot", "file"), ("plant", "robot")):
        if isinstance(d.get(sec), dict) and isinstance(d[sec].get(key), str):
            p = Path(d[sec][key])
            if not p.is_absolute():
                d[sec][key] = str((base_dir / p).resolve())
    return d


def _write_toml(path: Path, data: dict) -> None:
    import tomli_w

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if v is not None}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, np.ndarray):
            return x.tolist()
        if isinstance(x, (np.floating, np.integer)):
            return x.item()
        return x

    path.write_bytes(tomli_w.dumps(clean(data)).encode())


def _plot_tune(result, out: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = list(result.spec.params)
    scores = np.array([c.score for c in result.candidates])
    ok = np.isfinite(scores)
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.6), squeeze=False)
    for i, k in enumerate(names):
        x = np.array([c.values[k] for c in result.candidates])
        ax = axes[0, i]
        ax.scatter(x[ok], scores[ok], s=18)
        if np.any(~ok):
            ax.scatter(x[~ok], np.full((~ok).sum(), np.nanmax(scores[ok]) if ok.any() else 1.0),
                       marker="x", color="r", label="failed")
            ax.legend()
        if result.spec.params[k].log:
            ax.set_xscale("log")
        ax.set_xlabel(k)
        ax.set_ylabel(f"score ({result.spec.metric})")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "tune.png", dpi=110)
    plt.close(fig)


def identify(args) -> int:
    """``torqueloop identify``: excitation and validation runs, estimation, identified robot file."""
    from .identify import load_identify, run_identification

    spec = load_identify(args.config, overrides=parse_sets(args.set) if args.set else None)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("runs") / f"identify-{spec.name}-{stamp}"
    print(f"torqueloop identify: '{spec.name}' -> {out}")
    confirmed = []

    def confirm(run_spec):          # asked once, before anything is built or moves
        if run_spec.hardware and not confirmed:
            _confirm_hardware(run_spec, args)
            confirmed.append(True)

    res = run_identification(spec, out, confirm=confirm, progress=lambda line: print(f"  {line}", flush=True))
    print(res.report)
    print(f"  identified robot file: {res.robot_file}\n  report: {out / 'report.txt'}")
    return 0
