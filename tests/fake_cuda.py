"""CUDA on the CPU, as strict as torch's, for the tests of what a CUDA graph capture does around a step."""

from __future__ import annotations

import contextlib

import torch

from bench.training.step import EagerStep


class SideStream:
    """Stands in for torch.cuda.Stream on the CPU (its signature: a device and a priority, nothing else): the
    warm-up before a capture then runs here."""

    def __init__(self, device: object = None, priority: int = 0) -> None:
        pass

    def wait_stream(self, other: object) -> None:
        pass

    def synchronize(self) -> None:
        pass


class FakeCuda:
    """The CUDA calls a capture makes, on the CPU, as strict as torch's: which stream is current, whether
    the cache was emptied, and a graph whose capture_end refuses a capture the block invalidated, whose
    `pool()` is refused without a successful capture, and whose pool may be released once only (a second
    release is torch's `TORCH_INTERNAL_ASSERT(uc >= 0)`, which aborts the process). A capture records work
    without running it: the step the block runs here on the CPU is undone when the capture ends, and a
    successful capture's effect is what its first replay applies (`watch`: the step whose state to keep)."""

    def __init__(self, monkeypatch, fail_in_block: bool, fail_at_end: bool) -> None:
        self.current, self.calls, self.releases = ["default"], [], 0
        fake = self

        class Graph:
            captured = False
            before = effect = None

            def capture_begin(self, capture_error_mode="global"):
                fake.calls.append(("capture_begin", fake.current[-1], capture_error_mode))
                self.before = fake.state()

            def capture_end(self):
                fake.calls.append(("capture_end", fake.current[-1]))
                self.effect = fake.state()
                fake.restore(self.before)      # what the block did was recorded, not run
                if fail_at_end:
                    raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
                self.captured = True

            def pool(self):
                if not self.captured:
                    raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
                return (0, 7)

            def reset(self):
                fake.calls.append(("reset",))
                if self.captured:
                    fake.release()
                    self.captured = False

            def replay(self):
                fake.calls.append(("replay",))
                if self.effect is not None:
                    fake.restore(self.effect)

        @contextlib.contextmanager
        def stream(s):
            self.current.append(s)
            try:
                yield
            finally:
                self.current.pop()
        self.fail_in_block = fail_in_block
        self.generator = torch.Generator().manual_seed(5)
        self.side = SideStream()
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None, priority=0: self.side)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SideStream())
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: self.calls.append(("empty_cache",)))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: self.generator.get_state())
        monkeypatch.setattr(torch.cuda, "set_rng_state",
                            lambda state, device=None: (self.calls.append(("set_rng",)), self.generator.set_state(state)))
        monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda d, pool: self.release())
        self.allocated = self.peak = 10**6   # the caching allocator's counters, bytes
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: setattr(self, "peak", self.allocated))

    watch: EagerStep | None = None

    def state(self) -> list[torch.Tensor] | None:
        if self.watch is None:
            return None
        optimizer_state = [v for st in self.watch.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
        return [t.detach().clone() for t in [*self.watch._state_tensors(), *optimizer_state]]

    def restore(self, saved: list[torch.Tensor] | None) -> None:
        if saved is None or self.watch is None:
            return
        optimizer_state = [v for st in self.watch.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
        with torch.no_grad():
            for t, v in zip([*self.watch._state_tensors(), *optimizer_state], saved):
                t.copy_(v)

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def release(self) -> None:
        self.releases += 1
        self.calls.append(("release_pool",))
        if self.releases > 1:
            raise AssertionError("TORCH_INTERNAL_ASSERT(uc >= 0): the pool was released twice")
