"""The optional extra, `devplan[executorch]`: ExecuTorch's partitioners, backends and runtime,
imported only by the commands that hand work to ExecuTorch itself (--backend, --partitioner,
run --executorch); the core never imports it."""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

from devplan.errors import DevplanError, first_line

INSTALL = 'pip install "devplan[executorch]"'
# --backend NAME: the partitioner ExecuTorch ships for it (here, not in backend.py, so that shell
# completion lists the names without importing torch)
BACKENDS = {"xnnpack": "executorch.backends.xnnpack.partition.xnnpack_partitioner:XnnpackPartitioner"}
# loggers that ExecuTorch's imports fill with notes about optional libraries and deprecations
_NOISY = ("torchao", "torch.utils._pytree")


def import_module(name: str, who: str) -> ModuleType:
    """Module `name`, imported without the notes its import logs; `who` (an option) is named
    in the one-line error when it is not installed."""
    loggers = [logging.getLogger(logger) for logger in _NOISY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        return importlib.import_module(name)
    except ImportError as error:
        hint = INSTALL if name.startswith("executorch") else f"install the package that provides {name}"
        raise DevplanError(f"{who}: cannot import {name} ({first_line(error)}); {hint}") from None
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
