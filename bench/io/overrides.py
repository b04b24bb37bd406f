"""`--set key=value` overrides of config fields, as the command lines take them."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any


def parse_value(text: str) -> Any:
    """A `--set key=value` value: a Python literal (6, 1e-3, True), true/false as in TOML, or else the bare
    word (sdpa, conv)."""
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`["depth=6", "stem=patch"]` → `{"depth": 6, "stem": "patch"}`; an item without `=` raises ValueError."""
    changes = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r} is not key=value")
        changes[key] = parse_value(value)
    return changes


def overrides_text(changes: dict[str, Any]) -> str:
    """`{"depth": 6, "stem": "patch"}` → `--set depth=6 stem=patch`: the overrides named as a refusal names them."""
    return "--set " + " ".join(f"{key}={value}" for key, value in changes.items())
