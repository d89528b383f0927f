"""bf16 and fp16 models, the dtypes LLMs ship in (issue 26): a tiny transformers Llama and
Qwen2 cast to each, exported as users export them, compiled, written and read back from the
file (so that the runtime uses the mapped constants in place), run on devplan's runtime and on
ExecuTorch's, and compared with eager in the same dtype; inspect reports the weights in that
dtype and the constant bytes they take."""

from __future__ import annotations

import pytest
import torch

import devplan
from devplan.pte import read_pte
from devplan.runtime.executor import run
from testbed.hf_models import llama, qwen2
from testbed.models import run_executorch
from tests.tiers import tiered

# eager and the portable kernels round each op to the dtype at different points: a few units
# in the last place of logits of magnitude ~1 (bf16 keeps 8 bits of mantissa, fp16 11)
TOLERANCES = {torch.bfloat16: dict(rtol=3e-2, atol=3e-2), torch.float16: dict(rtol=4e-3, atol=4e-3)}
FAMILIES = {"llama": llama, "qwen2": qwen2}
CASES = [(family, dtype) for family in FAMILIES for dtype in TOLERANCES]


@pytest.mark.parametrize("family, dtype", tiered(CASES, fast=[("llama", torch.bfloat16), ("qwen2", torch.float16)]))
def test_half_precision_decoder(family: str, dtype: torch.dtype, tmp_path) -> None:
    module, args, _ = FAMILIES[family]()
    module = module.to(dtype)
    with torch.no_grad():
        expected = module(*args).logits
        exported = torch.export.export(module, args)
    path = tmp_path / f"{family}.pte"
    result = devplan.compile(exported, path)
    pte = read_pte(path)
    assert pte.mapped  # the runtime below reads the constants from the file's mapping

    ours = run(pte, list(args))[0][0]
    theirs = run_executorch(result.data, args)[0][0]
    for got in (ours, theirs):
        assert got.dtype == dtype
        torch.testing.assert_close(got, expected, **TOLERANCES[dtype])

    doc = devplan.inspect(path)
    weights = [t for t in doc["methods"][0]["tensors"] if str(t.get("source")).startswith("parameter ")]
    assert weights and {t["dtype"] for t in weights} == {str(dtype).removeprefix("torch.")}
    # every distinct weight once (the norms' weights, all ones, are one), each padded to 16
    # bytes, plus the rotary tables (in float32)
    distinct = {p.detach().reshape(-1).view(torch.uint8).numpy().tobytes() for p in module.parameters()}
    parameters = sum(map(len, distinct))
    assert parameters <= doc["file"]["constant_bytes"] <= parameters + 16 * len(distinct) + 4096
