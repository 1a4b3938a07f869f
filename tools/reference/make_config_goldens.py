#!/usr/bin/env python3
"""Writes tests/golden/config/: the Qwen3-VL-2B-Instruct config.json in its official 4.57 spelling (as in the
reference spec, section 1.1) and the same config after a load/save through the installed transformers (5.x spelling,
rope_parameters), plus the parameter count transformers computes for the 2B shapes (on the meta device)."""
import json
import pathlib
import tempfile

import torch
import transformers
from transformers import AutoConfig, Qwen3VLForConditionalGeneration

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden" / "config"

OFFICIAL_2B = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text", "num_attention_heads": 16, "num_hidden_layers": 28,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000, "tie_word_embeddings": True, "use_cache": True, "vocab_size": 151936,
    },
    "tie_word_embeddings": True,
    "transformers_version": "4.57.0.dev0",
    "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1024,
        "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4096, "model_type": "qwen3_vl",
        "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048, "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2,
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652,
}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "qwen3-vl-2b-v457.json").write_text(json.dumps(OFFICIAL_2B, indent=2) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "config.json").write_text(json.dumps(OFFICIAL_2B))
        config = AutoConfig.from_pretrained(tmp)
        out = pathlib.Path(tmp) / "saved"
        config.save_pretrained(out)
        saved = json.loads((out / "config.json").read_text())
    (OUT / "qwen3-vl-2b-v5.json").write_text(json.dumps(saved, indent=2) + "\n")
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    params = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    (OUT / "qwen3-vl-2b-params.json").write_text(json.dumps(
        {"transformers": transformers.__version__, "parameters": params,
         "tensors": {k: list(v.shape) for k, v in model.state_dict().items()}}, indent=0) + "\n")
    print("wrote", OUT, "parameters", params)


if __name__ == "__main__":
    main()
