"""Stage 1: a .pt2 archive on disk to a torch.export ExportedProgram."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

from devplan.errors import DevplanError, first_line


def load(path: str | os.PathLike) -> "torch.export.ExportedProgram":
    """Load a torch.export archive. Note: torch.export.load unpickles parts of the archive,
    so only load .pt2 files from sources you trust."""
    path = Path(path)
    if not path.exists():
        raise DevplanError(f"{path}: no such file; pass a .pt2 written by torch.export.save")
    if path.is_dir():
        raise DevplanError(f"{path}: is a directory; pass a .pt2 file")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(8)
        hint = " (it is an ET12 .pte program; use 'devplan inspect')" if head[4:8] == b"ET12" else ""
        raise DevplanError(f"{path}: not a .pt2 archive{hint}; export the model with torch.export.save")
    import logging

    import torch

    # torch logs the real reason, with a traceback, before it tries an older archive reader
    # and fails with a generic message; keep the log to ourselves and report its reason
    logger = logging.getLogger("torch.export")
    records: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = records.append
    handlers, propagate = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [catcher], False
    try:
        return torch.export.load(path)
    except Exception as error:  # torch raises many kinds here; all mean the archive is unusable
        logged = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
        reason = first_line(logged[0] if logged else error)
        raise DevplanError(f"{path}: cannot load the .pt2 archive ({reason}); re-export it with torch.export.save") from None
    finally:
        logger.handlers, logger.propagate = handlers, propagate
