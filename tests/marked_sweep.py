"""`python tests/marked_sweep.py SECONDS ARGS…`: `python -m ablations ARGS…` with each run's save step marked on
stderr and widened, so that a crash test can kill a sweep inside it and tell that it did (tests/crash.py).

`store.record` saves a run as history, then predictions and weights, then the row (the row is the commit
mark); this wraps the writers it calls, only while it runs, to print `save begin|history|files|end
<run_id>` between them and pause SECONDS at each."""

from __future__ import annotations

import sys
import time

from ablations.__main__ import main
from ablations.results import store


def mark(stage: str, run_id: str, pause: float) -> None:
    print(f"save {stage} {run_id}", file=sys.stderr, flush=True)
    time.sleep(pause)


def install(pause: float) -> None:
    real = {name: getattr(store, name) for name in ("record", "drop_rows", "append_rows", "append_row")}
    saving: list[str] = []   # the run being recorded, while `record` runs

    def record(outcome, paths):
        saving.append(str(outcome.row["run_id"]))
        try:
            real["record"](outcome, paths)
        finally:
            run_id = saving.pop()
        mark("end", run_id, pause)

    def drop_rows(path, column, values):
        if saving and str(path).endswith("-history.csv"):
            mark("begin", saving[-1], pause)
        return real["drop_rows"](path, column, values)

    def append_rows(path, rows, columns):
        done = real["append_rows"](path, rows, columns)
        if saving:
            mark("history", saving[-1], pause)
        return done

    def append_row(path, row, columns):
        if saving:
            mark("files", saving[-1], pause)
        return real["append_row"](path, row, columns)

    store.record, store.drop_rows, store.append_rows, store.append_row = record, drop_rows, append_rows, append_row
    runner = sys.modules.get("ablations.running.runner")   # imported by name there: bound at its import
    if runner is not None:
        runner.record = record


if __name__ == "__main__":
    install(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
