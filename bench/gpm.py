"""What the GPU's SMs did over a region, from NVML's GPU Performance Monitoring (GPM: Hopper and newer GPUs):
the share of time its SMs had work (SM activity), the warps resident against the most they hold (SM occupancy)
and the share of time any tensor core was busy. NVML's busy % says only that some kernel was running; a GPU can
read 95 % busy with most of its SMs idle, so these say how much of it the work used.

`GpmWindow` takes a GPM sample at the region's start and one at its end and asks NVML for the metrics between
them. Where the device (or the driver, or the package) has no GPM, or NVML refuses a metric, its figure is blank
(None), never a 0.
"""

from __future__ import annotations

from typing import Any

GPM_FIGURES = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct")
_METRICS = {"sm_active_pct": "NVML_GPM_METRIC_SM_UTIL", "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
            "tensor_active_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL"}


class GpmWindow:
    """GPM metrics of one GPU between `start()` and `finish()`; blank where it has none."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle, self._first = nvml, handle, None
        try:
            self.supported = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except Exception:   # no GPM in this driver, package or device (before Hopper, a MIG instance)
            self.supported = False

    def _sample(self) -> Any:
        sample = self._nvml.nvmlGpmSampleAlloc()
        try:
            self._nvml.nvmlGpmSampleGet(self._handle, sample)
        except Exception:
            self._nvml.nvmlGpmSampleFree(sample)
            raise
        return sample

    def start(self) -> None:
        self._drop()
        if self.supported:
            try:
                self._first = self._sample()
            except Exception:
                self.supported = False

    def finish(self) -> dict[str, float | None]:
        """Each of GPM_FIGURES over the window, in %, or None where it was not measured."""
        out: dict[str, float | None] = dict.fromkeys(GPM_FIGURES)
        if self._first is None:
            return out
        try:
            last = self._sample()
        except Exception:
            self._drop()
            return out
        try:
            nvml = self._nvml
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_FIGURES)
            request.sample1, request.sample2 = self._first, last
            for i, name in enumerate(GPM_FIGURES):
                request.metrics[i].metricId = getattr(nvml, _METRICS[name])
            answer = nvml.nvmlGpmMetricsGet(request)
            for i, name in enumerate(GPM_FIGURES):
                metric = answer.metrics[i]
                if metric.nvmlReturn == nvml.NVML_SUCCESS:
                    out[name] = float(metric.value)
        except Exception:   # NVML refused the request: every figure stays blank
            pass
        finally:
            self._nvml.nvmlGpmSampleFree(last)
            self._drop()
        return out

    def _drop(self) -> None:
        if self._first is not None:
            self._nvml.nvmlGpmSampleFree(self._first)
            self._first = None
