"""The packages' imports, read with `ast` (function-level imports included): no cycle, no private name
imported across modules, and the layers flow one way: ablations → bench → vit."""

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
            while target and target not in modules:  # `import ablations.cost` counts as ablations.cost
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
    assert "ablations.executors.local" in graph()["ablations.executors"]


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


@pytest.mark.parametrize("argv", [["report", "--reference", "none"], ["compare", "{out}", "{out}"], ["columns"]])
def test_reading_results_loads_no_trainer_runner_or_executor(tmp_path, argv):
    """The commands that read a results folder stand on the store, not on the machinery that writes it."""
    import shutil
    import subprocess
    import sys

    out = tmp_path / "out"
    source = ROOT / "results" / "reference" / "ablations"   # one sweep of the committed results: its files
    shutil.copytree(source / "preds" / "depth", out / "ablations" / "preds" / "depth")
    for table in source.glob("depth*.csv"):
        shutil.copy(table, out / "ablations" / table.name)
    args = [a.format(out=out) for a in argv] + (["--out", str(out)] if argv[0] == "report" else [])
    code = (f"import sys; from ablations.__main__ import main; status = main({args!r}); "
            "print(status, sorted(m for m in sys.modules if m.startswith('ablations')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    status, loaded = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == "0", done.stderr[-2000:]
    heavy = [m for m in ("ablations.train", "ablations.executors.local", "ablations.executors.ray", "ablations.spawned",
                         "ablations.runner", "ablations.worker", "ablations.cost", "ablations.checkpoints",
                         "ablations.tasks") if f"'{m}'" in loaded]
    assert not heavy, f"{argv[0]} loaded {heavy}"
    assert "'ablations.store'" in loaded or argv[0] == "columns"
