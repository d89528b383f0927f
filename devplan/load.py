"""Stage 1: a .pt2 archive on disk to a torch.export ExportedProgram."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

from devplan.errors import DevplanError


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
    import torch

    try:
        return torch.export.load(path)
    except Exception as error:  # torch raises many kinds here; all mean the archive is unusable
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DevplanError(f"{path}: cannot load the .pt2 archive ({reason}); re-export it with torch.export.save") from None
