"""Who may import whom (README's folder tour), read from the source.

Every ``import`` statement of the four packages is read with :mod:`ast`, the ones inside
functions included: a function-local import is still a dependency (it runs whenever the
function does), and a cycle through one is how ``controller.app.run`` and ``controller.app.tune``
came to need each other.  Imports under ``if TYPE_CHECKING:`` would count too; there are
none.  Rules:

* no import cycle among the package's modules;
* the floors: ``dynamics`` imports none of the other three; ``trajectories`` may use
  ``dynamics`` only; ``drivers`` may use ``dynamics`` only; ``controller`` may use all;
* codecs import no transport (pure bytes <-> values), real drivers never import the
  simulated side (``drivers.sim``), and no protocol's driver imports another's (what they
  share is in ``drivers.base`` and ``drivers.transport``: a Dynamixel run does not load the MIT
  driver's compiled kernels, checked in a fresh process);
* the control core (the modules directly in ``controller/``) never imports the application
  (``controller.app`` and its modules), at any level: not at module level, not inside a function,
  not by ``importlib.import_module``/``__import__`` of a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynamics", "trajectories", "drivers", "controller")

#: the control core, directly in ``controller/``: laws, gains, safety, loop, clock, telemetry
#: (and what they need)
CORE = {"controller." + m for m in ("laws", "_law_kernels", "_stewart_law_kernels", "gains", "estimation", "safety",
                                    "_safety_rules", "loop", "compiled", "_fast_loop", "_fast_loop_stewart",
                                    "clock", "telemetry", "telemetry_mcap", "telemetry_ros2", "telemetry_live",
                                    "metrics", "plausibility")}
#: the application on top of it, in ``controller/app/``
APP = "controller.app"
APPLICATION = {APP} | {f"{APP}.{m}" for m in ("run", "api", "cli", "commands", "tune", "tune_config", "engines",
                                              "robustness",
                                              "identify", "explain", "report", "plots", "animate",
                                              "bringup", "calibration")}
#: what each package may import from the others
ALLOWED = {"dynamics": set(), "trajectories": {"dynamics"}, "drivers": {"dynamics"},
           "controller": {"dynamics", "trajectories", "drivers"}}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the package modules it imports (module-level and function-local)."""
    mods = _modules() if modules is None else modules
    graph = {}
    for m, p in mods.items():
        is_pkg = p.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # ``from pkg import sub`` depends on the submodule, not on the package
                names = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                         for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in mods:      # ``import a.b.c`` of a non-module attribute
                    name = name.rpartition(".")[0]
                if name and name != m:
                    deps.add(name)
        graph[m] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


MODULES = _modules()


@pytest.fixture(scope="module")
def GRAPH():
    """The package's import graph, built when a test of this file runs (not at collection:
    every xdist worker collects every file)."""
    return import_graph(MODULES)


def test_no_import_cycle(GRAPH):
    found = cycles(GRAPH)
    detail = [{m: sorted(GRAPH[m] & set(c)) for m in c} for c in found]
    assert not found, detail


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("pkg", PACKAGES)
def test_the_floors(pkg, GRAPH):
    bad = sorted((m, d) for m, deps in GRAPH.items() if m.split(".")[0] == pkg
                 for d in deps if d.split(".")[0] not in ALLOWED[pkg] | {pkg})
    assert not bad, bad


def test_codecs_are_pure_and_real_drivers_do_not_import_the_simulation(GRAPH):
    transports = {"drivers.transport", "drivers.serial_port"}
    bad = []
    for m, deps in GRAPH.items():
        if m.startswith("drivers.codecs"):
            bad += [(m, d) for d in deps if d in transports or not d.startswith(("drivers.codecs", "dynamics"))]
        elif m.startswith("drivers.") and not m.startswith("drivers.sim"):
            bad += [(m, d) for d in deps if d.startswith("drivers.sim")]
    assert not bad, bad


#: the drivers of the protocols (device layer): none imports another
PROTOCOL_DRIVERS = {"drivers.mit", "drivers.mit_health", "drivers.odrive", "drivers.cia402", "drivers.dynamixel"}
#: what each may share (the MIT driver and its health monitor are one protocol)
SAME_PROTOCOL = {("drivers.mit", "drivers.mit_health")}


def test_no_protocol_driver_imports_another(GRAPH):
    bad = sorted((m, d) for m in PROTOCOL_DRIVERS for d in GRAPH[m]
                 if d in PROTOCOL_DRIVERS and d != m and (m, d) not in SAME_PROTOCOL)
    assert not bad, bad


@pytest.mark.parametrize("module,own", [("drivers.odrive", ["drivers._odrive_kernels", "numba"]),
                                        ("drivers.cia402", ["drivers._cia402_kernels", "numba"]),
                                        ("drivers.dynamixel", [])])
def test_a_driver_loads_only_its_own_compiled_kernels(module, own):
    """Importing a protocol's driver loads no other protocol's kernels, and numba only when the
    driver has compiled kernels of its own (MIT, ODrive CAN's and CiA 402's torque encoders): an import of
    numba costs about 0.6 s."""
    import subprocess
    import sys

    kernels = ("numba", "drivers.mit", "drivers._mit_kernels", "drivers._odrive_kernels", "drivers._cia402_kernels")
    code = (f"import sys; import {module}; "
            f"print(sorted(m for m in sys.modules if m in {kernels!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(own)), out.stdout


def _is_app(name: str) -> bool:
    return name == APP or name.startswith(APP + ".")


def _dynamic_imports(path: Path) -> set[str]:
    """Literal module names given to ``importlib.import_module(...)`` or ``__import__(...)``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if fname in ("import_module", "__import__"):
                out.add(node.args[0].value)
    return out


def core_imports_of_the_application(graph: dict[str, set[str]], modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(core module, application module) for every import of ``controller.app`` by a module of
    ``controller`` outside ``controller/app/``: static imports at any level and literal dynamic ones."""
    core = [m for m in graph if m.split(".")[0] == "controller" and not _is_app(m)]
    bad = {(m, d) for m in core for d in graph[m] if _is_app(d)}
    bad |= {(m, d) for m in core for d in _dynamic_imports(modules[m]) if _is_app(d)}
    return sorted(bad)


def test_the_control_core_does_not_import_the_application(GRAPH):
    controller = {m for m in GRAPH if m.split(".")[0] == "controller"} - {"controller"}
    core = {m for m in controller if not _is_app(m)}
    app = controller - core
    assert core == CORE, "classify the new module (core or app?): " + str(core ^ CORE)
    assert app == APPLICATION, "classify the new module (core or app?): " + str(app ^ APPLICATION)
    bad = core_imports_of_the_application(GRAPH, MODULES)
    assert not bad, bad


def test_the_core_check_sees_every_kind_of_import(tmp_path):
    """The check above fails on a core module importing the application, however it does."""
    (tmp_path / "controller" / "app").mkdir(parents=True)
    files = {"controller": "controller/__init__.py", "controller.app": "controller/app/__init__.py",
             "controller.app.run": "controller/app/run.py", "controller.laws": "controller/laws.py"}
    for rel in files.values():
        (tmp_path / rel).write_text("")
    mods = {m: tmp_path / rel for m, rel in files.items()}
    violations = {
        "from .app.run import build_run": ("controller.laws", "controller.app.run"),
        "def f():\n    from .app import run": ("controller.laws", "controller.app.run"),
        "def f():\n    import controller.app.run": ("controller.laws", "controller.app.run"),
        "from controller import app": ("controller.laws", "controller.app"),
        "import importlib\nm = importlib.import_module('controller.app.run')": ("controller.laws", "controller.app.run"),
    }
    for src, expected in violations.items():
        mods["controller.laws"].write_text(src)
        assert core_imports_of_the_application(import_graph(mods), mods) == [expected], src
    mods["controller.laws"].write_text("from dynamics.base import Model\n")
    mods["controller.app.run"].write_text("from ..laws import Controller\n")
    assert core_imports_of_the_application(import_graph(mods), mods) == []


#: the places allowed to read ``sys.modules`` or call ``inspect.signature``, and why: none of
#: them learns about a model from it
REFLECTION_ALLOWED = {
    "dynamics._kernel_cache": "numba's own configuration, if numba is loaded",
    "dynamics._mechanism_derive": "registers a generated module, for numba's cache",
    "controller.app.explain": "the options of the trajectory presets, for --explain",
    "trajectories.config": "the options of a trajectory preset: its function's parameters",
}


def reflection_in(path: Path) -> list[str]:
    """The ``sys.modules`` reads and ``inspect.signature`` calls in a source file, as text."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            pair = (node.value.id, node.attr)
            if pair in (("sys", "modules"), ("inspect", "signature")):
                found.append((node.lineno, f"{pair[0]}.{pair[1]} (line {node.lineno})"))
    return [text for _, text in sorted(found)]


def test_models_are_known_by_their_interface_not_by_reflection():
    """A model family is added in ``dynamics/`` alone: the plant, the laws, the supervisor and the
    application learn a model's family, pose hint and angle convention from the members of
    ``dynamics.base.Model`` (``family``, ``pose_hint_methods``, ``task_rotation``,
    ``task_rate_matrix``), never by looking at signatures or loaded modules."""
    bad = {m: f for m, p in MODULES.items() if m not in REFLECTION_ALLOWED and (f := reflection_in(p))}
    assert not bad, bad
    assert set(REFLECTION_ALLOWED) <= set(MODULES)


def test_the_reflection_check_sees_both_forms(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import inspect, sys\nm = sys.modules.get('x')\nok = inspect.signature(len)\n")
    assert reflection_in(src) == ["sys.modules (line 2)", "inspect.signature (line 3)"]
    src.write_text("import sys\nx = sys.path\n")
    assert reflection_in(src) == []
