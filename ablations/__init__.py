"""Data, training, sweep specs and the sweep runner: the ablations behind `make ablations`.

The names below are the package's surface for scripts (`benchmarks/`, a notebook): `from ablations import
run_sweeps`. Each loads on first use, so `import ablations` (and the command line's `--help`) imports no torch."""

from __future__ import annotations

from bench.lazy import lazy_names

_WHERE = {
    "COST_ROUNDS": "choices", "RUN_ORDERS": "choices", "default_sweeps": "choices",
    "contrast": "analysis.stats",
    "read_table": "results.schema",
    "SweepPaths": "results.store", "Tables": "results.store", "load_preds": "results.store",
    "model_key": "results.store", "spreads": "results.store", "train_step_ms": "results.store",
    "CostPlan": "running.cost", "run_cost_phases": "running.cost",
    "ExecutorOptions": "running.executors", "LocalExecutor": "running.executors.local",
    "ThreadPool": "running.executors.threads",
    "longest_first": "running.order",
    "run_sweeps": "running.runner",
    "RunOptions": "running.tasks", "make_tasks": "running.tasks",
    "find_spec": "specs", "load_spec": "specs",
    "cached_dataset": "training.data", "load_dataset": "training.data",
    "GraphedEvaluation": "training.evaluation", "check_evaluation": "training.evaluation",
    "evaluate": "training.evaluation",
    "PackedModel": "training.packed", "PackedStep": "training.packed", "train_pack": "training.packed",
    "GraphedPackedStep": "training.packed", "pack_optimizer": "training.packed", "pack_refusal": "training.packed",
    "pack_graphed": "training.packed", "pack_trial": "training.packed", "packed_step": "training.packed",
    "pinned_width": "training.packed",
    "train": "training.train",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
