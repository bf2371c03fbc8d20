"""What a run report shows and in which units: the console summary, and the labels the plots use.

Display units (the same in the console summary, the plots and the animation)
---------------------------------------------------------------------------
* positions: m (linear axes and prismatic joints) and rad (angles, revolute joints);
* tracking errors: mm and mrad (a millimetre-scale error reads badly in metres);
* actuator efforts: N m for revolute joints (torques), N for prismatic joints (forces:
  the Stewart platform's legs); the joint type comes from the model
  (:attr:`dynamics.base.Model.joint_types`);
* timing: microseconds.

Logs, ``summary.json`` and ``meta.json`` keep SI units and radians (the names say so).

Timing health
-------------
On the wall clock a cycle that starts later than ``miss_threshold_fraction_of_period * period``
after its deadline is a deadline miss (:class:`controller.loop.TimingStats`).
More than :data:`MISS_WARN_FRACTION` of the cycles missed means the run did not
hold real time: the summary's status line says so and a loud warning follows.
On the lock-step clock simulated time waits for the computation, so deadlines
cannot be missed and lateness is not reported (compute and cycle times are).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Quantity", "MISS_WARN_FRACTION", "TASK_AXES", "joint_quantities", "task_quantities",
           "controller_quantities", "effective_torque_limit", "torque_limit_sources", "least_torque_limit", "effort_word", "timing_health",
           "format_summary"]

#: fraction of missed deadlines above which a wall-clock run gets a loud warning
MISS_WARN_FRACTION = 0.01

#: task coordinates per layout: (name, kind)
TASK_AXES = {
    "planar": (("x", "linear"), ("y", "linear"), ("phi", "angular")),
    "point": (("x", "linear"), ("y", "linear"), ("z", "linear")),
    "planar_point": (("x", "linear"), ("y", "linear")),
    "spatial": (("x", "linear"), ("y", "linear"), ("z", "linear"),
                ("alpha", "angular"), ("beta", "angular"), ("gamma", "angular")),
    "orientation": (("alpha", "angular"), ("beta", "angular"), ("gamma", "angular")),
}


@dataclass(frozen=True)
class Quantity:
    """One axis or joint as shown in reports.

    Parameters
    ----------
    name : str
        Axis (``"x"``, ``"phi"``) or joint name (``"theta1"``, ``"leg3"``).
    kind : {"linear", "angular"}
        Metres or radians (a prismatic joint is linear, a revolute one angular).
    """

    name: str
    kind: str

    @property
    def unit(self) -> str:
        """Position unit: ``"m"`` or ``"rad"``."""
        return "m" if self.kind == "linear" else "rad"

    @property
    def error_unit(self) -> str:
        """Tracking-error display unit: ``"mm"`` or ``"mrad"`` (values times :attr:`error_scale`)."""
        return "mm" if self.kind == "linear" else "mrad"

    error_scale = 1e3

    @property
    def effort_unit(self) -> str:
        """Actuator effort unit of a joint: ``"N"`` (prismatic, force) or ``"N m"`` (revolute, torque)."""
        return "N" if self.kind == "linear" else "N m"

    @property
    def label(self) -> str:
        """``"x [m]"``."""
        return f"{self.name} [{self.unit}]"


def joint_quantities(names, types) -> list[Quantity]:
    """Quantities of the actuated joints from their names and types (``"revolute"``/``"prismatic"``)."""
    return [Quantity(str(n), "linear" if t == "prismatic" else "angular") for n, t in zip(names, types)]


def task_quantities(dim: int, layout: str | None = None) -> list[Quantity]:
    """Quantities of a task space of dimension ``dim`` and layout ``layout`` (a key of
    :data:`TASK_AXES`, :attr:`dynamics.base.ParallelModel.task_layout`; default by the
    dimension: 3 planar, 6 spatial)."""
    if layout is None:
        layout = {3: "planar", 6: "spatial"}.get(dim)
    if layout is None or len(TASK_AXES[layout]) != dim:
        return [Quantity(f"X{i}", "linear") for i in range(dim)]
    return [Quantity(n, k) for n, k in TASK_AXES[layout]]


def controller_quantities(model, space: str) -> list[Quantity]:
    """The controller's axes: the task coordinates (task space) or the joints (joint space)."""
    if space == "task":
        return task_quantities(model.task_dof, model.task_layout)
    return joint_quantities(model.joint_names, model.joint_types)


def effort_word(types) -> str:
    """``"torque"``, ``"force"`` or ``"torque/force"`` for a set of joint types."""
    kinds = set(types)
    if kinds == {"prismatic"}:
        return "force"
    return "torque" if "prismatic" not in kinds else "torque/force"


def torque_limit_sources(spec) -> tuple[np.ndarray, list[str]]:
    """The effective torque limit per actuator and where each comes from.

    Returns
    -------
    limit : ndarray, shape (n,)
        The least of ``[safety] torque_max`` (else the robot file's limit) and what the drive
        delivers (:meth:`controller.app.run.RunSpec.drive_capabilities`) [N m | N].
    source : list of str, length n
        ``"robot file"``, ``"[safety] torque_max"`` or ``"drive"`` (the binding one).
    """
    own = "[safety] torque_max" if spec.safety.torque_max is not None else "robot file"
    tm, n = spec.safety.torque_max, spec.model.dof
    if tm is not None and np.ndim(tm) >= 1 and np.size(tm) != n:
        from dynamics.errors import ConfigError
        raise ConfigError(f"expected a scalar or {n} values (one per joint), got {np.size(tm)}",
                          getattr(spec, "file", None), "safety.torque_max")
    caps = spec.drive_capabilities() if hasattr(spec, "drive_capabilities") else None
    lim, drive = least_torque_limit(spec.model, spec.safety.torque_max, caps)
    return lim, ["drive" if d else own for d in drive]


def least_torque_limit(model, safety_torque_max, caps) -> tuple[np.ndarray, np.ndarray]:
    """The least of ``[safety] torque_max`` (else the model's limits) and the drives' capabilities.

    Parameters
    ----------
    model : Model
    safety_torque_max : float, array (n,) or None
    caps : list of drivers.base.JointCapability or None

    Returns
    -------
    limit : ndarray, shape (n,)
        [N m | N].
    drive : ndarray of bool, shape (n,)
        Where the drive's is the least.
    """
    n = model.dof
    lim = safety_torque_max if safety_torque_max is not None else model.limits.torque_max
    lim = np.broadcast_to(np.asarray(lim, dtype=float), (n,)).copy()
    drive = np.zeros(n, dtype=bool)
    for j, c in enumerate(caps or ()):
        if c.torque_max_nm < lim[j]:
            lim[j], drive[j] = c.torque_max_nm, True
    return lim, drive


def effective_torque_limit(spec) -> np.ndarray:
    """The limit the controller saturates and the safety layer clips to, shape (n,) [N m | N]:
    the least of ``[safety] torque_max`` (else the robot file's limits) and the drives'
    (:func:`torque_limit_sources`)."""
    return torque_limit_sources(spec)[0]


def _threshold_s(timing: dict) -> float:
    from ..loop import TimingStats
    return TimingStats.threshold_s(timing)


def timing_health(timing: dict, clock: str) -> dict:
    """Deadline health of a run from :meth:`controller.loop.TimingStats.as_dict`.

    Returns
    -------
    dict
        ``clock``, ``deadlines`` (True on the wall clock: only there can a deadline
        be missed), ``cycles``, ``missed``, ``missed_fraction``, ``miss_threshold_s``
        (lateness counted as a miss), ``warn_fraction`` (:data:`MISS_WARN_FRACTION`),
        ``lateness_max_s`` and ``ok`` (False when more than ``warn_fraction`` missed).
    """
    cycles = int(timing.get("n_cycles", 0) or 0)
    missed = int(timing.get("missed_deadlines", 0) or 0)
    frac = missed / cycles if cycles else 0.0
    deadlines = clock == "wall"
    late = timing.get("lateness", {}) or {}
    return {"clock": clock, "deadlines": deadlines, "cycles": cycles, "missed": missed,
            "missed_fraction": frac,
            "miss_threshold_s": _threshold_s(timing),
            "warn_fraction": MISS_WARN_FRACTION, "lateness_max_s": late.get("max"),
            "ok": not (deadlines and frac > MISS_WARN_FRACTION)}


# -- the console summary ---------------------------------------------------------
def _num(v, scale: float = 1.0, digits: int = 4) -> str:
    if v is None:
        return "-"
    v = float(v)
    if not math.isfinite(v):
        return "-" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return f"{v * scale:.{digits}g}"


def _us(v) -> str:
    if v is None or not math.isfinite(float(v)):
        return "-"
    return f"{float(v) * 1e6:.0f}"


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Rows of strings as aligned columns: the first ``left`` columns left-aligned, the rest right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for r in [header, *rows]:
        cells = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  " + "   ".join(cells).rstrip())
    return out


def _status_line(spec, result, metrics: dict, health: dict) -> str:
    status = result.status.upper()
    if not health["ok"]:
        status += (f", TIMING NOT HELD ({100 * health['missed_fraction']:.1f} % of the cycles "
                   f"missed their deadline)")
    rtf = metrics.get("real_time_factor", math.nan)
    return (f"run '{spec.name}': {status} after {result.n_cycles} cycles "
            f"({result.n_cycles * spec.period_s:.3f} s controlled, wall {result.wall_time_s:.2f} s, "
            f"real-time factor {rtf:.1f}x)")


def _timing_lines(tm: dict, health: dict) -> list[str]:
    comp, cyc, lat = tm.get("compute", {}), tm.get("cycle", {}), tm.get("lateness", {})
    work = (f"compute p50 {_us(comp.get('p50'))} p99 {_us(comp.get('p99'))} p99.9 {_us(comp.get('p99_9'))}; "
            f"cycle p50 {_us(cyc.get('p50'))} p99 {_us(cyc.get('p99'))} p99.9 {_us(cyc.get('p99_9'))}")
    if not health["deadlines"]:
        return [f"  timing [us] ({health['clock']} clock: simulated time waits for the computation, "
                "no deadline can be missed)", f"    {work}"]
    lines = [f"  timing [us] (wall clock, period {_us(tm.get('period_s'))}): "
             f"missed deadlines {health['missed']} of {health['cycles']} cycles "
             f"({100 * health['missed_fraction']:.2f} %; a miss starts > {_us(health['miss_threshold_s'])} late)",
             f"    lateness p50 {_us(lat.get('p50'))} p99 {_us(lat.get('p99'))} p99.9 {_us(lat.get('p99_9'))} "
             f"max {_us(lat.get('max'))}; {work}"]
    if not health["ok"]:
        lines.append(f"  WARNING: TIMING NOT HELD: {100 * health['missed_fraction']:.1f} % of the cycles missed "
                     f"their deadline (more than {100 * health['warn_fraction']:g} %), worst "
                     f"{_num(health['lateness_max_s'], 1e3)} ms late. The controller ran slower than its period: "
                     "these results do not show what the robot does at the configured rate. Lower the rate, "
                     "free the CPU, or enable real-time scheduling ([loop.realtime]).")
    elif health["missed"]:
        lines.append(f"  note: {health['missed']} deadline(s) missed (within the {100 * health['warn_fraction']:g} % "
                     "allowance)")
    return lines


def serial_tool_positions(model, q_ref: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference and measured tool positions of a serial arm by forward kinematics.

    Parameters
    ----------
    model : dynamics.Model
        A serial arm (``forward_kinematics`` of a batch of joint vectors).
    q_ref, q : ndarray, shape (N, n)
        Reference and measured joint positions [rad or m].

    Returns
    -------
    p_ref, p : ndarray, shape (N, 3)
        Tool positions in the base frame [m].
    """
    return (np.asarray(model.forward_kinematics(q_ref))[:, :3, 3],
            np.asarray(model.forward_kinematics(q))[:, :3, 3])


def tool_path_error(spec, log) -> dict:
    """The tool's position error of a serial arm following a task path with a joint-space law.

    The controller tracks joints, so the run's metrics are joint errors; this is what the tool
    did in the path's space: ``|p(q_ref) - p(q)|`` per cycle, by forward kinematics (the
    same curve as ``path.png``).

    Returns
    -------
    dict
        ``tool_rms_position_error_m``, ``tool_max_position_error_m`` [m]; empty when the run is
        not a serial arm on a task path in joint space.
    """
    model = spec.model
    if (spec.space != "joint" or hasattr(model, "task_dof") or getattr(spec.trajectory, "task", None) is None
            or log is None or len(log) == 0):
        return {}
    p_ref, p = serial_tool_positions(model, np.asarray(log["ref_pos"]), np.asarray(log["q"]))
    d = np.linalg.norm(p_ref - p, axis=1)
    return {"tool_rms_position_error_m": float(np.sqrt(np.mean(d ** 2))),
            "tool_max_position_error_m": float(np.max(d))}


def _limit_notes(spec, joints, at, sat, srcs) -> list[str]:
    """Which limit acted, for the joints whose commanded torque was at its limit: the law's own
    saturation (``[controller] saturate``, at the same limit: nothing left for the safety layer to
    clip) or the safety layer's clip."""
    hit = [j for j in range(min(len(at), len(joints))) if at[j]]
    if not hit:
        return []
    names = ", ".join(f"{joints[j].name} {100 * at[j]:.1f} %" for j in hit)
    where = sorted({srcs[j] for j in hit})
    clipped = any(sat[j] for j in hit if sat[j] is not None)
    if spec.controller.saturate and not clipped:
        who = (f"the controller saturated its own output at the limit ({' / '.join(where)}; "
               f"[controller] saturate = true), so the safety layer had nothing to clip")
    elif spec.controller.saturate:
        who = (f"the controller saturated its output at the limit ({' / '.join(where)}) and the "
               f"safety layer clipped what came after it (the stop and hold reactions)")
    else:
        who = f"the safety layer clipped the controller's command at the limit ({' / '.join(where)})"
    return [f"  at the torque limit: {names} of the cycles: {who}; the tracking figures above "
            f"are those of a saturated actuator"]


def format_summary(spec, result, metrics: dict) -> str:
    """The end-of-run summary (console), units on every value (see module docstring).

    Parameters
    ----------
    spec : controller.app.run.RunSpec
    result : controller.loop.RunResult
    metrics : dict
        :func:`controller.app.run.summary_metrics` of the run.
    """
    tm = metrics.get("timing") or (result.timing.as_dict() if result.timing is not None else {})
    health = metrics.get("timing_health") or timing_health(tm, spec.clock)
    lines = [_status_line(spec, result, metrics, health),
             f"  controller {spec.controller.kind} ({spec.space} space) at {spec.rate_hz:g} Hz; "
             f"driver {spec.driver_type} ({'hardware' if spec.hardware else 'simulated plant'}); "
             f"{spec.clock} clock"]
    if "rms_position_error_m" in metrics:
        lines.append(f"  task position error : RMS {_num(metrics['rms_position_error_m'], 1e3)} mm, "
                     f"max {_num(metrics['max_position_error_m'], 1e3)} mm")
    if "rms_orientation_error_rad" in metrics:
        lines.append(f"  orientation error   : RMS {_num(metrics['rms_orientation_error_rad'], 1e3)} mrad, "
                     f"max {_num(metrics['max_orientation_error_rad'], 1e3)} mrad")
    if "tool_rms_position_error_m" in metrics:
        lines.append(f"  tool position error : RMS {_num(metrics['tool_rms_position_error_m'], 1e3)} mm, "
                     f"max {_num(metrics['tool_max_position_error_m'], 1e3)} mm (the task path, by forward "
                     f"kinematics of the joints; the law tracks joints)")
    axes = controller_quantities(spec.model, spec.space)
    rms, mx = metrics.get("rms_error", []), metrics.get("max_abs_error", [])
    rows = [[a.name, f"{_num(rms[i], a.error_scale)} {a.error_unit}", f"{_num(mx[i], a.error_scale)} {a.error_unit}"]
            for i, a in enumerate(axes[:len(rms)])]
    if rows:
        lines += _table(["axis", "RMS error", "max error"], rows)
    joints = joint_quantities(spec.model.joint_names, spec.model.joint_types)
    peak = metrics.get("peak_torque", [])
    lim_eff, srcs = torque_limit_sources(spec)
    lim = metrics.get("torque_limit") or lim_eff.tolist()
    sat = metrics.get("saturation_fraction_per_joint") or [None] * len(peak)
    at = metrics.get("at_limit_fraction") or [None] * len(peak)
    rows = []
    for j, q in enumerate(joints[:len(peak)]):
        ratio = peak[j] / lim[j] if lim[j] and math.isfinite(lim[j]) else None
        rows.append([q.name, f"{_num(peak[j])} {q.effort_unit}", f"{_num(lim[j])} {q.effort_unit}",
                     "-" if ratio is None else f"{100 * ratio:.1f} %",
                     "-" if at[j] is None else f"{100 * at[j]:.1f} %",
                     "-" if sat[j] is None else f"{100 * sat[j]:.1f} %"])
    if rows:
        src = srcs[0] if len(set(srcs)) == 1 else "least of robot file/[safety]/drive"
        lines += _table(["joint", f"peak |{effort_word(spec.model.joint_types)}|", f"limit ({src})",
                         "peak/limit", "at limit", "clipped"], rows)
        lines += _limit_notes(spec, joints, at, sat, srcs)
    if tm:
        lines += _timing_lines(tm, health)
    if result.faults:
        lines.append("  faults:")
        lines += [f"    {f}" for f in result.faults]
        for f in result.faults:
            if f.cause in ("internal", "driver"):
                lines.append(f"  WARNING: the run ended on an unexpected error ({f.message}); the drives were "
                             "commanded zero torque and disabled, the log up to it is kept")
                break
    lines += [f"  note: {m}" for m in result.messages]
    return "\n".join(lines)
