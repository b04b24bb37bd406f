"""Names a package loads on first use (PEP 562): a package's `__getattr__` and `__dir__` from one map of its
names to the submodules that define them, so importing the package loads none of them. (`vit`, below bench,
keeps its own copy of these lines.)"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(__getattr__, __dir__) for `package`: each name of `where` imported from its submodule (relative to the
    package) the first time it is asked for, then kept in the package."""
    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{where[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))
    return __getattr__, __dir__
