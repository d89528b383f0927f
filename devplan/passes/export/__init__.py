"""Passes over torch's ExportedProgram, before devplan's own IR: --quantize (with its
calibration), ExecuTorch's backends, attention in blocks, and the split into a `Lowered`."""
