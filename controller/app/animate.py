"""Stick-figure animation of a robot from a run's log (``torqueloop animate RUN_DIR``).

The measured joint positions of the log are drawn through the robot model named
in the run's ``meta.json``, by the model's own ``stick_figure`` (a serial arm: the
chain of its link frames (DH or URDF joint frames) to the tool; the 3RRR: its three
legs (base joint, elbow, platform joint) and platform triangle; the Stewart
platform: its base and platform hexagons joined by the six legs; a mechanism file:
each body from its joint to the joints, loop points and task point it carries).  The pose of a parallel robot comes
from its forward kinematics, warm-started from the reference pose (task-space
runs) or the previous frame.  Planar motions are drawn in their plane, others in
3-D; lengths in metres.  The reference end-effector path is drawn dashed and the
measured one is traced as the robot moves.

Output: an animated GIF (the static part of the figure drawn once, each frame
only the moving artists over it, written by Pillow, which comes with matplotlib) or, for a ``.html`` file name, a self-contained page with a player
(play, pause, step, speed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from dynamics.base import xyz as _xyz
from dynamics.errors import ConfigError, TorqueloopError

from .plots import _cols, _pyplot, load_run_data

__all__ = ["robot_polylines", "animate_run", "render_frames"]


def robot_polylines(model, q, pose=None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray | None]:
    """The stick figure of ``model`` at actuated positions ``q`` (n,) [rad | m]: the model's own
    :meth:`~dynamics.base.Model.stick_figure` (each family draws itself; ``pose``, a task pose
    guess of a parallel robot), returning ``(lines, tool, X)`` as that method does."""
    return model.stick_figure(np.asarray(q, dtype=float), pose=pose)


def _frame_rows(t: np.ndarray, fps: float, max_frames: int) -> np.ndarray:
    """Log rows of the frames: evenly spaced in time, at most ``max_frames``, about ``fps`` per second."""
    span = float(t[-1] - t[0])
    n = int(min(max_frames, max(2, round(span * fps) + 1)))
    return np.unique(np.clip(np.searchsorted(t, np.linspace(t[0], t[-1], n)), 0, t.size - 1))


def animate_run(log_path, out=None, *, fps: float = 20.0, max_frames: int = 200, dpi: int = 80,
                progress: Callable[[int, int], None] | None = None) -> tuple[Path, int]:
    """Write an animation of the robot from a run's log.

    Parameters
    ----------
    log_path : path
        Run folder or its ``log.npy`` (``meta.json`` beside it names the robot file).
    out : path, optional
        ``.gif`` (default ``RUN_DIR/animation.gif``) or ``.html``.
    fps : float
        Frames per second of the animation; the log is sampled at this rate of
        simulated time, or more sparsely when that would exceed ``max_frames``
        (the title then shows the speed-up).
    max_frames : int
        Upper bound on the number of frames.
    dpi : int
        Resolution of the frames.
    progress : callable, optional
        Called as ``progress(done, total)`` after each frame is rendered (a command line shows it).

    Returns
    -------
    path : Path
        The file written.
    frames : int
        Number of frames.
    """
    if fps <= 0 or max_frames < 2:
        raise ConfigError("animation needs fps > 0 and at least 2 frames")
    plt = _pyplot()
    from matplotlib.animation import FuncAnimation

    data = load_run_data(log_path)
    model = data.model
    if model is None:
        raise ConfigError(f"{data.run_dir}: cannot animate without the robot model "
                          f"({data._model_error or 'meta.json names no robot file'})")
    out = Path(out) if out is not None else data.run_dir / "animation.gif"
    if out.suffix.lower() not in (".gif", ".html"):
        raise ConfigError(f"{out}: the animation is written as .gif or .html")
    log = data.log
    t = log["t"]
    rows = _frame_rows(t, fps, max_frames)
    q = _cols(log["q"])
    ref = _cols(log["ref_pos"])
    guess = ref if data.space == "task" else None
    figures, tools = [], []
    X = getattr(model, "home_pose", None) if hasattr(model, "task_dof") else None
    for k in rows:
        try:
            lines, tool, X = robot_polylines(model, q[k], pose=guess[k] if guess is not None else X)
        except TorqueloopError as err:
            raise ConfigError(f"{data.run_dir}: cannot draw the robot at t = {t[k]:.3f} s: {err}") from err
        figures.append(lines)
        tools.append(tool)
    try:
        ref_path = _reference_path(model, data, rows)
    except TorqueloopError as err:
        raise ConfigError(f"{data.run_dir}: cannot draw the reference path: {err}") from err
    tools = np.array(tools)
    pts = np.vstack([np.vstack(f) for f in figures] + [ref_path])
    span = np.ptp(pts, axis=0)
    flat = [i for i in range(3) if span[i] <= 1e-9 * max(span.max(), 1e-12)]
    plane = [i for i in range(3) if i not in flat][:2] if len(flat) == 1 else None
    names = ("x", "y", "z")
    fig = plt.figure(figsize=(6.4, 6.0), dpi=dpi)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    mid, half = 0.5 * (lo + hi), 0.55 * max(float(np.max(hi - lo)), 1e-3)
    if plane is not None:
        i, j = plane
        ax = fig.add_subplot()
        ax.set_xlim(mid[i] - half, mid[i] + half)
        ax.set_ylim(mid[j] - half, mid[j] + half)
        ax.set_aspect("equal")
        ax.set_xlabel(f"{names[i]} [m]")
        ax.set_ylabel(f"{names[j]} [m]")
        ax.plot(ref_path[:, i], ref_path[:, j], "k--", lw=0.8, label="reference path")
        links = [ax.plot([], [], "o-", lw=2.5, ms=4, color="tab:blue")[0] for _ in figures[0]]
        trace = ax.plot([], [], color="tab:orange", lw=1.2, label="measured path")[0]

        def draw(f):
            for ln, pl in zip(links, figures[f]):
                ln.set_data(pl[:, i], pl[:, j])
            trace.set_data(tools[: f + 1, i], tools[: f + 1, j])
    else:
        ax = fig.add_subplot(projection="3d")
        for a, setter in enumerate((ax.set_xlim, ax.set_ylim, ax.set_zlim)):
            setter(mid[a] - half, mid[a] + half)
        ax.set_box_aspect((1.0, 1.0, 1.0))      # equal ranges drawn as equal lengths: a metre is a metre
        ax.set_xlabel("x [m]")
        ax.set_ylabel("y [m]")
        ax.set_zlabel("z [m]")
        ax.plot(*ref_path.T, "k--", lw=0.8, label="reference path")
        links = [ax.plot([], [], [], "o-", lw=2.5, ms=3, color="tab:blue")[0] for _ in figures[0]]
        trace = ax.plot([], [], [], color="tab:orange", lw=1.2, label="measured path")[0]

        def draw(f):
            for ln, pl in zip(links, figures[f]):
                ln.set_data_3d(pl[:, 0], pl[:, 1], pl[:, 2])
            trace.set_data_3d(tools[: f + 1, 0], tools[: f + 1, 1], tools[: f + 1, 2])
    ax.legend(loc="upper right", fontsize=8)
    speed = (float(t[rows[-1]] - t[rows[0]]) / max(len(rows) - 1, 1)) * fps
    title = fig.suptitle("")

    def update(f):
        draw(f)
        title.set_text(f"{data.title}: t = {t[rows[f]]:.2f} s" + (f" (x{speed:.2g} speed)" if speed > 1.05 else ""))
        return [*links, trace, title]

    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        if out.suffix.lower() == ".html":
            anim = FuncAnimation(fig, update, frames=len(rows), interval=1000.0 / fps, blit=False)
            out.write_text(anim.to_jshtml(fps=fps, default_mode="once"))
            if progress is not None:
                progress(len(rows), len(rows))
        else:
            frames = render_frames(fig, [*links, trace, title], update, len(rows), progress=progress)
            _write_gif(out, frames, fps)
    finally:
        plt.close(fig)
    return out, len(rows)


def render_frames(fig, artists, update: Callable[[int], object], n: int, *, full: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
    """The frames of an animation as RGB arrays, (height, width, 3) uint8 each.

    The figure's static part (axes, ticks, labels, the reference path) is drawn once; each frame
    then redraws only ``artists`` (what ``update(f)`` changes) over a copy of it, which is what
    makes a frame cost milliseconds instead of a whole figure's drawing.  ``full=True`` draws
    the whole figure for every frame instead (the reference the tests compare with).
    """
    canvas = fig.canvas
    if full:
        out = []
        for f in range(n):
            update(f)
            canvas.draw()
            out.append(np.asarray(canvas.buffer_rgba())[..., :3].copy())
            if progress is not None:
                progress(f + 1, n)
        return out
    for a in artists:
        a.set_animated(True)
    try:
        canvas.draw()                       # everything but the animated artists
        background = canvas.copy_from_bbox(fig.bbox)
        out = []
        for f in range(n):
            canvas.restore_region(background)
            update(f)
            for a in artists:
                fig.draw_artist(a)
            out.append(np.asarray(canvas.buffer_rgba())[..., :3].copy())
            if progress is not None:
                progress(f + 1, n)
        return out
    finally:
        for a in artists:
            a.set_animated(False)


def _write_gif(path: Path, frames: list[np.ndarray], fps: float) -> None:
    """An endlessly looping GIF of RGB frames at ``fps`` (Pillow, which matplotlib depends on)."""
    from PIL import Image

    # one palette for the whole animation, from the first, middle and last frames side by side
    # (a plot has few colours; quantising each frame on its own would cost 20x more)
    sample = np.concatenate([frames[0], frames[len(frames) // 2], frames[-1]], axis=1)
    palette = Image.fromarray(sample).quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(round(1000.0 / fps)), loop=0,
                   optimize=False)


def _reference_path(model, data, rows) -> np.ndarray:
    """Reference end-effector positions at the frame rows, (frames, 3) [m]."""
    ref = _cols(data.log["ref_pos"])[rows]
    if data.space == "task":
        k = [i for i, a in enumerate(data.axes) if a.kind == "linear"]
        return _xyz(ref[:, k]) if len(k) in (2, 3) else np.zeros((len(rows), 3))
    if hasattr(model, "task_dof"):
        out, X = [], getattr(model, "home_pose", None)
        for r in ref:
            _, tool, X = robot_polylines(model, r, pose=X)
            out.append(tool)
        return np.array(out)
    return model.forward_kinematics(ref)[:, :3, 3]
