"""--quantize on LLMs (issue 51): the recipes' decoders through transformers' ExecuTorch recipe
(a static KV cache, the prompt's length dynamic), quantized by devplan in the compile that
writes the runner's program."""

from __future__ import annotations

import pytest

pytest.importorskip("executorch.extension.llm.runner")

import devplan  # noqa: E402
from testbed.llama_export import export_hf_llama  # noqa: E402
from tests.tiers import tiered  # noqa: E402

SPECIAL = {"get_bos_id": 1, "get_eos_ids": [511]}


@pytest.mark.parametrize("family", tiered(["qwen2", "llama"], fast={"qwen2"}))
def test_dynamic_int8_lowers_a_decoder_whose_projections_share_their_input(tmp_path, family):
    """q, k and v (and gate and up) read one normalized tensor: quantized once for all its
    readers, XNNPACK's partitioner put the shared quantize chain in one linear's partition that
    another linear's partition fed and read, and ExecuTorch's lowering refused the program
    ("Invalid partition, found dependency cycles"). Each reader quantizing for itself, as
    ExecuTorch's LLM export does (passes/quantize.py's _quantize_per_reader), lowers every
    linear to XNNPACK; before it both families failed so."""
    exported = export_hf_llama(tmp_path, family=family, metadata=SPECIAL)
    result = devplan.compile(
        exported.pt2, tmp_path / "dq.pte", llm=True, quantize="dynamic-int8", constant_methods=SPECIAL
    )
    (forward,) = [m for m in devplan.inspect(result.data)["methods"] if m["name"] == "forward"]
    assert forward["delegates"] and {d["id"] for d in forward["delegates"]} == {"XnnpackBackend"}
    report = result.quantization
    assert report is not None and report.measured_on == "executorch"
    assert report.error.sqnr_db is not None and report.error.sqnr_db > 25
