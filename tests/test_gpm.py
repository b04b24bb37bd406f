"""What the SMs did over a training phase (`bench.gpm`, NVML's GPM), beside NVML's busy % and the phase's MFU:
measured where the GPU offers it, blank (never 0) where it does not, every GPM sample freed. The fake is as
strict as the driver: it refuses a request of another version, a sample not taken or already freed, and
answers a metric the device lacks with NOT_SUPPORTED in that metric alone."""

import ctypes
import sys
import time
import types

import pynvml as real
import pytest
import torch
from test_bench import FakeNvml

from ablations.analysis.wording.sections import phases_lines
from bench.gpm import GPM_FIGURES, GpmWindow

NOT_SUPPORTED = 3
VALUES = {real.NVML_GPM_METRIC_SM_UTIL: 11.5, real.NVML_GPM_METRIC_SM_OCCUPANCY: 7.25,
          real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 2.5}


class GpmNvml(FakeNvml):
    """FakeNvml with GPM, as a Hopper GPU's driver answers it."""
    NVML_SUCCESS = real.NVML_SUCCESS
    NVML_GPM_METRICS_GET_VERSION = real.NVML_GPM_METRICS_GET_VERSION
    NVML_GPM_METRIC_SM_UTIL = real.NVML_GPM_METRIC_SM_UTIL
    NVML_GPM_METRIC_SM_OCCUPANCY = real.NVML_GPM_METRIC_SM_OCCUPANCY
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = real.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    c_nvmlGpmMetricsGet_t = real.c_nvmlGpmMetricsGet_t

    def __init__(self, supported: bool = True, lacking: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.supported, self.lacking = supported, lacking
        self.alive: dict[int, object] = {}   # address → the sample's struct
        self.taken: dict[int, int] = {}      # address → the order it was taken in
        self.allocated = 0

    def nvmlGpmQueryDeviceSupport(self, handle):
        return types.SimpleNamespace(isSupportedDevice=int(self.supported))

    def nvmlGpmSampleAlloc(self):
        if not self.supported:
            raise self.NVMLError("Not Supported")
        struct = real.struct_c_nvmlGpmSample_t()
        self.alive[ctypes.addressof(struct)] = struct
        self.allocated += 1
        return ctypes.pointer(struct)

    def _address(self, sample) -> int:
        address = ctypes.addressof(sample.contents)
        if address not in self.alive:
            raise self.NVMLError("Invalid Argument: a sample not allocated or already freed")
        return address

    def nvmlGpmSampleGet(self, handle, sample):
        self.taken[self._address(sample)] = len(self.taken)

    def nvmlGpmSampleFree(self, sample):
        address = self._address(sample)
        del self.alive[address]
        self.taken.pop(address, None)

    def nvmlGpmMetricsGet(self, request):
        if request.version != real.NVML_GPM_METRICS_GET_VERSION:
            raise self.NVMLError("Argument Version Mismatch")
        first, last = self._address(request.sample1), self._address(request.sample2)
        if first not in self.taken or last not in self.taken or self.taken[first] >= self.taken[last]:
            raise self.NVMLError("Invalid Argument: two samples taken in order are needed")
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId in self.lacking or metric.metricId not in VALUES:
                metric.nvmlReturn = NOT_SUPPORTED
            else:
                metric.nvmlReturn, metric.value = real.NVML_SUCCESS, VALUES[metric.metricId]
        return request


def test_gpm_figures_are_read_between_the_window_ends_and_every_sample_is_freed():
    fake = GpmNvml()
    window = GpmWindow(fake, "GPU-1")
    window.start()
    assert window.finish() == {"sm_active_pct": 11.5, "sm_occupancy_pct": 7.25, "tensor_active_pct": 2.5}
    assert fake.allocated == 2 and not fake.alive
    window.start()
    window.start()   # a window started again lets go of its first sample
    window.finish()
    assert not fake.alive


def test_a_gpu_without_gpm_gives_blank_figures_and_a_metric_it_lacks_is_blank_alone():
    plain = GpmNvml(supported=False)
    window = GpmWindow(plain, "GPU-1")
    window.start()
    assert window.finish() == dict.fromkeys(GPM_FIGURES) and plain.allocated == 0
    no_tensor = GpmNvml(lacking=(real.NVML_GPM_METRIC_ANY_TENSOR_UTIL,))
    window = GpmWindow(no_tensor, "GPU-1")
    window.start()
    assert window.finish() == {"sm_active_pct": 11.5, "sm_occupancy_pct": 7.25, "tensor_active_pct": None}
    assert not no_tensor.alive
    old = GpmWindow(FakeNvml(), "GPU-1")   # a package or driver from before GPM
    old.start()
    assert old.finish() == dict.fromkeys(GPM_FIGURES)


def test_a_training_phase_gets_sm_activity_beside_its_busy_share(monkeypatch):
    from bench import utilisation

    fake = GpmNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(uuid="GPU-1"))
    region = utilisation.DeviceRegion(torch.device("cuda:0"))
    with region:
        t0 = time.time()
        for k in range(1, 4):
            fake.add(1, t0 + k / 6, 90.0)
        time.sleep(0.6)
    figures = region.figures(1000)
    assert figures["util_pct"] == pytest.approx(90.0)
    assert figures["sm_active_pct"] == 11.5 and figures["tensor_active_pct"] == 2.5
    assert not fake.alive


def test_the_phase_mfu_is_the_runs_training_flops_over_the_phase_time_and_the_peak():
    from ablations.running import runner
    from bench.mfu import Peak

    def tasks(*peaks):
        return [types.SimpleNamespace(peak=p) for p in peaks]
    peak = Peak(1e12, "2026-11-27T10:00:00+00:00")
    row = {"status": "ok", "gflops": 0.5, "train_size": 1000, "epochs": 2, "resumed_after": 0}
    flops = runner._flops_trained(row)
    assert flops == 2 * 1000 * 0.5e9 * 3
    assert runner._phase_mfu(tasks(peak), flops, 2.0) == pytest.approx(flops / 2.0 / 1e12)
    other = Peak(2e12, "2026-11-27T10:00:00+00:00")
    assert runner._phase_mfu(tasks(peak, other), flops, 2.0) is None   # runs in two precisions: no one peak
    assert runner._phase_mfu(tasks(None), flops, 2.0) is None           # no peak measured: blank
    assert runner._flops_trained({**row, "status": "diverged"}) == 0.0


def test_the_reports_phase_table_puts_busy_sm_activity_and_mfu_side_by_side():
    new = {"when": "2026-11-27T10:00:00", "sweeps": "depth", "jobs": 8, "images": 2160000, "wall_s": 21.3,
           "util_pct": 91.0, "sm_active_pct": 12.4, "tensor_active_pct": 3.1, "mfu": 0.0021, "power_w": 190.0,
           "energy_j_per_img": 0.0019, "energy_window_s": 20.0}
    old = {k: v for k, v in new.items() if k not in ("sm_active_pct", "tensor_active_pct", "mfu")}
    lines = phases_lines([new, old], 2)
    assert "| busy % | SM active % | tensor cores % | MFU % |" in lines[2]
    assert "| 91 | 12 | 3 | 0.21 |" in lines[4]
    assert "| 91 | — | — | — |" in lines[5]
    assert any("however few SMs it used" in line for line in lines)
