"""Tiny random-weight `transformers` models for the real-model corpus (issue 12).

Every builder in FAMILIES makes its model from a config (nothing is downloaded), right after
`torch.manual_seed(0)`, in eval mode, and returns (module, args, kwargs): the example inputs
torch.export takes, kwargs empty unless the model needs keywords (T5's decoder_input_ids,
BERT's attention_mask). Configs are tiny: 2 layers, width 32-64, vocabulary 128, 8 tokens,
32x32 images, a 0.1 s clip of 16 kHz audio, so that the whole corpus runs in minutes.

Attention: every model that offers it runs "sdpa" (transformers' default; it exports in every
mode and family here, as aten.scaled_dot_product_attention), except Gemma-2, which has no SDPA
path in transformers 5.23 and runs "eager" (explicit matmul, softcapping, softmax). Models
without attention (ResNet, MobileNetV2, ConvNeXt) and MobileViT take no attn_implementation;
`attention(module)` says what a built model runs. Decoders are causal-LM heads built with
use_cache=False, so that they return logits and no DynamicCache; encoder-decoders too.

`static_cache_decoder()` wraps a tiny Llama in transformers' own ExecuTorch recipe
(transformers.integrations.executorch.TorchExportableModuleWithStaticCache): the KV cache
lives in buffers the exported program updates in place, one token per call.

Import it from the repository root as `testbed.hf_models`."""

from __future__ import annotations

import logging
from typing import Callable

import torch
from torch import Tensor, nn

SEED = 0
SEQ = 8
VOCAB = 128
IMAGE = 32

HFCase = tuple[nn.Module, tuple[Tensor, ...], dict[str, Tensor]]

# transformers logs a line per model about unused config keys or missing generation configs
logging.getLogger("transformers").setLevel(logging.ERROR)


def _tokens(batch: int = 1, seq: int = SEQ, low: int = 3) -> Tensor:
    # ids 0-2 are pad/bos/eos in most configs; keep the example text free of them
    return torch.randint(low, VOCAB, (batch, seq))


def _image(channels: int = 3, size: int = IMAGE) -> Tensor:
    return torch.randn(1, channels, size, size)


def _build(model_class, config, attn: str | None = "sdpa") -> nn.Module:
    """`model_class` from `config` with the attention implementation `attn` (None: the model's
    only one), seeded, in eval mode."""
    torch.manual_seed(SEED)
    kwargs = {} if attn is None else {"attn_implementation": attn}
    return model_class._from_config(config, **kwargs).eval()


# ------------------------------------------------------------------------- decoders (causal LMs)


def _decoder_config(config_class, **extra):
    base = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    base.update(extra)
    return config_class(**base)


def gpt2() -> HFCase:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        use_cache=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    return _build(GPT2LMHeadModel, config), (_tokens(),), {}


def llama() -> HFCase:
    from transformers import LlamaConfig, LlamaForCausalLM

    return _build(LlamaForCausalLM, _decoder_config(LlamaConfig)), (_tokens(),), {}


def qwen2() -> HFCase:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _build(Qwen2ForCausalLM, _decoder_config(Qwen2Config)), (_tokens(),), {}


def qwen3() -> HFCase:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return _build(Qwen3ForCausalLM, _decoder_config(Qwen3Config, head_dim=16)), (_tokens(),), {}


def mistral() -> HFCase:
    from transformers import MistralConfig, MistralForCausalLM

    config = _decoder_config(MistralConfig, head_dim=8, sliding_window=None)
    return _build(MistralForCausalLM, config), (_tokens(),), {}


def phi() -> HFCase:
    from transformers import PhiConfig, PhiForCausalLM

    config = _decoder_config(
        PhiConfig, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    )
    return _build(PhiForCausalLM, config), (_tokens(),), {}


def phi3() -> HFCase:
    from transformers import Phi3Config, Phi3ForCausalLM

    config = _decoder_config(Phi3Config, original_max_position_embeddings=64)
    return _build(Phi3ForCausalLM, config), (_tokens(),), {}


def gemma() -> HFCase:
    from transformers import GemmaConfig, GemmaForCausalLM

    return _build(GemmaForCausalLM, _decoder_config(GemmaConfig, head_dim=16)), (_tokens(),), {}


def gemma2() -> HFCase:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    # sliding window 4 < 8 tokens, so the sliding layer's mask differs from the full one's
    config = _decoder_config(Gemma2Config, head_dim=16, query_pre_attn_scalar=16, sliding_window=4)
    return _build(Gemma2ForCausalLM, config, attn="eager"), (_tokens(),), {}


# ------------------------------------------------------------------ mixture-of-experts decoders
# 4 experts, 2 per token; transformers routes them with its grouped_mm experts (aten.histc to
# count each expert's tokens, and transformers::grouped_mm_fallback, an op its
# integrations.moe module registers on import, for the experts' products)

_MOE = dict(num_experts_per_tok=2)


def mixtral() -> HFCase:
    from transformers import MixtralConfig, MixtralForCausalLM

    return _build(MixtralForCausalLM, _decoder_config(MixtralConfig, num_local_experts=4, **_MOE)), (_tokens(),), {}


def qwen2_moe() -> HFCase:
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    # a shared expert beside the routed ones, gated by a sigmoid
    config = _decoder_config(
        Qwen2MoeConfig, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=64, **_MOE
    )
    return _build(Qwen2MoeForCausalLM, config), (_tokens(),), {}


def qwen3_moe() -> HFCase:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = _decoder_config(Qwen3MoeConfig, head_dim=16, num_experts=4, moe_intermediate_size=32, **_MOE)
    return _build(Qwen3MoeForCausalLM, config), (_tokens(),), {}


# --------------------------------------------------------------------------------- text encoders

_ENCODER = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)


def bert() -> HFCase:
    from transformers import BertConfig, BertModel

    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, -3:] = 0  # the second sentence is padded
    return _build(BertModel, BertConfig(**_ENCODER)), (_tokens(2),), {"attention_mask": mask}


def distilbert() -> HFCase:
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64
    )
    return _build(DistilBertModel, config), (_tokens(),), {}


def roberta() -> HFCase:
    from transformers import RobertaConfig, RobertaModel

    return _build(RobertaModel, RobertaConfig(**_ENCODER, pad_token_id=1)), (_tokens(),), {}


def albert() -> HFCase:
    from transformers import AlbertConfig, AlbertModel

    return _build(AlbertModel, AlbertConfig(**_ENCODER, embedding_size=16)), (_tokens(),), {}


# ------------------------------------------------------------------------------ encoder-decoders


def _t5_config():
    from transformers import T5Config

    return T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        use_cache=False,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )


def t5_encoder() -> HFCase:
    from transformers import T5EncoderModel

    return _build(T5EncoderModel, _t5_config(), attn=None), (_tokens(),), {}


def t5() -> HFCase:
    from transformers import T5ForConditionalGeneration

    model = _build(T5ForConditionalGeneration, _t5_config(), attn=None)
    return model, (_tokens(),), {"decoder_input_ids": _tokens(seq=4)}


def bart() -> HFCase:
    from transformers import BartConfig, BartModel

    config = BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        use_cache=False,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    # BartModel shifts input_ids right to make the decoder's inputs when none are given
    return _build(BartModel, config), (_tokens(),), {}


def marian() -> HFCase:
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        use_cache=False,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        forced_eos_token_id=1,
    )
    return _build(MarianMTModel, config), (_tokens(),), {"decoder_input_ids": _tokens(seq=4)}


# -------------------------------------------------------------------------------------- vision


def vit() -> HFCase:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        image_size=IMAGE, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    return _build(ViTModel, config), (_image(),), {}


def resnet() -> HFCase:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", num_labels=10)
    return _randomize_batch_norm(_build(ResNetForImageClassification, config, attn=None)), (_image(),), {}


def mobilenet_v2() -> HFCase:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(image_size=IMAGE, depth_multiplier=0.25, num_labels=10)
    return _randomize_batch_norm(_build(MobileNetV2ForImageClassification, config, attn=None)), (_image(),), {}


def mobilevit() -> HFCase:
    from transformers import MobileViTConfig, MobileViTForImageClassification

    config = MobileViTConfig(
        image_size=IMAGE,
        hidden_sizes=[32, 32, 48],
        neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 96],
        num_attention_heads=2,
        num_labels=10,
    )
    return _randomize_batch_norm(_build(MobileViTForImageClassification, config, attn=None)), (_image(),), {}


def convnext() -> HFCase:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, image_size=IMAGE, num_labels=10, layer_scale_init_value=0.5
    )
    return _build(ConvNextForImageClassification, config, attn=None), (_image(),), {}


# --------------------------------------------------------------------------------------- audio


def whisper_encoder() -> HFCase:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    # the encoder takes exactly 2 * max_source_positions mel frames
    config = WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=16,
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_layers=2,
        decoder_attention_heads=2,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        begin_suppress_tokens=None,
    )
    return _build(WhisperEncoder, config), (torch.randn(1, 16, 32),), {}


def wav2vec2() -> HFCase:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
        vocab_size=VOCAB,
    )
    return _build(Wav2Vec2Model, config), (torch.randn(1, 1600),), {}


def deberta_v2(hidden: int = 32, tokens: int = SEQ, batch: int = 1, buckets: int = 16, padded_from=None) -> HFCase:
    """DeBERTa-v2 with relative positions (2 layers, 2 heads), apart from FAMILIES: the folding
    tests and benchmarks/fold_sweep.py size it. Its position table is projected by the key
    weights and repeated over the batch; a batch of more than one pads its second sequence from
    token `padded_from` (default: half way), as a served batch is."""
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(**_relative_sizes(hidden), position_buckets=buckets)
    torch.manual_seed(SEED)
    return _padded_batch(DebertaV2Model(config).eval(), tokens, batch, padded_from)


def deberta(hidden: int = 32, tokens: int = SEQ, batch: int = 1, buckets: int = 16, padded_from=None) -> HFCase:
    """DeBERTa (v1) with relative positions (2 layers, 2 heads), as deberta_v2 is sized: its
    relative keys and queries broadcast over the batch in its matmuls rather than being
    repeated; `buckets` is its max_relative_positions."""
    from transformers import DebertaConfig, DebertaModel

    config = DebertaConfig(**_relative_sizes(hidden), max_relative_positions=buckets)
    torch.manual_seed(SEED)
    return _padded_batch(DebertaModel(config).eval(), tokens, batch, padded_from)


def _relative_sizes(hidden: int) -> dict:
    """The DeBERTa configurations' shared sizes: 2 layers, 2 heads, both relative terms."""
    return dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
    )


def _padded_batch(module: nn.Module, tokens: int, batch: int, padded_from) -> HFCase:
    """The module on a batch of token ids; past one sequence, the second padded from token
    `padded_from` (default: half way)."""
    ids = _tokens(batch, tokens)
    if batch == 1:
        return module, (ids,), {}
    mask = torch.ones(batch, tokens, dtype=torch.long)
    mask[1, tokens // 2 if padded_from is None else padded_from :] = 0
    return module, (ids,), {"attention_mask": mask}


def _randomize_batch_norm(module: nn.Module) -> nn.Module:
    # fresh batch norms (mean 0, var 1) are identities in eval mode and would hide folding mistakes
    torch.manual_seed(SEED + 1)
    with torch.no_grad():
        for child in module.modules():
            if isinstance(child, nn.modules.batchnorm._BatchNorm):
                child.running_mean.uniform_(-0.5, 0.5)
                child.running_var.uniform_(0.5, 2.0)
    return module


# name -> () -> (module, args, kwargs); families of transformers, one tiny model each
FAMILIES: dict[str, Callable[[], HFCase]] = {
    "gpt2": gpt2,
    "llama": llama,
    "qwen2": qwen2,
    "qwen3": qwen3,
    "mistral": mistral,
    "phi": phi,
    "phi3": phi3,
    "gemma": gemma,
    "gemma2": gemma2,
    "bert": bert,
    "distilbert": distilbert,
    "roberta": roberta,
    "albert": albert,
    "t5_encoder": t5_encoder,
    "t5": t5,
    "bart": bart,
    "marian": marian,
    "vit": vit,
    "resnet": resnet,
    "mobilenet_v2": mobilenet_v2,
    "mobilevit": mobilevit,
    "convnext": convnext,
    "whisper_encoder": whisper_encoder,
    "wav2vec2": wav2vec2,
}

# The mixture-of-experts decoders, apart from FAMILIES: ExecuTorch's own lowering (and so its
# XNNPACK partitioner) refuses them (aten.histc is not in its Core ATen opset), which the
# tests that compare with ExecuTorch's lowering of every family need
MOE_FAMILIES: dict[str, Callable[[], HFCase]] = {"mixtral": mixtral, "qwen2_moe": qwen2_moe, "qwen3_moe": qwen3_moe}

DECODERS = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "phi", "phi3", "gemma", "gemma2")


def attention(module: nn.Module) -> str | None:
    """The attention implementation a built model runs ("sdpa", "eager"), None for models
    without attention."""
    config = getattr(module, "config", None)
    return getattr(config, "_attn_implementation", None) if config is not None else None


# -------------------------------------------------------------------- static KV cache decoder

MAX_CACHE = 16


def static_cache_decoder() -> tuple[nn.Module, list[dict[str, Tensor]]]:
    """A tiny Llama with a static KV cache, wrapped by transformers' ExecuTorch recipe
    (TorchExportableModuleWithStaticCache, the module TorchExportableModuleForDecoderOnlyLM
    exports for a model without sliding windows), and the keyword inputs of three decode steps:
    one token each at cache positions 0, 1, 2. The first step's inputs are the export example."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    config = _decoder_config(LlamaConfig, use_cache=True)
    model = _build(LlamaForCausalLM, config)
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", cache_config={"batch_size": 1, "max_cache_len": MAX_CACHE}
    )
    torch.manual_seed(SEED)
    module = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=MAX_CACHE).eval()
    tokens = _tokens(1, 3)
    steps = [
        {"input_ids": tokens[:, i : i + 1], "cache_position": torch.tensor([i], dtype=torch.long)} for i in range(3)
    ]
    return module, steps


def recipe_export(family: str, cache: int, **sizes) -> torch.export.ExportedProgram:
    """README's LLM recipe: `family` (a transformers model type) from a config of `sizes`
    (vocab_size, hidden_size, ...), seeded, through transformers' static-cache ExecuTorch
    module with a `cache`-token cache, exported with the prompt's length dynamic (up to cache - 1)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **sizes)).eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", cache_config={"batch_size": 1, "max_cache_len": cache}
    )
    recipe = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=cache)
    tokens = torch.export.Dim("tokens", max=cache - 1)
    with torch.no_grad():
        return recipe.export(
            input_ids=torch.tensor([[1, 2, 3]]),
            cache_position=torch.arange(3),
            dynamic_shapes={"input_ids": {1: tokens}, "cache_position": {0: tokens}},
            strict=True,
        )
