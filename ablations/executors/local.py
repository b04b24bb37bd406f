"""EXECUTOR=local: runs tasks one after another in this process, each dataset loaded once."""

from __future__ import annotations

from typing import Iterator

import torch

from ..tasks import Outcome, Task
from .base import ExecutorOptions, Loader, RunFn


class LocalExecutor:
    remote = False

    def __init__(self, options: ExecutorOptions | None = None) -> None:
        self.options = options or ExecutorOptions()

    def start(self) -> str:
        return f"local: this process, {torch.get_num_threads()} threads"

    def close(self) -> None:
        pass

    def run(self, tasks: list[Task], fn: RunFn, load: Loader) -> Iterator[tuple[Task, Outcome]]:
        for task in tasks:
            yield task, fn(task, load(task.options))
