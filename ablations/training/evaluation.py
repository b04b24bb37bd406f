"""A run's evaluation of a fixed image set: its loss, its accuracy and every image's predicted class.

`evaluate` runs the model eagerly, batch by batch, and reads the result once: what a run does at the end of
every epoch. `GraphedEvaluation` is the same work captured once into a CUDA graph and replayed, so an
evaluation is one launch instead of one Python call per kernel (runs side by side in one process share one
interpreter, so those calls queue behind each other while the GPU waits). The graph replays the kernels of the
eager loop in its order and reads the weights in place, so its loss and predictions are the eager ones, bit for
bit (tested on CUDA). `evaluator` gives a run the one it asks for (`RunOptions.evaluation`: the sweeps
evaluate eagerly); `benchmarks/epoch_overheads.py` and `benchmarks/concurrent_runs.py --evaluation eager,graphed`
time the two side by side.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablations.training.data import Dataset
from bench.training.precision import autocast
from bench.training.step import CAPTURE_LOCK, capture_stream, capturing, say_capture_failed


def eval_outputs(model: nn.Module, data: Dataset, device: torch.device, dtype: str, batch_size: int,
                 images: Tensor, labels: Tensor, cache: bool = True) -> tuple[Tensor, Tensor]:
    """The summed loss and the predicted classes of `images` (already on `device`), on the device: no host
    read. `cache`: autocast's cast cache (off where the work is captured into a CUDA graph)."""
    total_loss, preds = torch.zeros((), device=device), []
    for i in range(0, len(labels), batch_size):
        x, y = data.normalize(images[i:i + batch_size]), labels[i:i + batch_size]
        with autocast(device, dtype, cache_enabled=cache):
            logits = model(x)
        total_loss += F.cross_entropy(logits.float(), y, reduction="sum")
        preds.append(logits.argmax(-1))
    return total_loss, torch.cat(preds)


@torch.no_grad()
def evaluate(model: nn.Module, data: Dataset, device: torch.device, dtype: str, batch_size: int,
             on_device: tuple[Tensor, Tensor] | None = None) -> tuple[float, float, Tensor]:
    """Loss, accuracy, and the predicted class of every image (on the CPU), of the test set or of
    `on_device`: images and labels already on `device` (training copies them once, not once per epoch: a
    blocking copy waits for the device)."""
    model.eval()
    images, labels = on_device or (data.test_x.to(device), data.test_y.to(device))
    return read_back(*eval_outputs(model, data, device, dtype, batch_size, images, labels), labels.cpu())


def read_back(total_loss: Tensor, pred: Tensor, labels: Tensor) -> tuple[float, float, Tensor]:
    """(mean loss, accuracy, predictions on the CPU) from an evaluation's device outputs and the labels on the CPU:
    one transfer, and one read of the loss, per evaluation."""
    pred = pred.cpu()
    n = len(labels)
    return total_loss.item() / n, (pred == labels).sum().item() / n, pred


class GraphedEvaluation:
    """`evaluate` of one image set already on a CUDA device, for every epoch of a run: captured into a CUDA
    graph at the first call (after one eager pass outside the capture, which sets up what a capture cannot:
    the normalisation constants, the libraries' handles) and replayed at every call, on the caller's stream.
    Where the capture fails, one line says why and this run evaluates eagerly from then on."""

    def __init__(self, model: nn.Module, data: Dataset, device: torch.device, dtype: str, batch_size: int,
                 on_device: tuple[Tensor, Tensor]) -> None:
        self.model, self.data, self.device, self.dtype, self.batch_size = model, data, device, dtype, batch_size
        self.images, self.labels = on_device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: tuple[Tensor, Tensor] | None = None   # the graph's loss and predictions, rewritten by a replay
        self.eager = False
        self._labels_cpu: Tensor | None = None

    @torch.no_grad()
    def __call__(self) -> tuple[float, float, Tensor]:
        if self.graph is None and not self.eager:
            try:
                self._capture()
            except Exception as err:
                say_capture_failed("the evaluation", err, "eager evaluation")
                self.eager = True
        if self.eager:
            return evaluate(self.model, self.data, self.device, self.dtype, self.batch_size, (self.images, self.labels))
        self.model.eval()
        self.graph.replay()
        if self._labels_cpu is None:
            self._labels_cpu = self.labels.cpu()
        return read_back(*self.outputs, self._labels_cpu)

    def _capture(self) -> None:
        self.model.eval()
        run = (self.model, self.data, self.device, self.dtype, self.batch_size, self.images, self.labels)
        with CAPTURE_LOCK:
            stream = capture_stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                eval_outputs(*run, cache=False)
            graph = torch.cuda.CUDAGraph()
            with capturing(graph, stream, self.device, tidy=False):
                outputs = eval_outputs(*run, cache=False)
        self.graph, self.outputs = graph, outputs


EVALUATIONS = ("eager", "graphed")   # how a run evaluates at the end of each epoch (`evaluator`)


def check_evaluation(how: str) -> None:
    """ValueError, in one line naming the choices, for an evaluation that is not one of EVALUATIONS."""
    if how not in EVALUATIONS:
        raise ValueError(f"evaluation={how!r} is unknown; choose one of {list(EVALUATIONS)}")


def evaluator(model: nn.Module, data: Dataset, device: torch.device, dtype: str, batch_size: int,
              on_device: tuple[Tensor, Tensor], how: str = "eager") -> Callable[[], tuple[float, float, Tensor]]:
    """A run's evaluation of one image set on `device`, called at the end of each epoch: `how` = "graphed" a
    `GraphedEvaluation` on CUDA (elsewhere there is no graph to capture: eager), "eager" `evaluate`."""
    check_evaluation(how)
    if how == "graphed" and device.type == "cuda":
        return GraphedEvaluation(model, data, device, dtype, batch_size, on_device)
    return lambda: evaluate(model, data, device, dtype, batch_size, on_device)
