"""A command's cost phase: every point's speed, memory and MFU measured side by side, before any training.

Speed is a property of a configuration, not of a seed or of trained weights, so each distinct model of
the command's sweeps is measured once per round, in interleaved rounds (`bench.rounds`), with nothing
else running: an inference step at `infer_batch_size` and the training step that training itself runs
(`bench.step.make_step`: the point's AdamW parameter groups, label smoothing and clipping; one CUDA
graph per step on CUDA unless GRAPHS=0) at the sweep's training batch size. A model that several sweeps
share (the base config of `make ablations`) is timed once. Each round of each point and mode is one row
of `<out>/ablations/<sweep>-cost.csv` of every sweep that has the point, appended as it is measured.
Peak memory is taken in the first round only: the allocator's peak of a fixed step is the same every time.
On CUDA each item's step is built once per phase and replayed in every round (`Steps`): one capture
per training item, not one per round.

The rows of one phase share a `phase_id`, a hash of everything that defines the measurement (the
sweeps, models, batch sizes, dtype, rounds, timing, device). A rerun that finds a complete phase with
the same id reuses it; the rows of a phase cut short by a kill are removed and the phase is measured
again whole, so a sweep's points are always compared within one sitting. The training rows then carry
their config's inference figures: the median over rounds, with the interquartile range over rounds as
`step_ms_iqr`, and `cost_rounds`.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from bench.csvio import append_row, drop_rows
from bench.env import environment, run_id
from bench.failures import classify_failure
from bench.measure import MeasureConfig, StepFactory, complexity, default_step, measure
from bench.recipe import TrainConfig
from bench.rounds import interleaved
from bench.step import train_mode, training_step
from bench.timing import TimingConfig
from vit import VisionTransformer, ViTConfig

from .choices import COST_ROUNDS
from .schema import COST_COLUMNS
from .specs import Point
from .store import complete_phase, model_key

# Timing of one item in one round, by device. A CPU step of these models takes 5–50 ms: 0.25 s is 5–50
# steps. A graphed CUDA step of them takes about a millisecond, so 0.25 s would be hundreds of steps per
# item and round and tens of seconds of `make ablations`; 50 ms is tens of steps, each bracketed by CUDA
# events, and the median over rounds takes ≥ 100 of them.
CPU_TIMING = TimingConfig(warmup=3, min_repeats=5, min_time_s=0.25)
CUDA_TIMING = TimingConfig(warmup=3, min_repeats=20, min_time_s=0.05)


@dataclass(frozen=True)
class CostPlan:
    """rounds: interleaved rounds (0 = no cost phase; the rows' speed columns stay empty).
    infer_batch_size: images per inference step. timing: per item and round (None: CPU_TIMING, or
    CUDA_TIMING on CUDA). measure_mfu: against the device's measured matmul peak. keep_steps: each item's
    step built once per phase and reused in every round (None: on CUDA, where building the training step
    captures a CUDA graph)."""
    rounds: int = COST_ROUNDS
    infer_batch_size: int = 256
    timing: TimingConfig | None = None
    measure_mfu: bool = True
    keep_steps: bool | None = None  # build each item's step once per phase (None: on CUDA; see `Steps`)

    def timing_on(self, device: torch.device) -> TimingConfig:
        if self.timing is not None:
            return self.timing
        return CUDA_TIMING if device.type == "cuda" else CPU_TIMING

    def __post_init__(self) -> None:
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 0:
            raise ValueError(f"cost rounds must be an int ≥ 0, got {self.rounds!r}")
        if isinstance(self.infer_batch_size, bool) or not isinstance(self.infer_batch_size, int) \
                or self.infer_batch_size < 1:
            raise ValueError(f"infer batch size must be a positive int, got {self.infer_batch_size!r}")


@dataclass(frozen=True)
class _Item:
    cfg: ViTConfig
    mode: str
    mcfg: MeasureConfig
    train: TrainConfig


def _items(points: list[Point], plan: CostPlan, device: torch.device) -> list[_Item]:
    """One inference item per distinct model and one training item per distinct model and step (batch size,
    dtype, compile, what trains): settings that differ only in what a step does not depend on (the
    learning rate, the augmentation, a tuned value) share their items."""
    found: dict[tuple, _Item] = {}
    for p in points:
        dtype, compile_ = p.train.resolved_dtype(device), p.train.compile
        for mode, batch in (("infer", plan.infer_batch_size), ("train", p.train.batch_size)):
            step = (batch, dtype, compile_, p.train.freeze) if mode == "train" else (dtype, compile_)
            found.setdefault((model_key(p.model), mode, step), _Item(
                p.model, mode, MeasureConfig(mode=mode, batch_size=batch, dtype=dtype, compile=compile_,
                                             timing=plan.timing_on(device)), p.train))
    return list(found.values())


def item_key(item: _Item) -> str:
    """What makes two sweeps' items the same measurement: the model, the mode and the training step's config."""
    return run_id({"model": item.cfg.to_dict(), "mode": item.mode, "train": item.train.identity()})


def phase_id(sweeps: list[str], items: list[_Item], plan: CostPlan, device: torch.device, graphs: bool = True) -> str:
    env = environment(device)
    return run_id({"sweep": "+".join(sweeps), "items": [(i.cfg.to_dict(), dataclasses.asdict(i.mcfg)) for i in items],
                   "train": [i.train.identity() for i in items if i.mode == "train"], "graphs": graphs,
                   "rounds": plan.rounds, "device_name": env["device_name"], "torch": env["torch_version"]})


class Steps:
    """The phase's built steps, each kept across rounds so that it is built (on CUDA: its training step
    captured into a CUDA graph, with a synchronisation and a warm-up) once per phase rather than once per
    round, while the device's memory in use stays within `share` of its total; beyond that the least
    recently timed are let go (and built again when next timed). Off (`keep=False`): built every round."""

    def __init__(self, device: torch.device, keep: bool, share: float = 0.5) -> None:
        self.device, self.keep, self.share = device, keep, share
        self.built: collections.OrderedDict[str, tuple[Callable[[], object], list[object]]] = collections.OrderedDict()

    def factory(self, key: str, build: StepFactory, mode: Callable[[torch.nn.Module], object]) -> StepFactory:
        """`build`, or the step it built before; `mode(model)` puts a kept step's model back in the mode
        its step runs in (the items of one model share it, and each step sets the mode when built)."""
        def get(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor):
            if key in self.built:
                self.built.move_to_end(key)
                mode(model)
                return self.built[key]
            made = build(model, images, labels)
            if self.keep:
                self.built[key] = made
                while len(self.built) > 1 and self._crowded():
                    self.built.popitem(last=False)
            return made
        return get

    def _crowded(self) -> bool:
        if self.device.type != "cuda":
            return False
        total = torch.cuda.get_device_properties(self.device).total_memory
        return torch.cuda.memory_reserved(self.device) > self.share * total

    def forget(self, key: str) -> None:
        self.built.pop(key, None)


def _measure_item(item: _Item, model: torch.nn.Module, costs: dict[str, Any], device: torch.device,
                  first_round: bool, plan: CostPlan, graphs: bool, steps: Steps, key: str) -> dict[str, Any]:
    """One round of one item (`key`: its `item_key`)."""
    cfg, mcfg = item.cfg, dataclasses.replace(item.mcfg, measure_memory=first_round, measure_mfu=plan.measure_mfu)
    row: dict[str, Any] = {**costs}
    if item.mode == "train":
        factory = steps.factory(key, training_step(item.train, device, graphs), lambda m: train_mode(m, item.train))
    else:
        factory = steps.factory(key, default_step(mcfg, device), lambda m: m.eval())
    try:
        row.update(measure(model, (cfg.in_chans, cfg.img_size, cfg.img_size), cfg.num_classes, mcfg, device,
                           gflops=float(costs["gflops"]), step_factory=factory))
        row.update(status="ok", error="")
    except Exception as err:  # an out-of-memory point is a row, and the phase goes on
        steps.forget(key)
        row.update(status=classify_failure(err), error=f"{type(err).__name__}: {err}"[:500])
        if row["status"] == "error":
            traceback.print_exc()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def run_cost_phases(sweeps: list[tuple[str, list[Point], Path]], plan: CostPlan, device: torch.device,
                    progress: bool = True, graphs: bool = True) -> dict[str, pd.DataFrame]:
    """{sweep: the rows of its points} of one cost phase over the points of several sweeps (a command's):
    each distinct item (model, mode, training step) is measured once per round, so a model that several
    sweeps share is timed once, and every point of the command is compared within one sitting. Each
    sweep's csv gets the rows of its own points, under the phase's id, with `phase_items` its own count.
    Found complete in every csv: reused. Otherwise the rows of an unfinished attempt are removed and the
    phase is measured again whole. `graphs`: as the runs will train (GRAPHS), so the training step timed
    is theirs."""
    own = {sweep: _items(points, plan, device) for sweep, points, _ in sweeps}
    distinct: dict[str, _Item] = {}                    # item_key -> the item, measured once per round
    where: dict[str, list[tuple[str, Path]]] = {}      # item_key -> the sweeps (and tables) that have it
    for sweep, _, csv in sweeps:
        for item in own[sweep]:
            key = item_key(item)
            distinct.setdefault(key, item)
            where.setdefault(key, []).append((sweep, csv))
    items = list(distinct.values())
    pid = phase_id([sweep for sweep, _, _ in sweeps], items, plan, device, graphs)
    found = {sweep: complete_phase(csv, pid, plan.rounds * len(own[sweep])) for sweep, _, csv in sweeps}
    if all(phase is not None for phase in found.values()):
        return found  # type: ignore[return-value]
    for _, _, csv in sweeps:
        drop_rows(csv, "phase_id", {pid})  # an attempt cut short: its rounds are not of this sitting
    models, costs = {}, {}
    for item in items:
        key = model_key(item.cfg)
        if key not in models:
            torch.manual_seed(0)
            models[key] = VisionTransformer(item.cfg)
            costs[key] = complexity(models[key], (item.cfg.in_chans, item.cfg.img_size, item.cfg.img_size))
    env = environment(device)
    rows: dict[str, list[dict[str, Any]]] = {sweep: [] for sweep, _, _ in sweeps}
    names = ", ".join(sweep for sweep, _, _ in sweeps)
    steps = Steps(device, device.type == "cuda" if plan.keep_steps is None else plan.keep_steps)
    bar = tqdm(total=plan.rounds * len(items), desc=f"cost {names}", unit="step", leave=False, disable=not progress)
    for r, (item_id, item) in interleaved(list(distinct.items()), plan.rounds):
        key = model_key(item.cfg)
        row = {**env, **item.cfg.to_dict(), "tokens": item.cfg.tokens, "phase_id": pid,
               "round": r, "rounds": plan.rounds, "dtype": item.mcfg.dtype,
               "compile": int(item.mcfg.compile), "mode": item.mode, "batch_size": item.mcfg.batch_size,
               "run_id": run_id({"phase_id": pid, "model": key, "mode": item.mode, "round": r})}
        row.update(_measure_item(item, models[key], costs[key], device, r == 0, plan, graphs, steps, item_id))
        for sweep, csv in where[item_id]:
            mine = {**row, "sweep": sweep, "phase_items": len(own[sweep])}
            append_row(csv, mine, COST_COLUMNS)
            rows[sweep].append(mine)
        bar.update()
    bar.close()
    del models, steps
    gc.collect()
    return {sweep: pd.DataFrame(mine) for sweep, mine in rows.items()}
