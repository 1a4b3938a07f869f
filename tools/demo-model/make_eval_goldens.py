#!/usr/bin/env python3
"""The demo model's held-out evaluation, answered by transformers (fp32, eager attention, CPU), and the bundled
sample pictures.

Writes
  tests/golden/demo-eval/scene_NNN.png   the 80 held-out pictures (never drawn in training: another seed stream)
  tests/golden/demo-eval/items.json      240 questions (a quarter with one earlier turn), the true answer, the
                                          answer transformers gives, and its accuracy by kind
  resources/samples/scene-N.png          pictures shipped with the app, with the answers to the demo question

usage: python3 tools/demo-model/make_eval_goldens.py [--model resources/models/demo-shapes]
"""
import argparse
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import common  # noqa: E402
import scenes  # noqa: E402

OUT = common.ROOT / "tests" / "golden" / "demo-eval"
SAMPLES = common.ROOT / "resources" / "samples"
DEMO_QUESTION = "What shapes do you see?"


def load_model(folder):
    """transformers' model from the folder, with the tokenizer files the build adds to it."""
    from transformers import Qwen3VLForConditionalGeneration
    work = pathlib.Path(tempfile.mkdtemp())
    for f in pathlib.Path(folder).iterdir():
        shutil.copy(f, work / f.name)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(common.TOKENIZER_DIR / name, work / name)
    return Qwen3VLForConditionalGeneration.from_pretrained(str(work), dtype=torch.float32,
                                                           attn_implementation="eager").eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(common.ROOT / "resources" / "models" / "demo-shapes"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    model, processor = load_model(args.model), common.make_processor()
    OUT.mkdir(parents=True, exist_ok=True)
    items = common.eval_items()
    answers, records = [], []
    for item in items:
        image = f"scene_{item['scene_index']:03d}.png"
        picture = scenes.draw(item["scene"])
        picture.save(OUT / image)  # several items share a picture; the bytes are the same each time
        a = common.answer(model, processor, common.item_messages(item), picture, "cpu")
        answers.append(a)
        records.append({"image": image, "kind": item["kind"], "history": item["history"], "question": item["question"],
                        "truth": item["truth"], "transformers": a})
    overall, kinds = common.accuracy_by_kind(items, answers)
    shards = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in sorted(pathlib.Path(args.model).glob("*.safetensors"))}
    (OUT / "items.json").write_text(json.dumps(
        {"model_sha256": shards, "transformers": transformers.__version__, "torch": torch.__version__,
         "dtype": "float32", "attention": "eager", "max_new_tokens": 48, "transformers_accuracy": overall,
         "transformers_accuracy_by_kind": kinds, "items": records}, indent=1) + "\n")
    print(f"transformers: {overall:.4f} exact match over {len(items)} items; by kind {kinds}")

    # Sample pictures: the first scenes of their own seed stream with two or three shapes.
    samples, i = [], 0
    while len(samples) < 3:
        rng = np.random.default_rng([0x5A3B1E, i])
        i += 1
        scene = scenes.random_scene(rng)
        if len(scene["shapes"]) not in (2, 3) or scene["noise"] > 0:
            continue
        picture = scenes.draw(scene)
        name = f"scene-{len(samples) + 1}.png"
        picture.save(SAMPLES / name)
        a = common.answer(model, processor, common.item_messages({"history": [], "question": DEMO_QUESTION}),
                          picture, "cpu")
        samples.append({"image": name, "question": DEMO_QUESTION, "truth": scenes.describe(scene), "transformers": a})
        print(name, "truth:", scenes.describe(scene), "| transformers:", a)
    (SAMPLES / "answers.json").write_text(json.dumps(samples, indent=1) + "\n")


if __name__ == "__main__":
    main()
