"""The packages' imports, read with `ast` (function-level imports included): no cycle, no private name
imported across modules, and the layers flow one way: ablations → bench → vit; inside bench, measurement →
bench.training → bench.io; inside ablations, cli → running | analysis → training | results → the
vocabulary at its root (choices, options, specs), with running and analysis never importing each other,
nor training and results."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vit", "bench", "ablations")
LAYER = {"vit": 0, "bench": 1, "ablations": 2}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_of(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import statement of `module`."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, None, node.lineno) if sub in MODULES else (target, alias.name, node.lineno))
    return found


def graph(modules=MODULES) -> dict[str, set[str]]:
    edges = {m: set() for m in modules}
    for m in modules:
        for target, _, _ in imports(m):
            while target and target not in modules:  # `import ablations.running.cost` counts as ablations.running.cost
                target = target.rpartition(".")[0]
            if target and target != m:
                edges[m].add(target)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_walker_sees_a_cycle_and_a_package_submodule_loop():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    # the executors package imports its submodules lazily; they must not import the package back
    assert "ablations.running.executors.local" in graph()["ablations.running.executors"]


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, " → ".join(cycle)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_imported_from_another_module(module):
    private = [f"line {line}: from {target} import {name}" for target, name, line in imports(module)
               if name and name.startswith("_") and not name.startswith("__") and target.split(".")[0] in PACKAGES]
    assert not private, f"{module} imports private names: {private}"


def test_layers_flow_one_way():
    wrong = [f"{m} → {t}" for m, targets in graph().items() for t in targets
             if LAYER[t.split(".")[0]] > LAYER[m.split(".")[0]]]
    assert not wrong, wrong


# Inside a package: the layer of each subpackage or root module, and its rank; a module imports only layers
# of lower rank (or its own). Two layers of one rank never import each other.
INNER = {
    "ablations": {"choices": ("vocabulary", 0), "options": ("vocabulary", 0), "specs": ("vocabulary", 0),
                  "results": ("results", 1), "training": ("training", 1),
                  "running": ("running", 2), "analysis": ("analysis", 2),
                  "cli": ("cli", 3), "__main__": ("cli", 3)},
    # bench: the rest is measurement, 2
    "bench": {"io": ("io", 0), "choices": ("io", 0), "loading": ("io", 0), "units": ("io", 0),
              "training": ("training", 1)},
}


def inner_layer(module: str) -> tuple[str, int] | None:
    """(layer, rank) of a module inside a layered package; None for the package itself and other packages."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] not in INNER:
        return None
    default = ("measurement", 2) if parts[0] == "bench" else ("unplaced", -1)
    return INNER[parts[0]].get(parts[1], default)


def test_every_module_of_a_layered_package_has_a_layer():
    unplaced = [m for m in MODULES if m.split(".")[0] in INNER and (layer := inner_layer(m)) and layer[1] < 0]
    assert not unplaced, f"modules outside the layers of tests/test_imports.py INNER: {unplaced}"


def test_layers_inside_a_package_flow_one_way():
    """running never imports analysis (nor back); training never imports results (nor back); nothing imports
    the command line; the vocabulary (choices, options, specs) and bench.io import no layer above them."""
    wrong = []
    for m, targets in graph().items():
        mine = inner_layer(m)
        for t in targets:
            theirs = inner_layer(t)
            if mine is None or theirs is None or m.split(".")[0] != t.split(".")[0] or mine[0] == theirs[0]:
                continue
            if theirs[1] >= mine[1]:
                wrong.append(f"{m} → {t}")
    assert not wrong, wrong


def test_the_inner_rule_sees_a_sideways_import():
    assert inner_layer("ablations.running.cost") == ("running", 2)
    assert inner_layer("ablations.analysis.report") == ("analysis", 2)
    assert inner_layer("bench.measure") == ("measurement", 2) and inner_layer("bench.training.step") == ("training", 1)
    assert inner_layer("vit.model") is None and inner_layer("ablations") is None


# what reads a sweep's files by path: the results package alone calls them (the others ask `store.Tables`)
TABLE_READERS = {"read_table", "read_design", "read_rows"}
# bench's own tables (pytest-benchmark and `bench run`), which the report's bench section reads
BENCH_TABLE_READERS = {"ablations.analysis.report"}


def calls(module: str) -> list[tuple[str, int]]:
    """(called name, line) of every call of a plain name or an attribute in `module`."""
    return [(node.func.id if isinstance(node.func, ast.Name) else node.func.attr, node.lineno)
            for node in ast.walk(ast.parse(MODULES[module].read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))]


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("ablations.") and not m.startswith("ablations.results")])
def test_no_module_outside_results_reads_a_sweeps_files_by_path(module):
    found = [f"{name} (line {line})" for name, line in calls(module) if name in TABLE_READERS
             and not (module in BENCH_TABLE_READERS and name == "read_rows")]
    assert not found, f"{module} calls {', '.join(found)}: ask `store.Tables` instead"


def status_filters(source: str) -> list[int]:
    """Lines that compare a row's or a table's status with "ok" by hand (`x["status"] == "ok"`,
    `row.get("status") != "ok"`)."""
    def is_status(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "status")

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            sides = (node.left, node.comparators[0])
            if any(isinstance(x, ast.Constant) and x.value == "ok" for x in sides) and any(map(is_status, sides)):
                found.append(node.lineno)
    return sorted(found)


def test_the_status_filter_is_seen_where_written_by_hand():
    assert status_filters('ok = t[t["status"] == "ok"]\nif row.get("status") != "ok": pass\n') == [1, 2]
    assert status_filters('ok = ok_rows(t)\nif status != "ok": pass\nif is_ok(row): pass\n') == []


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("ablations.") and not m.startswith("ablations.results")])
def test_no_module_outside_results_filters_finished_runs_by_hand(module):
    found = status_filters(MODULES[module].read_text())
    assert not found, f"{module} compares status with 'ok' on line(s) {found}: use store.ok_rows, failed_rows or is_ok"


def test_reading_results_loads_no_trainer_runner_or_executor(tmp_path):
    """The commands that read a results folder stand on the store, not on the machinery that writes it: run
    one after another in a fresh process (columns, compare, report), none loads a trainer, runner or
    executor, checked after each."""
    import json
    import shutil
    import subprocess
    import sys

    out = tmp_path / "out"
    source = ROOT / "results" / "reference" / "ablations"   # one sweep of the committed results: its files
    shutil.copytree(source / "preds" / "depth", out / "ablations" / "preds" / "depth")
    for table in source.glob("depth*.csv"):
        shutil.copy(table, out / "ablations" / table.name)
    shutil.copytree(out, tmp_path / "copy")
    commands = [["columns"], ["compare", str(out), str(tmp_path / "copy")], ["report", "--reference", "none", "--out", str(out)]]
    code = (f"import json, sys; from ablations.__main__ import main\nfor argv in {commands!r}:\n"
            "    status = main(argv)\n"
            "    print(json.dumps([argv[0], status, sorted(m for m in sys.modules if m.startswith('ablations'))]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('["')]
    assert [name for name, _, _ in found] == ["columns", "compare", "report"], done.stderr[-2000:]
    for name, status, loaded in found:
        assert status == 0, f"{name}: {done.stderr[-2000:]}"
        heavy = [f"ablations.{m}" for m in ("training.train", "training.checkpoints", "running.executors.local",
                                            "running.executors.ray", "running.spawned", "running.runner",
                                            "running.worker", "running.cost", "running.tasks")
                 if f"ablations.{m}" in loaded]
        assert not heavy, f"{name} loaded {heavy}"
        assert "ablations.results.store" in loaded or name == "columns"


LONGEST_FUNCTION = 60   # lines, docstring included: past that a function does more than one thing


def test_no_function_of_the_harness_the_benches_or_the_benchmarks_is_longer_than_a_screen():
    paths = [p for pkg in ("ablations", "bench", "benchmarks") for p in sorted((ROOT / pkg).rglob("*.py"))]
    long = [f"{path.relative_to(ROOT)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in paths for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION]
    assert not long, long


BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_loads_and_imports_only_the_packages_top_level_names(path, monkeypatch):
    """The benchmarks are scripts no other test runs: each must load, and reach the project only through the
    names `ablations`, `bench` and `vit` export, so that a refactor of their insides cannot break one unseen."""
    import importlib
    import importlib.util

    deep = [f"line {node.lineno}: from {node.module}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module and "." in node.module
            and node.module.split(".")[0] in ("ablations", "bench", "vit")]
    assert not deep, f"{path.name} imports below the packages' surface: {deep}"
    for node in ast.walk(ast.parse(path.read_text())):   # every name imported, those inside functions too
        if isinstance(node, ast.ImportFrom) and node.module in ("ablations", "bench", "vit"):
            package = importlib.import_module(node.module)
            assert all(hasattr(package, alias.name) for alias in node.names), (path.name, node.module)
    monkeypatch.syspath_prepend(str(path.parent))   # as a script run there sees its neighbours
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_the_training_commands_module_reaches_few_project_modules():
    """`ablations.cli.commands` composes named steps (`prepare`, `outcome`, the runner, the executors): what it
    makes of its arguments and what it says at its end live in their own modules, so it reaches at most 12."""
    project = {target for target, _, _ in imports("ablations.cli.commands")
               if target.split(".")[0] in ("ablations", "bench", "vit")}
    assert len(project) <= 12, sorted(project)
