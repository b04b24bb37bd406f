"""`make … INSTALL=0`: can the Python at hand run vitbench without an install step? Every requirement of
pyproject.toml (and of the extras named on the command line) must be installed; the missing ones are named in
one line (exit 2). Finds each module without importing it (`importlib.util.find_spec`: a fraction of a
second for all of them, where importing torch, pandas, scipy and the rest takes seconds). Reads
pyproject.toml with the standard library's `tomllib` (Python ≥ 3.11; `tomli` only on 3.10) and imports
nothing of vitbench."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# distributions whose module has another name
MODULES = {"scikit-learn": "sklearn", "nvidia-ml-py": "pynvml", "pillow": "PIL", "pytest-benchmark": "pytest_benchmark",
           "pytest-timeout": "pytest_timeout", "pytest-xdist": "xdist"}


def _applies(marker: str) -> bool:
    """The one kind of marker pyproject.toml uses: python_version < 'X.Y'."""
    found = re.fullmatch(r"\s*python_version\s*<\s*['\"](\d+)\.(\d+)['\"]\s*", marker)
    return True if not found else sys.version_info[:2] < (int(found[1]), int(found[2]))


def required(extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    """The module names of the requirements that apply to this Python, in pyproject.toml's order."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        if extra not in project.get("optional-dependencies", {}):
            raise SystemExit(f"error: no extra {extra!r} in {pyproject} "
                             f"(extras: {', '.join(project.get('optional-dependencies', {}))})")
        specs += project["optional-dependencies"][extra]
    names = []
    for spec in specs:
        requirement, _, marker = spec.partition(";")
        if marker and not _applies(marker):
            continue
        dist = re.match(r"[A-Za-z0-9_.\-]+", requirement.strip())[0]
        names.append(MODULES.get(dist, dist.replace("-", "_")))
    if sys.version_info >= (3, 11):  # tomli stands in for tomllib on 3.10 only (the test extra tests that fallback)
        names = [n for n in names if n != "tomli"]
    return list(dict.fromkeys(names))


def missing(modules: list[str]) -> list[str]:
    """The modules this Python cannot find (none is imported)."""
    gone = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a broken package (its parent fails to load)
            found = None
        if found is None:
            gone.append(name)
    return gone


def main(argv: list[str]) -> int:
    extras = [e for arg in argv for e in arg.split(",") if e]
    gone = missing(required(extras))
    if gone:
        print(f"error: {sys.executable} cannot import {', '.join(gone)}; install them into it (pip install -e "
              f"'.{'[' + ','.join(extras) + ']' if extras else ''}' needs the network once) or drop INSTALL=0 to build .venv",
              file=sys.stderr)
        return 2
    print(f"{sys.executable}: every module vitbench needs is installed (INSTALL=0: no install step)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
