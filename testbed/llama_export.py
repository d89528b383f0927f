"""ExecuTorch's own LLM path, for tests and benchmarks of devplan's LLM programs: a tiny
Llama-3-style model of ExecuTorch's `examples/models/llama` (seeded random weights loaded
through a checkpoint file), exported with a KV cache and the sdpa custom op as `export_llama`
exports it, saved both as the .pt2 devplan compiles and as ExecuTorch's own .pte; a word
tokenizer in the HF format ExecuTorch's runner reads; and greedy generation through
ExecuTorch's `TextLLMRunner`.

Lives under tests/ because devplan itself must never import executorch."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import torch

# ExecuTorch's custom ops (llama::custom_sdpa, llama::update_cache) register in this module
CUSTOM_OPS = "executorch.extension.llm.custom_ops.custom_ops"
VOCAB = 512
# words export_llama's model loader reads in a checkpoint's path as a pre-quantized checkpoint
# (examples/models/llama/model.py): its linears are swapped for quantized ones before the weights
PREQUANTIZED_WORDS = ("int8", "8da4w")


@dataclass(frozen=True)
class LlamaExport:
    pt2: Path  # torch.export of the model, as devplan compiles it
    pte: Path  # ExecuTorch's lowering of the same export
    metadata: dict  # the constant methods ExecuTorch's program carries


def export_llama(
    folder: Path,
    *,
    dim: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    max_seq: int = 64,
    seed: int = 0,
    metadata: dict | None = None,
    xnnpack: bool = False,
    embedding_quantize: str | None = None,
    qmode: str | None = None,
    group_size: int = 32,
) -> LlamaExport:
    """The model through ExecuTorch's export_llama pipeline (use_kv_cache, use_sdpa_with_kv_cache,
    dynamic prefill length); its weights drawn from `seed` and loaded from a checkpoint file.
    `xnnpack`: ExecuTorch's program sends the linears to XNNPACK, as its LLM recipe does;
    `embedding_quantize` ("8,0": 8 bits, per row) quantizes the embedding as export_llama -E does;
    `qmode` ("8da4w": 8-bit dynamic activations, 4-bit weights in groups of `group_size`, through
    torchao) quantizes the linears as export_llama -qmode does, before the export that the .pt2
    holds (so devplan compiles the quantized model ExecuTorch lowers)."""
    import importlib

    if any(word in str(folder) for word in PREQUANTIZED_WORDS):
        raise ValueError(
            f"{folder}: ExecuTorch's export_llama takes a checkpoint whose path holds "
            f"{' or '.join(PREQUANTIZED_WORDS)} as already quantized (and quantizes its linears again "
            f"at load); export from a folder named otherwise"
        )
    from executorch.examples.models.llama import export_llama_lib
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    importlib.import_module(CUSTOM_OPS)
    params = {
        "dim": dim,
        "n_layers": layers,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "vocab_size": VOCAB,
        "multiple_of": 32,
        "norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "use_scaled_rope": False,
    }
    (folder / "params.json").write_text(json.dumps(params))
    torch.manual_seed(seed)
    model = construct_transformer(ModelArgs(**params))
    weights = {k: torch.randn_like(v) * 0.1 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    torch.save(weights, folder / "checkpoint.pth")
    config = LlmConfig()
    config.base.params, config.base.checkpoint = str(folder / "params.json"), str(folder / "checkpoint.pth")
    config.base.metadata = json.dumps(metadata or {})
    config.model.use_kv_cache = config.model.use_sdpa_with_kv_cache = config.model.enable_dynamic_shape = True
    config.export.max_seq_length = config.export.max_context_length = max_seq
    config.backend.xnnpack.enabled = xnnpack
    config.quantization.embedding_quantize = embedding_quantize
    config.quantization.qmode, config.quantization.group_size = qmode, group_size
    config.export.output_dir, config.export.output_name = str(folder), str(folder / "executorch.pte")
    builder = export_llama_lib._prepare_for_llama_export(config)
    ep = builder._export()
    torch.export.save(ep, folder / "model.pt2")
    export_llama_lib._export_llama(config)
    return LlamaExport(folder / "model.pt2", folder / "executorch.pte", dict(builder.metadata))


# transformers families the recipe exports: (config class, model class)
HF_DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
}


def export_hf_llama(
    folder: Path,
    *,
    dim: int = 64,
    layers: int = 2,
    max_seq: int = 64,
    seed: int = 0,
    metadata: dict | None = None,
    xnnpack: bool = False,
    family: str = "llama",
    qmode: str | None = None,
) -> LlamaExport:
    """A transformers decoder of `family` (HF_DECODERS; seeded random weights) through
    transformers' ExecuTorch recipe (TorchExportableModuleForDecoderOnlyLM: a static KV cache,
    inputs input_ids and cache_position, one position per token, the prefill length dynamic),
    and ExecuTorch's lowering of that export with the constant methods its runner reads, as
    optimum-executorch writes them from the model's config. `qmode` "8da4w" quantizes the linears
    before the export as optimum-executorch's recipe does (torchao's 8-bit dynamic activations,
    4-bit weights in groups of 32)."""
    from executorch.exir import to_edge_transform_and_lower

    ep, found = export_hf_decoder(
        folder, dim=dim, layers=layers, max_seq=max_seq, seed=seed, family=family, qmode=qmode
    )
    metadata = {**found, **(metadata or {})}
    partitioners = [_xnnpack()] if xnnpack else []
    program = to_edge_transform_and_lower(ep, partitioner=partitioners, constant_methods=metadata).to_executorch()
    (folder / "executorch.pte").write_bytes(program.buffer)
    return LlamaExport(folder / "model.pt2", folder / "executorch.pte", metadata)


def export_hf_decoder(
    folder: Path,
    *,
    dim: int = 64,
    layers: int = 2,
    max_seq: int = 64,
    seed: int = 0,
    family: str = "llama",
    qmode: str | None = None,
) -> tuple[torch.export.ExportedProgram, dict]:
    """export_hf_llama's export alone, saved as folder/model.pt2, with the constant methods
    ExecuTorch's runner reads, as optimum-executorch writes them. Needs no executorch."""
    model = _hf_model(family, dim, layers, max_seq, seed)
    if qmode is not None:
        _quantize_8da4w(model, qmode)
    ep = _recipe_export(model, max_seq)
    torch.export.save(ep, folder / "model.pt2")
    return ep, _recipe_metadata(model, max_seq, None)


def export_hf_llama_8da4w(
    folder: Path,
    *,
    family: str = "llama",
    group_size: int = 32,
    metadata: dict | None = None,
    dim: int = 64,
    layers: int = 2,
    max_seq: int = 64,
) -> LlamaExport:
    """The float export of a transformers decoder (export_hf_llama's, seed 0) as the .pt2, and
    ExecuTorch's program of the LLM recipe on the same weights as the .pte: optimum-executorch's
    `--qlinear 8da4w --qembedding 8w` (export_llama's `-qmode 8da4w -E 8,0`): torchao's 8-bit
    tables by row and 8-bit dynamic activations with 4-bit weights in groups, both with the
    recipes' half-quadratic scale-only parameters, unwrapped; lowered with XNNPACK and the quant
    fusion that gathers each table by embedding_byte, as optimum-executorch lowers it."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.utils import unwrap_tensor_subclass

    torch.export.save(_recipe_export(_hf_model(family, dim, layers, max_seq, 0), max_seq), folder / "model.pt2")
    model = _hf_model(family, dim, layers, max_seq, 0)
    scales = "hqq_scale_only"  # the recipes' default choice of parameters
    table = IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0), intx_choose_qparams_algorithm=scales)
    quantize_(model, table, lambda m, _: isinstance(m, torch.nn.Embedding))
    linear = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(group_size), intx_choose_qparams_algorithm=scales
    )
    quantize_(
        model, linear, filter_fn=lambda m, _: isinstance(m, torch.nn.Linear) and m.weight.shape[1] % group_size == 0
    )
    unwrap_tensor_subclass(model)
    metadata = _recipe_metadata(model, max_seq, metadata)
    lowered = to_edge_transform_and_lower(
        _recipe_export(model, max_seq), partitioner=[_xnnpack()], constant_methods=metadata
    )
    program = lowered.to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True))
    (folder / "executorch.pte").write_bytes(program.buffer)
    return LlamaExport(folder / "model.pt2", folder / "executorch.pte", metadata)


def _hf_model(family: str, dim: int, layers: int, max_seq: int, seed: int) -> torch.nn.Module:
    """A transformers decoder of `family` with seeded random weights and a static cache."""
    import transformers
    from transformers import GenerationConfig

    config_class, model_class = (getattr(transformers, name) for name in HF_DECODERS[family])
    torch.manual_seed(seed)
    config = config_class(
        vocab_size=VOCAB,
        hidden_size=dim,
        intermediate_size=2 * dim,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2 * max_seq,
        **({"head_dim": dim // 4} if family == "gemma" else {}),
    )
    model = model_class(config).eval()
    model.generation_config = GenerationConfig(
        use_cache=True,
        cache_implementation="static",
        max_length=max_seq,
        cache_config={"batch_size": 1, "max_cache_len": max_seq},
    )
    return model


def _recipe_export(model: torch.nn.Module, max_seq: int) -> torch.export.ExportedProgram:
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    recipe = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_seq)
    tokens = torch.export.Dim("seq_length_dim", max=max_seq - 1)
    with torch.no_grad():  # strict, as the recipe's users export it: a non-strict export lifts the cache as constants
        return recipe.export(
            input_ids=torch.tensor([[1, 2, 3]]),
            cache_position=torch.arange(3),
            dynamic_shapes={"input_ids": {1: tokens}, "cache_position": {0: tokens}},
            strict=True,
        )


def _recipe_metadata(model: torch.nn.Module, max_seq: int, metadata: dict | None) -> dict:
    """The runner's keys as optimum-executorch's save_config_to_constant_methods writes them from
    the model's config and its export's max_seq_len; it writes no get_max_context_len, which the
    runner then takes from get_max_seq_len (export_llama writes both)."""
    config = model.config
    return {
        "get_max_seq_len": max_seq,
        "get_max_context_len": max_seq,
        "get_vocab_size": config.vocab_size,
        "get_n_layers": config.num_hidden_layers,
        "use_kv_cache": model.generation_config.use_cache,
        "use_sdpa_with_kv_cache": "custom_sdpa" in config._attn_implementation,
        "enable_dynamic_shape": True,
        **(metadata or {}),
    }


def _quantize_8da4w(model: torch.nn.Module, qmode: str, group_size: int = 32) -> None:
    """torchao's 8da4w on the linears whose rows split into groups, as ExecuTorch's and
    optimum-executorch's recipes quantize them."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.utils import unwrap_tensor_subclass

    if qmode != "8da4w":
        raise ValueError(f"qmode {qmode!r}: only 8da4w")
    quantize_(
        model,
        Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size)),
        filter_fn=lambda m, _: isinstance(m, torch.nn.Linear) and m.weight.shape[1] % group_size == 0,
    )
    unwrap_tensor_subclass(model)  # plain tensors and torchao's ops in the export, as the recipes save it


def _xnnpack():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner()


def word_tokenizer(folder: Path) -> Path:
    """A BPE tokenizer of VOCAB ids whose every token is ASCII (letters and letter pairs), so
    that each generated token decodes on its own."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: 3 + i for i, c in enumerate(string.ascii_lowercase)}}
    pairs = [(a, b) for a in string.ascii_lowercase for b in string.ascii_lowercase][: VOCAB - len(vocab)]
    vocab.update({a + b: len(vocab) + i for i, (a, b) in enumerate(pairs)})
    tokenizer = Tokenizer(models.BPE(vocab, pairs, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def generate(pte: Path, tokenizer: Path, prompt: str, new_tokens: int = 32) -> tuple[list[str], dict]:
    """The pieces ExecuTorch's TextLLMRunner generates greedily (temperature 0) after `prompt`,
    and its stats (tokens per second among them)."""
    import importlib

    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    importlib.import_module(CUSTOM_OPS)
    importlib.import_module("executorch.kernels.quantized")  # registers the quantized kernels with the runtime
    runner = TextLLMRunner(str(pte), str(tokenizer))
    pieces: list[str] = []
    stats: list = []
    runner.generate(
        prompt,
        GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, echo=False),
        token_callback=pieces.append,
        stats_callback=stats.append,
    )
    return pieces, json.loads(stats[-1].to_json_string())
