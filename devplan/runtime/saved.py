"""Tensors a user saved with torch.save (run's --inputs and --reference): loaded without running
code (weights_only), and held to dense tensors that hold their values."""

from __future__ import annotations

import io
from typing import Any

from devplan.errors import DevplanError


def saved_tensors(name: str, data: bytes, what: str) -> list[Any]:
    """The tensor, or the list or tuple of them, that `data` holds; `what` names one ("input")."""
    import torch

    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # torch.load raises pickle, zip and OS errors alike for a bad file
        raise DevplanError(
            f"{name}: not a file of tensors saved with torch.save ({type(error).__name__}); "
            f"save a tensor or a list of tensors with torch.save"
        ) from None
    tensors = list(loaded) if isinstance(loaded, (list, tuple)) else [loaded]
    for index, tensor in enumerate(tensors):
        if isinstance(tensor, torch.Tensor) and (tensor.layout != torch.strided or tensor.is_meta):
            raise DevplanError(
                f"{name}: {what} {index} is a {str(tensor.layout).removeprefix('torch.')} tensor on "
                f"{tensor.device.type}; save dense tensors that hold their values (tensor.to_dense())"
            )
    return tensors
