"""Held-out mixture-of-experts decoders, apart from the corpus (testbed/hf_models.py): the two
families whose portable programs ExecuTorch's own lowering cannot make, and whose XNNPACK
lowering once refused a partition (gpt-oss: the attention sinks' amax over the last dim of a
4-d tensor; DeepSeek-V3 with MLA: an empty_like ExecuTorch writes as empty_permuted). Built as
the corpus's are: from a tiny config, seeded, in eval mode, returning (module, args, kwargs).

Import it from the repository root as `testbed.held_out_llms`."""

from __future__ import annotations

from typing import Callable

from testbed.hf_models import _MOE, HFCase, _build, _decoder_config, _tokens


def gpt_oss(layers: int = 2) -> HFCase:
    from transformers import GptOssConfig, GptOssForCausalLM

    # a sliding-window layer and a full one (the first `layers` of that pattern), sinks in each
    kinds = ["sliding_attention", "full_attention"] * layers
    config = _decoder_config(
        GptOssConfig,
        num_hidden_layers=layers,
        head_dim=16,
        num_local_experts=4,
        sliding_window=4,
        layer_types=kinds[:layers],
        **_MOE,
    )
    return _build(GptOssForCausalLM, config, "eager"), (_tokens(),), {}


def deepseek_v3(layers: int = 2) -> HFCase:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    # MLA with aligned dims (the q/kv ranks and head dims multiples of 8), one dense layer then MoE
    config = _decoder_config(
        DeepseekV3Config,
        num_hidden_layers=layers,
        num_key_value_heads=4,
        n_routed_experts=4,
        n_shared_experts=1,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        **_MOE,
    )
    return _build(DeepseekV3ForCausalLM, config), (_tokens(),), {}


HELD_OUT: dict[str, Callable[[], HFCase]] = {"gpt_oss": gpt_oss, "deepseek_v3": deepseek_v3}
