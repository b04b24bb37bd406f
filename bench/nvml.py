"""NVML (`nvidia-ml-py`) for a CUDA device, found by its UUID.

NVML numbers every GPU of the machine in PCI order, whatever CUDA_VISIBLE_DEVICES hides or reorders, so
an index would read another GPU in a worker pinned to GPU 2 (whose cuda:0 is NVML's 2); the UUID names
the same GPU (or MIG instance) in both.
"""

from __future__ import annotations

from typing import Any

import torch


def nvml_uuids(device: torch.device) -> list[str]:
    """The NVML UUIDs a CUDA device may go by: torch's device UUID as it is, and with NVML's "GPU-" and
    (a MIG instance) "MIG-" prefixes."""
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}", uuid]


def nvml_device(device: torch.device) -> tuple[Any, Any]:
    """(pynvml, its handle of `device`): NVML started, the device found by UUID; raises what NVML raises
    (no driver, the package missing) or, when NVML knows none of the UUIDs, the last "not found"."""
    import pynvml

    pynvml.nvmlInit()
    error: Exception | None = None
    for uuid in nvml_uuids(device):
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception as err:  # NVML's "not found" for this spelling: try the next
            error = err
    raise error if error else LookupError(f"no NVML device for {device}")
