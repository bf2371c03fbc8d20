"""The ``torqueloop`` command line.

Sub-commands
------------
``torqueloop check FILE``   validate a robot file or a run config and print a summary
                            (``--explain TOPIC``: the keys of a config table).
``torqueloop run CONFIG``   run a config (simulated plant by default), write log and plots.
``torqueloop plot LOG``     plot a run log to PNG files.
``torqueloop export RUN_DIR --format mcap|csv|parquet``  a run on disk as MCAP, CSV or Parquet.
``torqueloop replay RUN_DIR --live``  stream a run on disk to Foxglove / PlotJuggler as if live.
``torqueloop animate LOG``  stick-figure animation of the robot from a run log.
``torqueloop tune CONFIG``  search controller gains over Monte-Carlo offline runs.
``torqueloop robustness CONFIG``  Monte-Carlo runs over the plant's uncertainty: share within
                            tolerance, distributions, worst runs as replayable configs.
``torqueloop identify CONFIG``  excite, estimate and validate dynamic parameters; write a robot file.
``torqueloop bringup CONFIG``   walk the robot joint by joint under a low torque cap; write its calibration.

All errors of the package (:class:`dynamics.errors.TorqueloopError`) are printed
as one line on stderr with exit code 2; only this module prints or exits.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import metadata

from dynamics.errors import TorqueloopError

from .tune_config import ENGINES

__all__ = ["main", "version"]


def version() -> str:
    """The installed distribution's version (or 'unknown' when run from a bare tree)."""
    try:
        return metadata.version("torqueloop")
    except metadata.PackageNotFoundError:
        return "unknown"


def _cmd_check(args: argparse.Namespace) -> int:
    from . import commands
    if args.explain:
        from .explain import explain
        print(explain(args.explain))
        if args.file is None:
            return 0
    elif args.file is None:
        raise TorqueloopError("check needs a FILE (or --explain TOPIC)")
    print(commands.check(args.file, overrides=commands.parse_sets(args.set) if args.set else None))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from . import commands
    return commands.run(args)


def _cmd_plot(args: argparse.Namespace) -> int:
    from . import commands
    return commands.plot(args)


def _cmd_export(args: argparse.Namespace) -> int:
    from . import commands
    return commands.export(args)


def _cmd_replay(args: argparse.Namespace) -> int:
    from . import commands
    return commands.replay(args)


def _cmd_animate(args: argparse.Namespace) -> int:
    from . import commands
    return commands.animate(args)


def _cmd_tune(args: argparse.Namespace) -> int:
    from . import commands
    return commands.tune(args)


def _cmd_robustness(args: argparse.Namespace) -> int:
    from . import commands
    return commands.robustness(args)


def _cmd_identify(args: argparse.Namespace) -> int:
    from . import commands
    return commands.identify(args)


def _cmd_bringup(args: argparse.Namespace) -> int:
    from . import commands
    return commands.bringup(args)


def _live_args(p: argparse.ArgumentParser) -> None:
    """The live view's options (``run`` and ``replay``)."""
    p.add_argument("--live", action="store_true",
                   help="stream the log's channels to Foxglove or PlotJuggler (a Foxglove WebSocket on "
                        "127.0.0.1; the address is printed), as [telemetry] live = true")
    p.add_argument("--live-port", type=int, default=None,
                   help="--live: the TCP port (default: [telemetry] live_port, 0: the OS chooses)")
    p.add_argument("--wait-viewer", type=float, default=0.0, metavar="SECONDS",
                   help="--live: wait up to this long for a viewer to subscribe before the first cycle")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torqueloop", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"torqueloop {version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="validate a robot file or run config and print a summary")
    c.add_argument("file", nargs="?", default=None, help="robot file (.toml/.urdf) or run config (.toml)")
    c.add_argument("--explain", metavar="TOPIC", default=None,
                   help="print the keys of a config table with types, defaults and bounds, read from "
                        "the parser itself: safety, driver, driver.joints, driver.plant, "
                        "driver.emulator, driver.faults, driver.bus, driver.<type>, tune or robustness")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="run configs: check with a value overridden, as `run --set` does")
    c.set_defaults(func=_cmd_check)

    r = sub.add_parser("run", help="run a config (simulated plant unless the config says hardware)")
    r.add_argument("config", help="run config (.toml)")
    r.add_argument("-o", "--out", default=None, help="output folder (default: runs/<name>-<time>)")
    r.add_argument("--duration", type=float, default=None, help="override the run duration [s]")
    r.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--mcap", action="store_true",
                   help="also record log.mcap (ROS 2 encodings: Foxglove, PlotJuggler, rosbags), as "
                        "[telemetry] mcap = true")
    _live_args(r)
    r.add_argument("--yes-hardware", action="store_true",
                   help="confirm a hardware run non-interactively (real motors will move)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set controller.kind=pd_gravity")
    r.add_argument("--recover", action="store_true",
                   help="after a fault (bus-off, a drive that rebooted, an e-stop): ask to clear the "
                        "drives' faults, re-enable them and hold the robot, in this process")
    r.add_argument("--yes-recover", action="store_true", help="confirm --recover non-interactively")
    r.add_argument("--hold-s", type=float, default=2.0, help="--recover: length of the hold [s] (default 2)")
    r.set_defaults(func=_cmd_run)

    pl = sub.add_parser("plot", help="plot a run log (folder or .npy) to PNG files")
    pl.add_argument("log", help="run folder or telemetry .npy file")
    pl.add_argument("-o", "--out", default=None, help="folder for the PNG files (default: beside the log)")
    pl.add_argument("--animate", action="store_true", help="also write animation.gif (see `animate`)")
    pl.set_defaults(func=_cmd_plot)

    ex = sub.add_parser("export", help="a run on disk as MCAP (Foxglove, PlotJuggler, ROS 2 tools), CSV or "
                                       "Parquet")
    ex.add_argument("run_dir", help="run folder (log.npy and meta.json)")
    ex.add_argument("--format", required=True, choices=["mcap", "csv", "parquet"],
                    help="mcap, csv or parquet (needs pyarrow: the parquet extra)")
    ex.add_argument("-o", "--out", default=None, help="output file (default: RUN_DIR/log.<format>)")
    ex.set_defaults(func=_cmd_export)

    rp = sub.add_parser("replay", help="stream a run on disk to Foxglove / PlotJuggler as if live")
    rp.add_argument("run_dir", help="run folder (log.npy and meta.json)")
    rp.add_argument("--speed", type=float, default=1.0, help="cycle time per second (default 1: its own pace)")
    rp.add_argument("--rate", type=float, default=None,
                    help="rows streamed per second of cycle time (default: the run's [telemetry] "
                         "live_rate_hz, else 50)")
    _live_args(rp)
    rp.set_defaults(func=_cmd_replay)

    an = sub.add_parser("animate", help="stick-figure animation of the robot from a run log (GIF or HTML)")
    an.add_argument("log", help="run folder or telemetry .npy file")
    an.add_argument("-o", "--out", default=None,
                    help="output .gif or .html (default: RUN_DIR/animation.gif)")
    an.add_argument("--fps", type=float, default=20.0, help="frames per second (default 20)")
    an.add_argument("--max-frames", type=int, default=200,
                    help="at most this many frames; longer runs play faster (default 200)")
    an.set_defaults(func=_cmd_animate)

    t = sub.add_parser("tune", help="search controller gains over Monte-Carlo offline runs")
    t.add_argument("config", help="run config (.toml) with a [tune] table")
    t.add_argument("-o", "--out", default=None, help="output folder")
    t.add_argument("--workers", type=int, default=None, help="worker processes (default: cores)")
    t.add_argument("--engine", default=None, choices=list(ENGINES),
                   help="executor engine (overrides [tune].engine)")
    t.add_argument("--samples", type=int, default=None, help="override the number of candidates")
    t.add_argument("--address", default=None, help="Dask scheduler / Ray cluster address (overrides "
                                                   "[tune].address), e.g. tcp://head:8786")
    t.add_argument("--no-progress", action="store_true", help="no progress bar (none on a pipe either)")
    t.set_defaults(func=_cmd_tune)

    rb = sub.add_parser("robustness", help="Monte-Carlo runs over the plant's uncertainty: share within "
                                           "tolerance, distributions, worst runs as run configs")
    rb.add_argument("config", help="run config (.toml) with a [robustness] table")
    rb.add_argument("-o", "--out", default=None, help="output folder (default: runs/robustness-<name>-<time>)")
    rb.add_argument("--samples", type=int, default=None, help="number of runs (overrides [robustness].samples)")
    rb.add_argument("--engine", default=None, choices=list(ENGINES),
                    help="executor engine (overrides [robustness].engine)")
    rb.add_argument("--workers", type=int, default=None, help="workers (default: cores)")
    rb.add_argument("--address", default=None, help="Dask scheduler / Ray cluster address (overrides "
                                                    "[robustness].address)")
    rb.add_argument("--duration", type=float, default=None, help="run duration [s] (overrides "
                    "[robustness].duration_s)")
    rb.add_argument("--seed", type=int, default=None, help="seed of the draws (overrides [robustness].seed)")
    rb.add_argument("--tolerance", action="append", default=[], metavar="METRIC=VALUE",
                    help="a bound (upper; lower for singularity_margin_min), e.g. max_position_error_m=0.001")
    rb.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    rb.add_argument("--no-progress", action="store_true", help="no progress bar (none on a pipe either)")
    rb.set_defaults(func=_cmd_robustness)

    i = sub.add_parser("identify", help="identify dynamic parameters: excitation run, estimation, "
                                        "validation, identified robot file")
    i.add_argument("config", help="identify config (.toml): a run config with an [identify] table")
    i.add_argument("-o", "--out", default=None, help="output folder (default: runs/identify-<name>-<time>)")
    i.add_argument("--yes-hardware", action="store_true",
                   help="confirm the hardware runs non-interactively (real motors will move)")
    i.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set identify.excitation.iterations=10")
    i.add_argument("--no-progress", action="store_true", help="no progress bar (none on a pipe either)")
    i.set_defaults(func=_cmd_identify)

    b = sub.add_parser("bringup", help="walk the robot joint by joint under a low torque cap (ids, zero, "
                                       "direction, torque constant, friction); write the calibration "
                                       "`run` applies")
    b.add_argument("config", help="run config (.toml); its [bringup] table (controller/app/bringup.py)")
    b.add_argument("--yes-hardware", action="store_true",
                   help="confirm a hardware bring-up non-interactively (real motors will move)")
    b.add_argument("--set-zero", action="store_true",
                   help="MIT drives: set the drives' zero at the reference pose (asks for confirmation)")
    b.add_argument("--yes-set-zero", action="store_true", help="confirm --set-zero non-interactively")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set bringup.torque_cap_nm=1.0")
    b.set_defaults(func=_cmd_bringup)
    return p


class _ClosedPipeTolerant:
    """Standard output that drops what it cannot write once the reader has gone.

    ``torqueloop run ... | head`` must not turn a finished run into an error, nor stop a
    running one half-way through writing its summary and plots: after the first
    :class:`BrokenPipeError` the rest of the output is discarded and the command carries
    on, returning its real exit code.
    """

    def __init__(self, stream):
        self._stream = stream
        self._closed_pipe = False

    def write(self, text):
        if not self._closed_pipe:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self):
        if not self._closed_pipe:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self):
        self._closed_pipe = True
        try:  # the interpreter's final flush of the real stdout must not fail either
            import os
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    stdout = sys.stdout
    sys.stdout = tolerant = _ClosedPipeTolerant(stdout)
    handler = _log_handler()
    try:
        return _dispatch(args)
    finally:
        tolerant.flush()  # buffered output meets the closed pipe here, not at interpreter exit
        sys.stdout = stdout
        if handler is not None:
            logging.getLogger().removeHandler(handler)


def _log_handler() -> logging.Handler | None:
    """Where nobody configured logging: the libraries' warnings (python-can, canopen: "No SDO
    response received") go to stderr named by their source, as the command's own lines are,
    instead of bare through logging's last resort.  Returns the handler added (None: logging was
    configured by the caller, and is left as it is)."""
    root = logging.getLogger()
    if root.handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("torqueloop: %(name)s: %(levelname)s: %(message)s"))
    root.addHandler(handler)
    return handler


def _dispatch(args) -> int:
    try:
        return int(args.func(args) or 0)
    except TorqueloopError as err:
        print(f"torqueloop: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a port, bus or file that cannot be opened or written
        print(f"torqueloop: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("torqueloop: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
