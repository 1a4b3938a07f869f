#!/usr/bin/env python3
"""Reference outputs of transformers (fp32, eager attention) for small random Qwen3-VL models.

The models are not committed: each is a recipe (tests/golden/model/recipes.json + <name>.config.json) that
`qvl make-random-model` turns into the same bytes anywhere (its weights are seeded per tensor name; the SHA-256 of
every safetensors file is recorded so a changed generator is caught instead of silently compared). This script
builds the models with the qvl binary, runs transformers on them, and writes per case:
  tests/golden/model/<case>.json         prompt ids, image grids, position ids, rope delta, greedy tokens with the
                                          top-2 margin of every step, the first step's top logits
  tests/golden/model/<case>.safetensors  pixel_u8 (the resized image in patch order, first temporal frame:
                                          pixel_values are exactly (u8 - 127.5) / 127.5), image embeddings,
                                          deepstack features, last-position logits at every LOGIT_STRIDE-th id
Images are generated here (seeded) into tests/golden/images/.

Quantised variants (QUANTISED): `qvl quantize` writes the packed folder the engine loads and `--dequantize-to` the f32
floats that folder multiplies with; transformers runs the latter, so the goldens say what the quantised model should
compute. Their cases are named after the packed folder ("tiny-q4.text") and carry "weights".

usage: python3 tools/reference/make_model_goldens.py --qvl build/release/app/qvl [--work /tmp/qvl-golden-models]
                                                     [--only-quantised]  (keep the float goldens, redo the quantised)
"""
import argparse
import hashlib
import json
import pathlib
import subprocess

import numpy as np
import torch
import transformers
from PIL import Image, ImageDraw
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "model"
IMAGES = ROOT / "tests" / "golden" / "images"
TEMPLATE = (pathlib.Path(__file__).parent / "qwen3_vl_chat_template.jinja").read_text()
MIN_PIXELS, MAX_PIXELS = 4096, 36864   # small budgets keep the images at 4..36 merged tokens
LOGIT_STRIDE = 37                      # 4107 of the 151936 logits are kept (plus the top 20 in the JSON)


def text_config(hidden, inter, layers, heads, kv, head_dim, sections):
    return {"model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": hidden, "intermediate_size": inter,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
            "head_dim": head_dim, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 5000000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": sections, "mrope_interleaved": True},
            "hidden_act": "silu", "attention_bias": False}


def vision_config(depth, hidden, inter, heads, out_hidden, deepstack):
    return {"model_type": "qwen3_vl", "depth": depth, "hidden_size": hidden, "intermediate_size": inter,
            "num_heads": heads, "in_channels": 3, "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
            "out_hidden_size": out_hidden, "num_position_embeddings": 2304, "deepstack_visual_indexes": deepstack,
            "hidden_act": "gelu_pytorch_tanh"}


def config(text, vision, tie):
    return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "text_config": text,
            "vision_config": vision, "image_token_id": 151655, "video_token_id": 151656,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653, "tie_word_embeddings": tie}


# name: (config, dtype, shard MiB, seed). Shapes vary every axis the engine must get right.
MODELS = {
    "tiny": (config(text_config(64, 192, 4, 4, 2, 16, [4, 2, 2]), vision_config(4, 64, 128, 4, 64, [1, 2, 3]), True), "bf16", 0, 11),
    "gqa4-untied-f16": (config(text_config(96, 160, 3, 8, 2, 32, [6, 5, 5]), vision_config(3, 48, 96, 3, 96, [0, 2]), False), "f16", 0, 12),
    "mha-sharded": (config(text_config(64, 128, 5, 4, 4, 24, [4, 4, 4]), vision_config(5, 32, 64, 2, 64, [4, 1, 2]), True), "bf16", 2, 13),
    "deep-32x32": (config(text_config(64, 96, 32, 32, 8, 8, [2, 1, 1]), vision_config(2, 32, 64, 4, 64, [1]), True), "bf16", 0, 14),
}
# name: (float model, --weights). tiny: tied head; gqa4-untied-f16: an untied head, f16, rows padded to whole groups
# (its vision hidden size is 48); tiny-q8: q8's groups of 128, so the down projection's 192-wide rows end in a padded
# group and the 64-wide rows are one part-filled group each; tiny-q8-g32: q8 in groups of 32.
QUANTISED = {"tiny-q8-g32": ("tiny", "q8-g32"), "tiny-q4": ("tiny", "q4"), "gqa4-untied-f16-q4": ("gqa4-untied-f16", "q4"),
             "tiny-q8": ("tiny", "q8")}
QUANTISED_CASES = ("text", "one_image", "two_images")


def make_images():
    rng = np.random.default_rng(99)
    specs = {"upscale_50x70": (50, 70), "landscape_200x300": (200, 300), "tall_600x40": (600, 40),
             "square_64": (64, 64), "wide_20x1000": (20, 1000), "photo_240x320": (240, 320)}
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, (h, w) in specs.items():
        base = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        img = Image.fromarray(base)
        draw = ImageDraw.Draw(img)
        for _ in range(4):
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            draw.ellipse([x0, y0, x0 + w // 3, y0 + h // 3], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
        img.save(IMAGES / f"{name}.png")
    return {name: IMAGES / f"{name}.png" for name in specs}


def conversations(images):
    img = lambda name: {"type": "image", "image": f"../images/{name}.png"}
    return {
        "text": [{"role": "user", "content": "Hello! Tell me about yourself."}],
        "one_image": [{"role": "user", "content": [img("upscale_50x70"), {"type": "text", "text": "What is in this picture?"}]}],
        "two_images": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [img("landscape_200x300"), img("tall_600x40"),
                                                    {"type": "text", "text": "Compare the two images."}]}],
        "multi_turn": [{"role": "user", "content": [img("square_64"), {"type": "text", "text": "Colour?"}]},
                       {"role": "assistant", "content": "Mostly grey."},
                       {"role": "user", "content": [{"type": "text", "text": "And this one?"}, img("wide_20x1000")]}],
        "photo": [{"role": "user", "content": [img("photo_240x320"), {"type": "text", "text": "Describe it in detail."}]}],
    }


def build_model(qvl, work, name, recipe):
    cfg, dtype, shard, seed = recipe
    cfg_path = GOLDEN / f"{name}.config.json"
    cfg_path.write_text(json.dumps(cfg, indent=1) + "\n")
    out = work / name
    args = [str(qvl), "make-random-model", "--config", str(cfg_path), "--out", str(out), "--dtype", dtype, "--seed",
            str(seed), "--min-pixels", str(MIN_PIXELS), "--max-pixels", str(MAX_PIXELS), "--overwrite"]
    if shard:
        args += ["--shard-size-mb", str(shard)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.safetensors"))}
    return out, {"name": name, "dtype": dtype, "seed": seed, "shard_size_mb": shard, "min_pixels": MIN_PIXELS,
                 "max_pixels": MAX_PIXELS, "sha256": digests}


def build_quantised(qvl, work, name, base, weights):
    packed, reference = work / name, work / (name + "-reference")
    subprocess.run([str(qvl), "quantize", "--model", str(work / base), "--weights", weights, "--out", str(packed),
                    "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(qvl), "quantize", "--model", str(packed), "--dequantize-to", str(reference), "--overwrite"],
                   check=True, stdout=subprocess.DEVNULL)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(packed.glob("*.safetensors"))}
    return reference, {"name": name, "from": base, "weights": weights, "sha256": digests}


def processor_for(path):
    from transformers import AutoTokenizer, Qwen2VLImageProcessorFast, Qwen3VLProcessor, Qwen3VLVideoProcessor
    tok = AutoTokenizer.from_pretrained(str(path))
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessorFast(size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
                                                  patch_size=16, temporal_patch_size=2, merge_size=2,
                                                  image_mean=[0.5] * 3, image_std=[0.5] * 3),
        video_processor=Qwen3VLVideoProcessor(), tokenizer=tok, chat_template=TEMPLATE)


def run_cases(path, model_name, case_names, weights=None):
    from transformers import Qwen3VLForConditionalGeneration
    model = Qwen3VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager").eval()
    processor = processor_for(path)
    cases = []
    for case_name, messages in conversations(None).items():
        if case_name not in case_names:
            continue
        case = f"{model_name}.{case_name}"
        out, tensors = run_case(model, processor, case, messages, model_name)
        if weights:
            out["weights"] = weights
        (GOLDEN / f"{case}.json").write_text(json.dumps(out, ensure_ascii=False) + "\n")
        save_file(tensors, str(GOLDEN / f"{case}.safetensors"))
        cases.append(case)
        print(case, "tokens", len(out["prompt_token_ids"]), "greedy", out["greedy_token_ids"][:5], "min margin",
              round(min(out["greedy_margins"]), 4))
    return cases


def run_case(model, processor, name, messages, model_name):
    from transformers.image_utils import load_image
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    paths = [c["image"] for m in messages if isinstance(m["content"], list) for c in m["content"] if c.get("type") == "image"]
    images = [load_image(str((GOLDEN / p).resolve())) for p in paths] or None
    batch = processor(text=[text], images=images, return_tensors="pt")
    out = {"model": model_name, "case": name, "messages": messages, "prompt_token_ids": batch["input_ids"][0].tolist()}
    tensors = {}
    with torch.no_grad():
        if images:
            grid = batch["image_grid_thw"]
            out["image_grid_thw"] = grid.tolist()
            pv = batch["pixel_values"].float()
            u8 = torch.round(pv * 127.5 + 127.5)
            assert torch.equal((u8 - 127.5) / 127.5, pv), "pixel_values are not (u8 - 127.5) / 127.5"
            frames = u8.view(pv.shape[0], 3, 2, 16 * 16)
            assert torch.equal(frames[:, :, 0], frames[:, :, 1]), "the two temporal frames differ"
            tensors["pixel_u8"] = frames[:, :, 0].reshape(pv.shape[0], -1).to(torch.uint8).contiguous()
            vis = model.model.visual(batch["pixel_values"].float(), grid_thw=grid)
            tensors["image_embeds"] = vis.pooler_output.float().contiguous()
            for i, ds in enumerate(vis.deepstack_features):
                tensors[f"deepstack_{i}"] = ds.float().contiguous()
        else:
            out["image_grid_thw"] = []
        kwargs = {k: v for k, v in batch.items() if k in ("mm_token_type_ids",)}
        pos, delta = model.model.get_rope_index(batch["input_ids"], image_grid_thw=batch.get("image_grid_thw"),
                                                attention_mask=batch["attention_mask"], **kwargs)
        out["position_ids"] = pos[:, 0, :].tolist()
        out["rope_delta"] = int(delta.flatten()[0])
        logits = model(**batch).logits[0, -1].float()
        tensors["logits_strided"] = logits[::LOGIT_STRIDE].contiguous()
        top = torch.topk(logits, 20)
        out["first_step_top"] = [[int(i), float(v)] for v, i in zip(top.values, top.indices)]
        gen = model.generate(**batch, do_sample=False, max_new_tokens=10, output_scores=True, return_dict_in_generate=True,
                             temperature=None, top_p=None, top_k=None)
        out["greedy_token_ids"] = gen.sequences[0, batch["input_ids"].shape[1]:].tolist()
        margins = []
        for s in gen.scores:
            t2 = torch.topk(s[0].float(), 2).values
            margins.append(float(t2[0] - t2[1]))
        out["greedy_margins"] = margins
    return out, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qvl", required=True)
    ap.add_argument("--work", default="/tmp/qvl-golden-models")
    ap.add_argument("--only-quantised", action="store_true")
    args = ap.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    make_images()
    old = json.loads((GOLDEN / "recipes.json").read_text()) if args.only_quantised else None
    recipes, cases = [], []
    for name, recipe in MODELS.items():
        path, meta = build_model(args.qvl, work, name, recipe)
        if old:  # the float goldens stay: their models must be the bytes they were made from
            recorded = next(m for m in old["models"] if m["name"] == name)
            assert recorded["sha256"] == meta["sha256"], f"{name}: the generator changed; regenerate every golden"
            continue
        recipes.append(meta)
        wanted = [c for c in conversations(None) if name == "tiny" or c != "photo"]
        cases += run_cases(path, name, wanted)
    if old:
        recipes = [m for m in old["models"] if "from" not in m]
        cases = [c for c in old["cases"] if c.split(".")[0] not in QUANTISED]
    for name, (base, weights) in QUANTISED.items():
        reference, meta = build_quantised(args.qvl, work, name, base, weights)
        meta.update({"transformers": transformers.__version__, "torch": torch.__version__})
        recipes.append(meta)
        cases += run_cases(reference, name, QUANTISED_CASES, weights)
    versions = old or {"transformers": transformers.__version__, "torch": torch.__version__}  # the float goldens'
    (GOLDEN / "recipes.json").write_text(json.dumps({"transformers": versions["transformers"], "torch": versions["torch"],
                                                      "logit_stride": LOGIT_STRIDE,
                                                      "models": recipes, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
