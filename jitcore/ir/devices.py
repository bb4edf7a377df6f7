"""devices: torch's own device objects, normalised so that traces print and compare them stably."""
from __future__ import annotations

import torch


def to_device(x) -> torch.device:
    """A torch.device from a device, a string, an int (a CUDA index) or None (the CPU)."""
    if x is None:
        return torch.device("cpu")
    if isinstance(x, torch.device):
        dev = x
    elif isinstance(x, int):
        dev = torch.device("cuda", x)
    else:
        dev = torch.device(x)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return dev


def short_name(dev: torch.device) -> str:
    return dev.type if dev.index is None else f"{dev.type}:{dev.index}"
