"""The constant methods ExecuTorch's LLM runner reads, by name, with the type it reads each
as. The runner takes each method's output as that type and aborts the process on another
(`EValue is not a Scalar` for a string 'True'), so a value given for one of these names is
made that type at compile time, or refused in one line, never stored as it was typed."""

from __future__ import annotations

from typing import Any

from devplan.errors import DevplanError

BOOL, INT, INTS = "a bool", "an int", "a list of ints"

# ExecuTorch's extension/llm/runner (constants.h, llm_runner_helper.cpp) and what
# export_llama's _load_llama_model_metadata writes beside them
RUNNER_KEYS = {
    "use_kv_cache": BOOL,
    "use_sdpa_with_kv_cache": BOOL,
    "enable_dynamic_shape": BOOL,
    "get_max_seq_len": INT,
    "get_max_context_len": INT,
    "get_vocab_size": INT,
    "get_n_layers": INT,
    "get_bos_id": INT,
    "get_n_bos": INT,
    "get_n_eos": INT,
    "get_num_kv_shared_layers": INT,
    "get_eos_ids": INTS,
}
_EXAMPLES = {BOOL: "true", INT: "128", INTS: "[128001, 128009]"}
_BOOLS = {"true": True, "false": False, "True": True, "False": False, "1": True, "0": False}
_INT64 = range(-(1 << 63), 1 << 63)


def runner_value(name: str, value: Any, where: str) -> Any:
    """`value` as the type the runner reads `name` as (a name it does not read: as given).
    Bools from true/false/True/False/1/0 (text or JSON), ints from whole numbers (text too),
    a list of ints from a list or one int. `where` begins the error: what gave the value ("constant method", "--metadata FILE:")."""
    kind = RUNNER_KEYS.get(name)
    if kind is None:
        return value
    typed = {BOOL: _bool, INT: _int, INTS: _ints}[kind](value)
    if typed is None:
        raise DevplanError(
            f"{where} {name}={_shown(value)} is not {kind}, the type ExecuTorch's LLM runner reads "
            f"{name} as (e.g. {name}={_EXAMPLES[kind]})"
        )
    return typed


def _bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    return _BOOLS.get(value) if isinstance(value, str) else None


def _int(value: object) -> int | None:
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():  # the text of a whole number
        value = int(value)
    return value if type(value) is int and value in _INT64 else None  # a bool is no count, 128.0 no int


def _ints(value: object) -> list[int] | None:
    items = value if isinstance(value, list) else [value]  # one id is a list of one: one output either way
    typed = [item for item in items if type(item) is int and item in _INT64]
    return typed if len(typed) == len(items) else None


def _shown(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)
