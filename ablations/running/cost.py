"""A command's cost phase: every point's speed, memory and MFU measured side by side, before any training.

Speed is a property of a configuration, not of a seed or of trained weights, so each distinct model of
the command's sweeps is measured once per round, in interleaved rounds (`bench.rounds`), with nothing
else running: an inference step at `infer_batch_size` and the training step that training itself runs
(`bench.training.step.make_step`: the point's AdamW parameter groups, label smoothing and clipping; one CUDA
graph per step on CUDA unless GRAPHS=0) at the sweep's training batch size. A model that several sweeps
share (the base config of `make ablations`) is timed once. Each round of each point and mode is one row
of `<out>/ablations/<sweep>-cost.csv` of every sweep that has the point, appended as it is measured.
Peak memory is taken in the first round only: the allocator's peak of a fixed step is the same every time.
On CUDA each item's step is built once per phase and replayed in every round (`Steps`): one capture
per training item, not one per round.

**A budget.** The phase gets `budget_s` seconds (COST_BUDGET), by default BUDGET_SHARE of the training the
command will do (estimated from the first round's training steps, the runs' epochs and the training set),
between BUDGET_FLOOR_S and BUDGET_CAP_S (what the process pays once, the matmul peak of the MFU and the
first optimizer, is paid before its clock starts, so no round carries it); an auto budget that fits fewer
than MIN_ROUNDS rounds is raised to MIN_ROUNDS rounds where those take at most RAISED_SHARE_MAX of that
training (else there is no phase). The first round times the training steps first, so an auto budget is known
early, and stops as soon as the time it has taken shows that the budget cannot fit MIN_ROUNDS rounds. After
the first round it plans as many rounds as fit (at most `rounds`); a round taken entirely under load waits,
within the budget and at most QUIET_WAIT_S, for the machine to quiet down; a phase that would overrun stops
after the round in hand and its rows record the rounds it took. The budget is planned from the first round's
quiet steps only, so it does not grow with the load. On CUDA, where the host's CPU time says nothing of the
device, a phase whose first BUSY_ITEMS timed steps all ran under load is abandoned at once (nothing kept), and
one whose first round mostly did stops after it; where fewer than MIN_ROUNDS rounds of an item ran on a quiet
machine, its speed is reported as not measured, and one line says how to measure it later (`make cost`). On the
CPU every step's CPU time is recorded beside its wall time (`cpu_step_ms_median`), which other processes holding
the machine do not lengthen: a busy CPU keeps measuring, and the report compares such rounds by CPU time,
labelled so.

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
import math
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from ablations.choices import COST_ROUNDS, say_out
from ablations.results.schema import COST_COLUMNS
from ablations.results.store import complete_phase, is_ok, model_key
from ablations.specs import Point
from bench.env import environment, run_id
from bench.failures import classify_failure
from bench.flops import closed_form_size
from bench.io.csvio import append_rows, drop_rows
from bench.measure import MeasureConfig, StepFactory, default_step, measure
from bench.mfu import matmul_peak
from bench.rounds import MIN_ROUNDS
from bench.timing import TimingConfig
from bench.training.recipe import TrainConfig
from bench.training.step import adamw, train_mode, training_step
from bench.units import count, percent
from vit import VisionTransformer, ViTConfig

# Timing of one item in one round, by device. A CPU step of these models takes 5–50 ms: 0.25 s is 5–50
# steps. A graphed CUDA step of them takes about a millisecond, so 0.25 s would be hundreds of steps per
# item and round and tens of seconds of `make ablations`; 50 ms is tens of steps, timed in blocks of 8
# between CUDA events (`bench.timing`), and the median over rounds takes ≥ 100 of them.
CPU_TIMING = TimingConfig(warmup=3, min_repeats=5, min_time_s=0.25)
CUDA_TIMING = TimingConfig(warmup=3, min_repeats=20, min_time_s=0.05)
BUDGET_SHARE = 0.10      # of the command's expected training time, when no budget is given
BUDGET_FLOOR_S = 2.0     # at least this: a quick pass whose rounds are short still gets the rounds a comparison needs
BUDGET_CAP_S = 600.0     # at most this, so a long job's measurement stays a side matter
# an auto budget too short for the MIN_ROUNDS rounds a comparison needs is raised to them where they take at most
# this share of the expected training (a GPU's short main job: rounds of ~2 s against ~45 s of training)
RAISED_SHARE_MAX = 0.25
QUIET_WAIT_S = 30.0      # how long a phase whose round ran under load waits for a quiet machine, in all
BUSY_ITEMS = 3           # first timed steps that, all taken under load, abandon a phase at once
# the first round of a phase with a budget: a median of a few steps per item, quickly, to plan the rest
FIRST_ROUND_TIMING = TimingConfig(warmup=1, min_repeats=3, min_time_s=0.0)
# the set-up of a step kept across rounds: built (a CUDA graph captured), warmed up, its memory taken; not timed
SETUP_TIMING = TimingConfig(warmup=3, min_repeats=1, min_time_s=0.0, block=1, latency_steps=0)
# a round of warmed steps at its shortest (after a set-up): one block of launches back to back and a few
# synchronised steps for the latency; a budget with room to spare lengthens the later rounds (`min_time_s`)
WARM_ROUND_TIMING = TimingConfig(warmup=1, min_repeats=8, min_time_s=0.0, latency_steps=3)


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
    budget_s: float | None = None   # seconds the phase may take (None: BUDGET_SHARE of the expected training)
    alone: bool = False             # `cost`'s own phase (nothing trains after it)

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
        if self.budget_s is not None and (isinstance(self.budget_s, bool) or not isinstance(self.budget_s, (int, float))
                                          or not self.budget_s >= 0):
            raise ValueError(f"the cost budget must be a number of seconds ≥ 0, got {self.budget_s!r}")

    @classmethod
    def before_training(cls, rounds: int, budget_s: float | None) -> CostPlan:
        """A sweep's or `train`'s phase: no budget given is auto (`budget`); a budget of 0 skips the phase."""
        return cls(rounds=0 if budget_s == 0 else rounds, budget_s=budget_s)

    @classmethod
    def standalone(cls, rounds: int, budget_s: float | None) -> CostPlan:
        """`cost`'s phase, which trains nothing after it: no budget given is no limit; one that can measure
        nothing (0 rounds or 0 s) is refused."""
        if not rounds or budget_s == 0:
            raise ValueError("--cost-rounds and --cost-budget must be above 0 to measure anything")
        return cls(rounds=rounds, budget_s=float("inf") if budget_s is None else budget_s, alone=True)

    def budget(self, expected_training_s: float | None) -> float:
        """The phase's seconds: the given budget, else BUDGET_SHARE of the expected training time within
        [BUDGET_FLOOR_S, BUDGET_CAP_S] (the cap where that time is unknown)."""
        if self.budget_s is not None:
            return float(self.budget_s)
        if expected_training_s is None:
            return BUDGET_CAP_S
        return min(BUDGET_CAP_S, max(BUDGET_FLOOR_S, BUDGET_SHARE * expected_training_s))


@dataclass(frozen=True)
class _Item:
    cfg: ViTConfig
    mode: str
    mcfg: MeasureConfig
    train: TrainConfig


def _items(points: list[Point], plan: CostPlan, device: torch.device) -> list[_Item]:
    """One inference item per distinct model and one training item per distinct model and step (batch size,
    dtype, compile, what trains, and what the step does more or less of: gradient clipping or none, a
    smoothed loss or not, one optimizer group per layer (layer_decay) or not): settings that differ only in
    what a step does not depend on (the learning rate, the augmentation, a clipping threshold) share their
    items."""
    found: dict[tuple, _Item] = {}
    for p in points:
        dtype, compile_ = p.train.resolved_dtype(device), p.train.compile
        work = (bool(p.train.grad_clip), bool(p.train.label_smoothing), p.train.layer_decay != 1)
        for mode, batch in (("infer", plan.infer_batch_size), ("train", p.train.batch_size)):
            step = (batch, dtype, compile_, p.train.freeze, *work) if mode == "train" else (dtype, compile_)
            found.setdefault((model_key(p.model), mode, step), _Item(
                p.model, mode, MeasureConfig(mode=mode, batch_size=batch, dtype=dtype, compile=compile_,
                                             timing=plan.timing_on(device)), p.train))
    return list(found.values())


def item_key(item: _Item) -> str:
    """What makes two sweeps' items the same measurement: the model, the mode and the training step's config."""
    return run_id({"model": item.cfg.identity(), "mode": item.mode, "train": item.train.identity()})


def phase_id(sweeps: list[str], items: list[_Item], plan: CostPlan, device: torch.device, graphs: bool = True) -> str:
    env = environment(device)
    # the CPU's thread count times another step; phases timed before it was recorded keep their ids
    extra = {"threads": torch.get_num_threads()} if device.type == "cpu" else {}
    # so does cuDNN's attention kernel switched off on CUDA (`bench.env.set_cudnn_attention`); left on, ids stay
    if device.type == "cuda" and not torch.backends.cuda.cudnn_sdp_enabled():
        extra["cudnn_attention"] = "off"
    return run_id({"sweep": "+".join(sweeps), "items": [(i.cfg.identity(), dataclasses.asdict(i.mcfg)) for i in items],
                   "train": [i.train.identity() for i in items if i.mode == "train"], "graphs": graphs,
                   "rounds": plan.rounds, "device_name": env["device_name"], "torch": env["torch_version"], **extra})


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
                    self._free()
            return made
        return get

    def _free(self) -> None:
        """Hand the blocks of a step let go back to the device: without it `memory_reserved` stays where it
        was, and every later check would let go of all but the newest step."""
        if self.device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()

    def _crowded(self) -> bool:
        if self.device.type != "cuda":
            return False
        total = torch.cuda.get_device_properties(self.device).total_memory
        return torch.cuda.memory_reserved(self.device) > self.share * total

    def forget(self, key: str) -> None:
        self.built.pop(key, None)


def _measure_item(item: _Item, model: torch.nn.Module, costs: dict[str, Any], device: torch.device,
                  first_round: bool, plan: CostPlan, graphs: bool, steps: Steps, key: str,
                  timing: TimingConfig | None = None) -> dict[str, Any]:
    """One round of one item (`key`: its `item_key`); `timing` for this round (None: the item's)."""
    cfg, mcfg = item.cfg, dataclasses.replace(item.mcfg, measure_memory=first_round, measure_mfu=plan.measure_mfu,
                                              timing=timing or item.mcfg.timing)
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


# the phases this process gave up: abandoned on a busy machine (CUDA), or their first round too long for three rounds
# in the budget; a later look of the same command (SEEDS=auto) asks for the same phase and gets none at once, rather
# than its set-up and first round again and the same sentence again
GIVEN_UP: set[str] = set()


def run_cost_phases(sweeps: list[tuple[str, list[Point], Path]], plan: CostPlan, device: torch.device,
                    progress: bool = True, graphs: bool = True,
                    workload: tuple[int, int] | None = None, reuse: bool = True) -> dict[str, pd.DataFrame]:
    """{sweep: the rows of its points} of one cost phase over the points of several sweeps (a command's):
    each distinct item (model, mode, training step) is measured once per round, so a model that several
    sweeps share is timed once, and every point of the command is compared within one sitting. Each
    sweep's csv gets the rows of its own points, under the phase's id, with `phase_items` its own count.
    Found complete in every csv: reused. Otherwise the rows of an unfinished attempt are removed and the
    phase is measured again whole. `graphs`: as the runs will train (GRAPHS), so the training step timed
    is theirs. `workload`: (training images, seeds) of the runs to come, for the budget (`CostPlan.budget`).
    `reuse=False` measures again even where the same phase is complete."""
    own, distinct, where = _distinct_items(sweeps, plan, device)
    items = list(distinct.values())
    pid = phase_id([sweep for sweep, _, _ in sweeps], items, plan, device, graphs)
    found = {sweep: complete_phase(csv, pid, len(own[sweep])) for sweep, _, csv in sweeps}
    if reuse and all(phase is not None for phase in found.values()):
        return found  # type: ignore[return-value]
    if pid in GIVEN_UP:   # this command gave this very phase up (busy, or too long): no set-up, nothing said again
        return {sweep: pd.DataFrame(columns=COST_COLUMNS) for sweep, _, _ in sweeps}
    for _, _, csv in sweeps:
        drop_rows(csv, "phase_id", {pid})  # an attempt cut short: its rounds are not of this sitting
    names = ", ".join(sweep for sweep, _, _ in sweeps)
    once_s = _once_per_process(items, plan, device, names, progress)   # before the clock: no budget pays for it
    clock = _Clock(plan, workload, [p for _, points, _ in sweeps for p in points], device)   # building counts too
    models, costs = _models(items)
    sitting = _Sitting(pid, plan, device, graphs, environment(device), models, costs,
                       Steps(device, device.type == "cuda" if plan.keep_steps is None else plan.keep_steps),
                       own, where, {sweep: [] for sweep, _, _ in sweeps})
    # training steps first: once they are timed the runs' expected training, and so an auto budget, is known, and a
    # first round that already cannot fit the rounds a comparison needs stops there
    order = sorted(distinct.items(), key=lambda kv: kv[1].mode != "train")
    setup_s = 0.0
    if sitting.steps.keep:   # every step built once: built, captured and warmed up before the clock starts
        for item_id, item in tqdm(order, desc=f"cost {names}: set-up", unit="step", leave=False, disable=not progress):
            sitting.set_up(item_id, item)
        setup_s = once_s + clock.elapsed()   # the models and their steps built
        clock = _Clock(plan, workload, clock.points, device, set_up=True)
    bar = tqdm(total=plan.rounds * len(items), desc=f"cost {names} ({clock.describe()})", unit="step", leave=False,
               disable=not progress)
    kept = _rounds(sitting, clock, order, len(items), sweeps, names, bar)
    if clock.abandoned or clock.too_short:
        GIVEN_UP.add(pid)
    bar.close()
    if progress:
        taken = (f"no round of {len(items)} timed steps kept" if clock.abandoned or not kept
                 else f"{count(kept[-1]['round'] + 1, 'round')} of {len(items)} timed steps")
        setup = f" after {setup_s:.1f} s of set-up (build, capture, warm-up; outside the budget)" if setup_s else ""
        # "no time limit" beside a phase stopped early would read as a contradiction: the stop says why on its line
        limit = "" if clock.stopped and clock.budget_s is not None and math.isinf(clock.budget_s) \
            else f" ({clock.describe()})"
        tqdm.write(f"cost {names}: {taken} in {clock.elapsed():.1f} s{limit}{setup}",
                   file=sys.stderr)
    _say_what_is_missing(kept, len(items), names, clock, sweeps[0][2].parent.parent)
    rows = sitting.rows
    del models, sitting
    gc.collect()
    return {sweep: pd.DataFrame(mine, columns=None if mine else COST_COLUMNS) for sweep, mine in rows.items()}


def _rounds(sitting: _Sitting, clock: _Clock, order: list, items: int, sweeps: list[tuple[str, list[Point], Path]],
            names: str, bar) -> list[dict[str, Any]]:
    """The phase's interleaved rounds, each starting one item later, planned from the first (warmed) round: at
    least MIN_ROUNDS of them or none (a phase busy from its first steps keeps nothing; one too slow for three
    rounds is no phase); the rows kept, in the order they were timed."""
    plan, pid = sitting.plan, sitting.pid
    planned, kept = plan.rounds, []
    for r in range(plan.rounds):
        this_round = sitting.time_round(r, order[r % len(order):] + order[:r % len(order)], planned, clock, bar)
        kept += [row for _, _, row in this_round]
        if clock.abandoned:   # busy from its first timed steps: nothing of this sitting is kept
            sitting.rows = {sweep: [] for sweep in sitting.rows}
            break
        if clock.too_short:   # its first round stopped where it showed it could not fit the rounds needed
            kept, sitting.rows = [], {sweep: [] for sweep in sitting.rows}
            break
        if r == 0 and clock.busy(this_round):
            sitting.keep(this_round, planned, write=False)
            _close_early(sweeps, sitting.rows, pid, 1, clock)
            break
        if r == 0:
            planned = clock.plan_rounds(this_round, items)
            if planned < min(MIN_ROUNDS, plan.rounds):   # rounds too few to compare anything: no phase at all
                kept, sitting.rows = [], {sweep: [] for sweep in sitting.rows}
                break
            bar.total = planned * items
            bar.set_description(f"cost {names} ({clock.describe()})")
        sitting.keep(this_round, planned, write=True)
        if r + 1 >= planned:
            break
        if sitting.device.type == "cuda" and all(row.get("contended") for _, _, row in this_round):
            clock.wait_for_quiet(sitting.device)   # the CPU compares loaded rounds by CPU time: nothing to wait for
        if r + 1 >= MIN_ROUNDS and clock.overruns(r + 1):   # never fewer rounds than a comparison needs
            _close_early(sweeps, sitting.rows, pid, r + 1, clock)
            break
    return kept


def _once_per_process(items: list[_Item], plan: CostPlan, device: torch.device, names: str, progress: bool) -> float:
    """Seconds spent on what a process pays once, whatever it measures, so that no round (and no budget planned
    from the first round) carries it: the matmul peak the MFU is taken against, for each dtype timed (`matmul_peak`
    keeps it for the process), and the first optimizer, whose construction loads torch's compiler modules."""
    start = time.perf_counter()
    dtypes = sorted({item.mcfg.dtype for item in items}) if plan.measure_mfu else []
    work = [lambda d=d: matmul_peak(device, d) for d in dtypes]
    if any(item.mode == "train" for item in items):
        work.append(lambda: adamw([{"params": [torch.nn.Parameter(torch.zeros(1))]}], lr=0.0))
    for do in tqdm(work, desc=f"cost {names}: one-off set-up", unit="step", leave=False, disable=not progress):
        try:
            do()
        except Exception:  # what fails here fails again in the item that needs it, and is recorded there
            pass
    return time.perf_counter() - start


def _distinct_items(sweeps: list[tuple[str, list[Point], Path]], plan: CostPlan, device: torch.device
                    ) -> tuple[dict[str, list[_Item]], dict[str, _Item], dict[str, list[tuple[str, Path]]]]:
    """(each sweep's items, each distinct item by its key, the sweeps and tables that have each)."""
    own = {sweep: _items(points, plan, device) for sweep, points, _ in sweeps}
    distinct: dict[str, _Item] = {}                    # item_key -> the item, measured once per round
    where: dict[str, list[tuple[str, Path]]] = {}      # item_key -> the sweeps (and tables) that have it
    for sweep, _, csv in sweeps:
        for item in own[sweep]:
            key = item_key(item)
            distinct.setdefault(key, item)
            where.setdefault(key, []).append((sweep, csv))
    return own, distinct, where


def _models(items: list[_Item]) -> tuple[dict[str, VisionTransformer], dict[str, dict[str, float]]]:
    """One model per distinct config (seeded alike) and its size: params, GMACs, GFLOPs in closed form."""
    models, costs = {}, {}
    for item in items:
        key = model_key(item.cfg)
        if key not in models:
            torch.manual_seed(0)
            models[key] = VisionTransformer(item.cfg)
            costs[key] = closed_form_size(models[key], item.cfg)
    return models, costs


@dataclass
class _Sitting:
    """One cost phase's state: what it times with, and the rows each sweep gets."""
    pid: str
    plan: CostPlan
    device: torch.device
    graphs: bool
    env: dict[str, Any]
    models: dict[str, VisionTransformer]
    costs: dict[str, dict[str, float]]
    steps: Steps
    own: dict[str, list[_Item]]
    where: dict[str, list[tuple[str, Path]]]
    rows: dict[str, list[dict[str, Any]]]
    peaks: dict[str, float | None] = dataclasses.field(default_factory=dict)  # item -> peak MiB taken at set-up

    def time_round(self, r: int, order: list[tuple[str, _Item]], planned: int, clock: _Clock,
                   bar) -> list[tuple[str, _Item, dict[str, Any]]]:
        """Round r: every item timed once, in `order`; the first round stops after BUSY_ITEMS when all of
        them ran under load (`clock.busy(early=True)`)."""
        this_round = []
        for item_id, item in order:
            key = model_key(item.cfg)
            row = {**self.env, **item.cfg.to_dict(), "tokens": item.cfg.tokens, "phase_id": self.pid,
                   "round": r, "rounds": planned, "dtype": item.mcfg.dtype,
                   "compile": int(item.mcfg.compile), "mode": item.mode, "batch_size": item.mcfg.batch_size,
                   "torch_threads": torch.get_num_threads(),
                   "run_id": run_id({"phase_id": self.pid, "model": key, "mode": item.mode, "round": r})}
            set_up = item_id in self.peaks
            row.update(_measure_item(item, self.models[key], self.costs[key], self.device, r == 0 and not set_up,
                                     self.plan, self.graphs, self.steps, item_id, clock.timing(r)))
            if r == 0 and set_up:   # taken at the set-up, on the step's first call
                row["peak_mem_mb"] = self.peaks[item_id]
            this_round.append((item_id, item, row))
            bar.update()
            if r == 0 and len(this_round) == BUSY_ITEMS < len(order) and clock.busy(this_round, early=True):
                break
            if r == 0 and len(this_round) < len(order) and clock.cannot_fit(
                    this_round, len(order), training_left=any(i.mode == "train" for _, i in order[len(this_round):])):
                break
        return this_round

    def set_up(self, item_id: str, item: _Item) -> None:
        """Build the item's step (on CUDA: capture its graph) and warm it up, taking its peak memory, before any
        round: what a step costs once is not part of what the rounds time."""
        key = model_key(item.cfg)
        row = _measure_item(item, self.models[key], self.costs[key], self.device, True, self.plan, self.graphs,
                            self.steps, item_id, SETUP_TIMING)
        if is_ok(row):
            self.peaks[item_id] = row.get("peak_mem_mb")

    def keep(self, this_round: list[tuple[str, _Item, dict[str, Any]]], planned: int, write: bool) -> None:
        """The round's rows, each to every sweep that has its item (appended to its table where `write`: one
        append, and one flush to disk, per table and round)."""
        tables: dict[Path, list[dict[str, Any]]] = {}
        for item_id, _, row in this_round:
            if write:
                row["rounds"] = planned
            for sweep, csv in self.where[item_id]:
                mine = {**row, "sweep": sweep, "phase_items": len(self.own[sweep])}
                tables.setdefault(csv, []).append(mine)
                self.rows[sweep].append(mine)
        if write:
            for csv, mine in tables.items():
                append_rows(csv, mine, COST_COLUMNS)


class _Clock:
    """The phase's time budget: what it is, how many rounds it plans after the first, whether the next
    round would overrun it, and the bounded wait for a quiet machine. `now`: the clock it reads (seconds)."""

    now = staticmethod(time.perf_counter)

    def __init__(self, plan: CostPlan, workload: tuple[int, int] | None, points: list[Point],
                 device: torch.device, set_up: bool = False) -> None:
        self.plan, self.workload, self.points, self.device = plan, workload, points, device
        self.set_up = set_up   # every step built and warmed up before the clock started
        self.start = self.now()
        self.budget_s: float | None = plan.budget_s
        self.waited = 0.0
        self.stopped = ""
        self.abandoned = False   # stopped within its first round: no rows kept
        self.too_short = False   # its budget fits fewer rounds than a comparison needs: no phase
        self.later: TimingConfig | None = None

    def elapsed(self) -> float:
        return self.now() - self.start

    def describe(self) -> str:
        if self.budget_s is None:
            return "budget auto"
        return "no time limit" if math.isinf(self.budget_s) else f"budget {self.budget_s:.3g} s"

    def expected_training_s(self, first_round: list[tuple[str, _Item, dict[str, Any]]]) -> float | None:
        """The command's training time from the first round's training-step times: every point's runs,
        epochs × steps per epoch × its step."""
        if self.workload is None:
            return None
        images, seeds = self.workload
        # quiet steps, or under load their CPU time: a step slowed by other work would stretch the budget with the load
        step_s = {(model_key(item.cfg), item.mcfg.batch_size):
                  float((row.get("cpu_step_ms_median") if row.get("contended") else row.get("step_ms_median")) or 0) / 1e3
                  for _, item, row in first_round
                  if item.mode == "train" and is_ok(row) and (not row.get("contended") or row.get("cpu_step_ms_median"))}
        total = 0.0
        for p in self.points:
            per_epoch = math.ceil(images * (1 - p.train.holdout) / p.train.batch_size)
            total += seeds * p.train.epochs * per_epoch * step_s.get((model_key(p.model), p.train.batch_size), 0.0)
        return total

    def timing(self, r: int) -> TimingConfig | None:
        """Round r's timing per item: the first round short (it finds what the budget allows: a median of
        a few steps), later rounds as long as the budget lets their steps be, up to the device's default;
        a plan with its own timing keeps it."""
        if self.plan.timing is not None:
            return None
        if r == 0:   # after a set-up, a round as the later ones at their shortest, so that it plans them right
            return WARM_ROUND_TIMING if self.set_up else FIRST_ROUND_TIMING
        return self.later

    def plan_rounds(self, first_round: list[tuple[str, _Item, dict[str, Any]]], items: int) -> int:
        """The rounds that fit in the budget (at least the one taken, at most the plan's), and the time per
        item that spreads the rest of the budget over them."""
        expected = self.expected_training_s(first_round)
        self.budget_s = self.plan.budget(expected)
        default = self.plan.timing_on(self.device)
        if math.isinf(self.budget_s):
            self.later = default
            return self.plan.rounds
        first = max(self.elapsed(), 1e-3)
        fit = max(1, min(self.plan.rounds, 1 + int(max(0.0, self.budget_s - first) // first)))
        share = "" if self.plan.budget_s is not None else f", {percent(BUDGET_SHARE)} of the runs' expected training"
        needed = MIN_ROUNDS * first
        if fit < MIN_ROUNDS and self._raisable(expected, first):
            share = (f", raised from {self.budget_s:.3g} s ({percent(BUDGET_SHARE)} of the runs' expected training) to "
                     f"the {MIN_ROUNDS} rounds a comparison needs, {percent(needed / expected)} of it")
            self.budget_s, fit = needed, MIN_ROUNDS
        if fit < self.plan.rounds:
            self.stopped = f"its {self.budget_s:.3g} s budget (COST_BUDGET{share}) fits {fit} of {self.plan.rounds} rounds"
            if fit < MIN_ROUNDS:   # fewer rounds than any comparison needs: none kept
                self.too_short = True
                self.stopped = (f"no cost phase: its first round took {first:.1f} s, so its {self.budget_s:.3g} s "
                                f"budget (COST_BUDGET{share}) fits {fit} of the {MIN_ROUNDS} rounds a speed comparison "
                                f"needs")
        if fit > 1:
            spare = self.budget_s - first * fit      # beyond rounds as short as the first
            # after a set-up, rounds as the first (warmed) one, longer as far as the spare budget allows
            base = WARM_ROUND_TIMING if self.set_up else default
            self.later = dataclasses.replace(base, min_time_s=min(default.min_time_s,
                                                                  max(0.0, spare / ((fit - 1) * items))))
        return fit

    def _raisable(self, expected: float | None, first: float) -> bool:
        """Whether an auto budget is raised to the MIN_ROUNDS rounds a comparison needs, for a first round of `first`
        seconds: where those rounds take at most RAISED_SHARE_MAX of the `expected` training."""
        return self.plan.budget_s is None and MIN_ROUNDS <= self.plan.rounds and bool(expected) \
            and MIN_ROUNDS * first <= RAISED_SHARE_MAX * expected

    def cannot_fit(self, so_far: list[tuple[str, _Item, dict[str, Any]]], items: int, training_left: bool) -> bool:
        """Whether the first round, still under way after `so_far`, already shows that its budget fits fewer rounds
        than a comparison needs, whatever its remaining steps take: the round takes at least the time passed, and
        an auto budget is known once every training step is timed (`training_left`: not yet). Marks the phase too short."""
        need, elapsed = min(MIN_ROUNDS, self.plan.rounds), self.elapsed()
        if need <= 1:   # one round asked for: the first is kept whatever it takes (`plan_rounds` fits at least one)
            return False
        if self.plan.budget_s is not None:
            budget, share = float(self.plan.budget_s), ""
        elif self.workload is not None and training_left:
            return False   # the expected training, and so the budget, is not known yet
        else:
            expected = self.expected_training_s(so_far)
            budget, share = self.plan.budget(expected), f", {percent(BUDGET_SHARE)} of the runs' expected training"
            if self._raisable(expected, elapsed):   # it may yet be raised to the rounds a comparison needs
                return False
        if need * elapsed <= budget:
            return False
        self.budget_s, self.too_short = budget, True
        self.stopped = (f"no cost phase: its first round passed {elapsed:.1f} s after {len(so_far)} of its {items} timed "
                        f"steps, so its {budget:.3g} s budget (COST_BUDGET{share}) fits fewer than the {need} rounds a "
                        f"speed comparison needs")
        return True

    def busy(self, first_round: list[tuple[str, _Item, dict[str, Any]]], early: bool = False) -> bool:
        """On CUDA, whether the first round's timed steps ran while other processes held the machine: `early`, its
        first BUSY_ITEMS all did (the phase is abandoned at once, nothing of it kept); else most of the round did
        (the phase stops after it). Either way the training goes on, and one line says how to measure later. On
        the CPU never: its rounds are compared by CPU time under load."""
        loaded = [row for _, _, row in first_round if row.get("contended")]
        if self.device.type != "cuda":   # the CPU: its rounds are compared by CPU time, which the load leaves alone
            return False
        if not first_round or (len(loaded) < len(first_round) if early else 2 * len(loaded) <= len(first_round)):
            return False
        shares = sorted(float(row.get("other_cpu_pct") or 0) for row in loaded)
        self.abandoned = early
        self.stopped = (f"the machine was busy: {len(loaded)} of {len(first_round)} first timed steps ran while other "
                        f"processes held a median {shares[len(shares) // 2]:.0f} % of it, so the phase "
                        + ("stopped there and keeps nothing" if early else "stopped after its first round"))
        return True

    def overruns(self, done: int) -> bool:
        """Whether one more round (at this phase's mean round time) would take it past its budget."""
        assert self.budget_s is not None
        if self.elapsed() + self.elapsed() / done > self.budget_s:
            self.stopped = f"stopped after {count(done, 'round')} to stay within its {self.budget_s:.3g} s budget"
            return True
        return False

    def wait_for_quiet(self, device: torch.device) -> None:
        """Sleep in one-second windows while other processes hold the machine, within QUIET_WAIT_S in all and
        within the budget."""
        from bench.contention import LoadMeter

        assert self.budget_s is not None
        while self.waited < QUIET_WAIT_S and self.elapsed() + 1 < self.budget_s:
            with LoadMeter(device) as meter:
                time.sleep(1.0)
            self.waited += 1.0
            if meter.load is None or not meter.load.contended:
                return


def _close_early(sweeps: list[tuple[str, list[Point], Path]], rows: dict[str, list[dict[str, Any]]], pid: str,
                 done: int, clock: _Clock) -> None:
    """A phase stopped within its budget: its rows rewritten to record the rounds it took, so it is
    complete as it stands (a kill meanwhile leaves an incomplete phase, measured again next time)."""
    for sweep, _, csv in sweeps:
        drop_rows(csv, "phase_id", {pid})
        for row in rows[sweep]:
            row["rounds"] = done
        append_rows(csv, rows[sweep], COST_COLUMNS)


def _say_what_is_missing(kept: list[dict[str, Any]], items: int, names: str, clock: _Clock, out: Path) -> None:
    """One line where a budget stop or other processes left items with fewer than MIN_ROUNDS quiet rounds."""
    per_item: dict[tuple, int] = collections.Counter()
    for row in kept:   # a round counts where quiet, or where its CPU time stands in for a loaded wall time
        if is_ok(row) and (not row.get("contended") or row.get("cpu_step_ms_median") is not None):
            per_item[_row_item(row)] += 1
    short = items - sum(1 for n in per_item.values() if n >= MIN_ROUNDS)
    if short <= 0:
        return
    loaded = sum(1 for row in kept if row.get("contended"))
    why = "; ".join(filter(None, [clock.stopped, f"{loaded} of {len(kept)} timed steps ran while other processes held "
                                                 f"the machine and are left out" if loaded else ""]))
    why = why or f"the phase was asked for {count(clock.plan.rounds, 'round')} (COST_ROUNDS / --cost-rounds)"
    command = say_out("cost", out)
    if clock.plan.alone:   # this is that command: run it again, not "run it"
        later = ("run this again on an idle machine" if loaded else
                 f"run this again with {MIN_ROUNDS} or more rounds (COST_ROUNDS / --cost-rounds) or a larger budget")
    else:
        later = (f"measure later on an idle machine: {command}" if loaded else
                 f"measure with more rounds or a larger budget: {command} ({MIN_ROUNDS} or more rounds, no time limit "
                 f"unless COST_BUDGET / --cost-budget)")
    none = not per_item and clock.too_short
    counted = ("the report states no speed ratio" if none else
               f"for {short} of {count(items, 'timed step')}, which rest on fewer than {MIN_ROUNDS} quiet rounds, the report "
               f"states no speed ratio")
    skip = " COST_BUDGET=0 skips this phase without measuring." if none and not clock.plan.alone else ""
    tqdm.write(f"cost {names}: {why}; {counted}. To compare speed, {later}.{skip}", file=sys.stderr)


def _row_item(row: dict[str, Any]) -> tuple:
    return (model_key(ViTConfig.from_row(row)), row.get("mode"), row.get("batch_size"))
