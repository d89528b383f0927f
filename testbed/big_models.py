"""Real-size transformers models (issue 26), built in a child process of their own from a
config with seeded random weights: Qwen2.5-0.5B's shape in fp32, TinyLlama-1.1B's in bf16, and
a small one for CI; `export` saves one's torch.export program as a .pt2, its peak memory the
child's own (testbed/peak.py)."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.peak import run_measured

TOKENS = 64
# (family, dtype, config): Qwen2.5-0.5B's and TinyLlama-1.1B's shapes, and a small one for CI
MODELS = {
    "qwen2_0_5b": (
        "qwen2",
        "float32",
        dict(
            hidden_size=896,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            intermediate_size=4864,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
    ),
    "tinyllama_1_1b": (
        "llama",
        "bfloat16",
        dict(
            hidden_size=2048,
            num_hidden_layers=22,
            num_attention_heads=32,
            num_key_value_heads=4,
            intermediate_size=5632,
            vocab_size=32000,
            tie_word_embeddings=False,
        ),
    ),
    "small": (
        "qwen2",
        "float32",
        dict(
            hidden_size=512,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            intermediate_size=1536,
            vocab_size=32000,
            tie_word_embeddings=True,
        ),
    ),
}

# builds the model from its config, seeded, and the example input ids
BUILD = """
import json, sys, torch, transformers
family, dtype, config, path, tokens = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5])
classes = {"qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
           "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}
config_class, model_class = classes[family]
torch.manual_seed(0)
model = model_class._from_config(config_class(use_cache=False, **config), attn_implementation="sdpa",
                                 torch_dtype=getattr(torch, dtype)).eval()
ids = torch.randint(3, config["vocab_size"], (1, tokens))
"""
# the child that exports and saves the export; prints the weight bytes
_EXPORT = (
    BUILD
    + """
with torch.no_grad():
    ep = torch.export.export(model, (ids,))
torch.export.save(ep, path)
print(sum(p.numel() * p.element_size() for p in model.parameters()))
"""
)


def export(name: str, path: Path) -> int:
    """Export model `name` to `path`; its weight bytes."""
    family, dtype, config = MODELS[name]
    done, _ = run_measured(
        ["-c", _EXPORT, family, dtype, json.dumps(config), str(path), str(TOKENS)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"exporting {name} failed:\n{done.stderr[-3000:]}")
    return int(done.stdout.split()[-1])
