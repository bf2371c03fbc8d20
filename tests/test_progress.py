"""Progress bars (tqdm) on a terminal for `run`, `tune`/`robustness` sweeps and `identify`'s runs;
nothing extra on a pipe."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

pytest.importorskip("tqdm")

from controller.app import commands  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "hil_configs" / "runs" / "3rrr_circle.toml"


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _run_cli(tmp_path: Path, tty: bool) -> tuple[int, str, str]:
    """`torqueloop run` of 0.5 s with stderr on a pseudo-terminal or a pipe; its stdout and stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    argv = [sys.executable, "-m", "controller.app.cli", "run", str(DEMO), "--duration", "0.5", "--no-plots",
            "-o", str(tmp_path / ("tty" if tty else "pipe"))]
    if not tty:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))     # a 100-column terminal
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    err = b""
    while True:
        r, _, _ = select.select([master], [], [], 900)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:     # the other end closed
            break
        if not chunk:
            break
        err += chunk
    out = p.communicate(timeout=900)[0]
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def test_run_shows_a_bar_on_a_terminal_and_nothing_on_a_pipe(tmp_path):
    rc, out, err = _run_cli(tmp_path, tty=True)
    assert rc == 0, err
    assert "run" in err and "100.0%|" in err and "0.50/0.50 s" in err
    rc, out, err = _run_cli(tmp_path, tty=False)
    assert rc == 0, err
    assert "%|" not in err and "\r" not in err and "%|" not in out and "\r" not in out
    assert "COMPLETED" in out


@pytest.mark.parametrize("tty", [True, False])
def test_a_sweep_bar_on_a_terminal_nothing_on_a_pipe(monkeypatch, tty):
    stream = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    progress = commands._sweep_progress("tune")  # noqa: SLF001
    for done in range(1, 6):
        progress(done, 5)
    progress.close()
    text = stream.getvalue()
    if tty:
        assert "tune" in text and "100%|" in text.replace(" ", "") and "5/5" in text
    else:
        assert text == ""


def test_no_progress_switches_the_sweep_bar_off_on_a_terminal(monkeypatch):
    stream = _Tty()
    monkeypatch.setattr(sys, "stderr", stream)
    progress = commands._sweep_progress("tune", off=True)  # noqa: SLF001
    progress(1, 2)
    progress.close()
    assert stream.getvalue() == ""


def test_identify_runs_get_the_run_bar(monkeypatch, tmp_path):
    """identify's excitation and validation runs go through execute_config with the CLI's run
    progress: each run's clock is wrapped and closed."""
    from controller.app import identify
    from controller.app.run import load_run

    seen = []

    class Wrap:
        def __init__(self, inner, total_s):
            self.inner, self.total_s = inner, total_s
            self.steps = 0
            seen.append(self)

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def wait_until(self, t):
            self.steps += 1
            return self.inner.wait_until(t)

        def done(self):
            self.closed = True

    spec = load_run(DEMO, duration_s=0.2)
    data = commands._absolutise(spec.data, DEMO.parent)  # noqa: SLF001 - its paths from the new folder
    spec2, result = identify.execute_config(data | {"loop": {**data["loop"], "duration_s": 0.2}},
                                            str(DEMO), tmp_path / "x", run_progress=Wrap)
    assert result.status == "completed"
    assert len(seen) == 1 and seen[0].closed and seen[0].total_s == pytest.approx(0.2)
    assert seen[0].steps >= result.n_cycles - 1
