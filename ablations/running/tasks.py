"""What a run is: the options of a sweep, one task (point × seed) and its outcome; picklable, so an
executor can run a task anywhere and send its outcome back to the driver."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from ablations.options import declared, refusal
from ablations.results.identity import experiment_id, task_key
from ablations.running.cost import CostPlan
from ablations.specs import Point
from bench.env import environment, resolve_device, run_id
from bench.mfu import Peak


@dataclass(frozen=True)
class RunOptions:
    """The options of a command's runs. A field named like a command-line option (`ablations.options.RUN`)
    takes its default and its choices from that declaration (`declared`), the one place they are written; the
    others are derived by the command (its seeds, cost plan, starting weights, data id, packing width)."""
    dataset: str = declared("dataset")
    data_root: str = declared("data_root")
    download: bool = declared("download")
    seeds: tuple[int, ...] = (0, 1, 2)
    device: str = declared("device")
    out: str = declared("out")
    cost: CostPlan = field(default_factory=CostPlan)
    progress: bool = True
    init: str = ""     # a timm checkpoint file to start every run from
    init_id: str = ""  # its name and sha256 prefix (vit.checkpoint_id), part of each run's identity
    checkpoint_every: int | None = declared("checkpoint_every")  # None: auto (checkpoints.Checkpointing)
    graphs: bool = True  # on CUDA, the step as CUDA graphs (bench.training.step.StaticStep); not part of a run id
    tensorboard: bool = declared("tensorboard")
    img_size: int | None = declared("img_size")  # None: the dataset's own side
    data_id: str = ""  # what identifies the data beyond its name (an image folder's files, a resize); in run ids
    point_seeds: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (point label, its seeds): these instead of `seeds`
    evaluation: str = declared("evaluation")            # not part of a run id (the same figures either way)
    run_order: str = declared("run_order")              # not part of a run id
    cudnn_attention: str = declared("cudnn_attention")  # not part of a run id (the last bits may differ)
    pack: int = 0   # at most this many seeds of a point trained as one stacked model (`training.packed`); 0: none

    def __post_init__(self) -> None:
        for name, value in ((f.name, getattr(self, f.name)) for f in fields(self)):
            refused = refusal(name, value)
            if refused:
                raise ValueError(refused)


@dataclass(frozen=True)
class Task:
    """Everything a worker needs to train one run; picklable."""
    point: Point
    seed: int
    run_id: str
    options: RunOptions
    cost: dict[str, Any] = field(default_factory=dict)  # the config's speed columns from the cost phase
    peak: Peak | None = None  # the device's matmul peak, measured by the driver on an idle device
    members: tuple[Task, ...] = ()  # a pack: the runs of this point trained as one stacked model (point, seed: theirs)

    @property
    def runs(self) -> tuple[Task, ...]:
        """The runs this task trains: its pack's members, or itself."""
        return self.members or (self,)

    @property
    def experiment_id(self) -> str:
        return experiment_id(self.point, self.options.dataset, self.options.init_id, self.options.data_id,
                             resolve_device(self.options.device))


@dataclass
class RunResult:
    """What one run left: its row, epoch rows, weights and test predictions; a pack's, its members' outcomes."""
    row: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    weights: bytes | None = None  # torch.save of the state dict
    preds: bytes | None = None    # np.savez of the final model's test predictions and the labels
    members: list[RunResult] = field(default_factory=list)   # a pack's: one per member, in its order


def make_tasks(points: Iterable[Point], options: RunOptions) -> list[Task]:
    """One task per point and seed: `options.seeds`, or where `options.point_seeds` is given, each point's own
    seeds there (none for a point it leaves out: an adaptive look trains only the settings still open)."""
    own = dict(options.point_seeds)
    device = resolve_device(options.device)
    return [Task(p, s, run_id(task_key(p, options.dataset, s, options.init_id, options.data_id, device)), options)
            for p in points for s in (own.get(p.label, ()) if own else options.seeds)]


def identity_columns(task: Task, device: torch.device) -> dict[str, Any]:
    """The columns that say which run a row is and of which experiment, as it trains on `device` (DTYPE auto
    resolved there); nothing here touches the device."""
    point, options = task.point, task.options
    return {"device": device.type, **point.model.to_dict(), "tokens": point.model.tokens,
            "run_id": task.run_id, "sweep": point.sweep, "dataset": options.dataset, "seed": task.seed,
            **point.train.to_dict(), "dtype": point.train.resolved_dtype(device),
            "init": options.init_id, "experiment_id": task.experiment_id,
            "data_id": options.data_id}


def base_row(task: Task, device: torch.device) -> dict[str, Any]:
    """The columns a run has before it trains: environment, config and identity."""
    return {**environment(device), **identity_columns(task, device)}


def pack_tasks(tasks: list[Task]) -> list[Task]:
    """The runs as they train: where their options pack (`RunOptions.pack`), the runs of one point grouped into
    packs of at most that many, as even as can be (7 at 3: 3, 2, 2), each where its first run stood."""
    groups: dict[tuple, list[Task]] = {}
    for task in tasks:
        groups.setdefault((task.point.sweep, task.point.label) if task.options.pack else (task.run_id,), []).append(task)
    out: list[Task] = []
    for key, runs in groups.items():
        if len(key) == 1:
            out.extend(runs)
            continue
        count = -(-len(runs) // runs[0].options.pack)
        sizes = [len(runs) // count + (i < len(runs) % count) for i in range(count)]
        starts = [sum(sizes[:i]) for i in range(count)]
        out.extend(dataclasses.replace(runs[0], seed=runs[a].seed, run_id=f"pack:{runs[a].run_id}",
                                       members=tuple(runs[a:a + n])) for a, n in zip(starts, sizes))
    first = {t.run_id: i for i, t in enumerate(tasks)}
    return sorted(out, key=lambda t: first[t.runs[0].run_id])


def lost_outcome(task: Task, message: str) -> RunResult:
    """The `error` row for a run whose worker never reported back (killed, node lost), as of the device it
    was to train on; for a pack, one for each member."""
    if task.members:
        return RunResult({}, members=[lost_outcome(member, message) for member in task.members])
    row = {**environment(torch.device("cpu")), **identity_columns(task, resolve_device(task.options.device))}
    row.update(host="", device_name="", status="error", error=message[:500])
    return RunResult(row)
