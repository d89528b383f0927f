"""--quantize's modes, as options and the CLI read them (the quantize stage itself is
passes/export/quantize.py, which imports ExecuTorch's quantizer): what each mode asks of XNNPACK's
quantizer, what it takes, and the backend it implies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devplan.backend import KNOWN, Backend, Partitioner
from devplan.errors import DevplanError

# --quantize MODE: the keywords of the XNNPACK quantizer's get_symmetric_quantization_config
MODES: dict[str, dict[str, object]] = {
    "dynamic-int8": {"is_per_channel": True, "is_dynamic": True},
    "int8": {"is_per_channel": True, "is_dynamic": False},
    # weights in [-8, 7]: XNNPACK's partitioner takes them as 4-bit per channel (qc4w) and packs them
    "dynamic-int4": {"is_per_channel": True, "is_dynamic": True, "weight_qmin": -8, "weight_qmax": 7},
    # torchao's LLM recipe, not the XNNPACK quantizer (passes/export/quantize_torchao.py): 8-bit dynamic
    # activations, 4-bit weights in groups of --group-size, 8-bit embedding tables
    "8da4w": {"is_dynamic": True},
}
TORCHAO = {"8da4w"}
GROUP_SIZE = 32  # 8da4w's weights in groups of this many inputs, as export_llama -G 32 and optimum-executorch
# what each mode's quantizer takes; dynamic-int4 linear layers alone, since XNNPACK packs only
# 2-D weights as 4-bit (ExecuTorch's convert_to_qc4w refuses a convolution's)
TAKES = {
    "dynamic-int8": "linear and convolution layers, embedding tables",
    "int8": "linear and convolution layers, add, mul, cat, pooling, embedding tables",
    "dynamic-int4": "linear layers (embedding tables in 8 bits)",
    "8da4w": "linear layers whose input size is a multiple of the group size, embedding tables",
}
NEEDS_DATA = {"int8"}  # activations' ranges are observed, so they must come from real inputs


def quantized_delegates(
    mode: str | None, calibration: "Path | tuple[Any, ...] | None", delegates: tuple[Backend | Partitioner, ...]
) -> tuple[Backend | Partitioner, ...]:
    """The backends a compile with --quantize uses: XNNPACK's, implied when none is given; any
    other is refused, since only XNNPACK's backend runs the quantized ops these modes make."""
    if mode is None:
        raise DevplanError("--calibration: only with --quantize (the inputs quantizing calibrates on)")
    if mode not in MODES:
        raise DevplanError(f"--quantize {mode}: unknown mode; use one of: {', '.join(MODES)}")
    if mode in NEEDS_DATA and calibration is None:
        raise DevplanError(
            f"--quantize {mode}: needs --calibration FILE.pt, a list of input tuples saved with "
            f"torch.save (static int8 observes its activations' ranges on them)"
        )
    xnnpack = Partitioner.parse("xnnpack")
    for delegate in delegates:
        if not isinstance(delegate, Partitioner) or (delegate.module, delegate.cls) != (xnnpack.module, xnnpack.cls):
            name = delegate.label if isinstance(delegate, Partitioner) else f"--delegate {delegate.device}"
            raise DevplanError(
                f"--quantize {mode}: {name} cannot run the quantized ops XNNPACK's quantizer makes; "
                f"leave it out (--backend {next(iter(KNOWN))} is implied)"
            )
    return delegates or (xnnpack,)


def checked_group_size(mode: str | None, group_size: object) -> None:
    """--group-size: a multiple of 32, which XNNPACK's lowering requires of a 4-bit linear's
    groups, and only for a mode that quantizes in groups."""
    if mode not in TORCHAO:
        raise DevplanError(
            f"--group-size {group_size}: only with --quantize {' or '.join(sorted(TORCHAO))} (the weights' groups)"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 or group_size % 32:
        raise DevplanError(
            f"--group-size {group_size}: give a multiple of 32 (XNNPACK's 4-bit linears take groups of "
            f"32, 64, ...), e.g. {GROUP_SIZE}"
        )
