"""Who may import whom (../ARCHITECTURE.md, README's folder tour), read from the source.

Every ``import`` statement of the four packages is read with :mod:`ast`, the ones inside
functions included: a function-local import is still a dependency (it runs whenever the
function does), and a cycle through one is how ``controller.app.run`` and ``controller.app.tune``
came to need each other.  Imports under ``if TYPE_CHECKING:`` would count too; there are
none.  Rules:

* no import cycle among the package's modules;
* the floors: ``dynamics`` imports none of the other three; ``trajectories`` may use
  ``dynamics`` only; ``drivers`` may use ``dynamics`` only; ``controller`` may use all;
* codecs import no transport (pure bytes <-> values), real drivers never import the
  simulated side (``drivers.sim``);
* the control core of ``controller`` never imports its application modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynamics", "trajectories", "drivers", "controller")

#: the control core: laws, gains, safety, loop, clock, telemetry (and what they need)
CORE = {"controller." + m for m in ("laws", "_law_kernels", "gains", "estimation", "safety", "_safety_rules", "loop",
                                    "compiled", "_fast_loop",
                                    "clock", "telemetry", "metrics")}
#: the application on top of it
APPLICATION = {"controller.app"} | {"controller.app." + m for m in ("run", "api", "cli", "commands", "tune", "tune_config",
                                                                       "identify", "explain", "report", "plots", "animate")}
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


GRAPH = import_graph()


def test_no_import_cycle():
    found = cycles(GRAPH)
    detail = [{m: sorted(GRAPH[m] & set(c)) for m in c} for c in found]
    assert not found, detail


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("pkg", PACKAGES)
def test_the_floors(pkg):
    bad = sorted((m, d) for m, deps in GRAPH.items() if m.split(".")[0] == pkg
                 for d in deps if d.split(".")[0] not in ALLOWED[pkg] | {pkg})
    assert not bad, bad


def test_codecs_are_pure_and_real_drivers_do_not_import_the_simulation():
    transports = {"drivers.transport", "drivers.serial_port"}
    bad = []
    for m, deps in GRAPH.items():
        if m.startswith("drivers.codecs"):
            bad += [(m, d) for d in deps if d in transports or not d.startswith(("drivers.codecs", "dynamics"))]
        elif m.startswith("drivers.") and not m.startswith("drivers.sim"):
            bad += [(m, d) for d in deps if d.startswith("drivers.sim")]
    assert not bad, bad


def test_the_control_core_does_not_import_the_application():
    controller = {m for m in GRAPH if m.startswith("controller.")}
    assert controller == CORE | APPLICATION, "classify the new module: " + str(controller ^ (CORE | APPLICATION))
    bad = sorted((m, d) for m in CORE for d in GRAPH[m] if d in APPLICATION)
    assert not bad, bad
