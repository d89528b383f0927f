"""Element types: ET12 ScalarType codes, torch-style names and sizes, in one table.

Kept free of torch so that reading and inspecting programs stays fast."""

from __future__ import annotations

from devplan.errors import DevplanError

# name (as torch spells it, without "torch."), ET12 ScalarType code, bytes per element
_TABLE = (
    ("uint8", 0, 1),
    ("int8", 1, 1),
    ("int16", 2, 2),
    ("int32", 3, 4),
    ("int64", 4, 8),
    ("float16", 5, 2),
    ("float32", 6, 4),
    ("float64", 7, 8),
    ("bool", 11, 1),
    ("qint8", 12, 1),
    ("quint8", 13, 1),
    ("qint32", 14, 4),
    ("bfloat16", 15, 2),
    ("quint4x2", 16, 1),
    ("quint2x4", 17, 1),
    ("bits16", 22, 2),
    ("float8_e5m2", 23, 1),
    ("float8_e4m3fn", 24, 1),
    ("float8_e5m2fnuz", 25, 1),
    ("float8_e4m3fnuz", 26, 1),
    ("uint16", 27, 2),
    ("uint32", 28, 4),
    ("uint64", 29, 8),
)
NAME_TO_CODE = {name: code for name, code, _ in _TABLE}
CODE_TO_NAME = {code: name for name, code, _ in _TABLE}
ITEMSIZE = {name: size for name, _, size in _TABLE}


def name_of(code: int) -> str:
    """Torch-style dtype name for an ET12 ScalarType code; unknown codes read as 'scalar_type(N)'."""
    return CODE_TO_NAME.get(code, f"scalar_type({code})")


def code_of(name: str) -> int:
    if name not in NAME_TO_CODE:
        raise DevplanError(f"dtype {name} has no ET12 ScalarType; cast the tensor to a supported dtype")
    return NAME_TO_CODE[name]
