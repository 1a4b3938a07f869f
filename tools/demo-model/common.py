"""What training, evaluation and the goldens share: the model's shape, the processor, the chat encoding, the
held-out evaluation set and greedy answering with transformers."""
import json
import pathlib

import numpy as np
import torch

import scenes

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKENIZER_DIR = ROOT / "resources" / "tokenizer"
TEMPLATE = (ROOT / "tools" / "reference" / "qwen3_vl_chat_template.jinja").read_text()
# Pictures are resized to 192x192..320x320 pixels' worth (36-100 image tokens): the smallest shape then spans about
# two 16-pixel patches a side (a first run at 128..256 confused stars, diamonds and triangles).
MIN_PIXELS, MAX_PIXELS = 192 * 192, 320 * 320
IM_START, ASSISTANT, NEWLINE, IM_END, PAD = 151644, 77091, 198, 151645, 151643

# The real architecture, small: the tied 151,936 x 48 embedding is 14.6 MB in bf16, so each tensor fits a 15 MB shard.
CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "tie_word_embeddings": True,
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "text_config": {"model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": 48, "intermediate_size": 192,
                    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 5000000.0,
                    "rope_scaling": {"rope_type": "default", "mrope_section": [6, 5, 5], "mrope_interleaved": True},
                    "hidden_act": "silu", "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645,
                    "tie_word_embeddings": True},
    "vision_config": {"model_type": "qwen3_vl", "depth": 6, "hidden_size": 192, "intermediate_size": 768,
                      "num_heads": 6, "in_channels": 3, "patch_size": 16, "temporal_patch_size": 2,
                      "spatial_merge_size": 2, "out_hidden_size": 48, "num_position_embeddings": 2304,
                      "deepstack_visual_indexes": [1, 3, 4], "hidden_act": "gelu_pytorch_tanh"},
}
GENERATION_CONFIG = {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                     "do_sample": False, "repetition_penalty": 1.0, "temperature": 0.7, "top_k": 20, "top_p": 0.8}
PREPROCESSOR_CONFIG = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
                       "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                       "image_processor_type": "Qwen2VLImageProcessorFast", "merge_size": 2, "patch_size": 16,
                       "processor_class": "Qwen3VLProcessor", "resample": 3, "rescale_factor": 1 / 255,
                       "size": {"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS}, "temporal_patch_size": 2}


def make_processor():
    from transformers import AutoTokenizer, Qwen2VLImageProcessorFast, Qwen3VLProcessor, Qwen3VLVideoProcessor
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    image = Qwen2VLImageProcessorFast(size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}, patch_size=16,
                                      temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return Qwen3VLProcessor(image_processor=image, video_processor=Qwen3VLVideoProcessor(), tokenizer=tok,
                            chat_template=TEMPLATE)


def template_messages(messages):
    """The conversation as the chat template takes it (the 'kind' tag dropped)."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def encode_for_training(processor, messages, image):
    """One training example: the processor's tensors plus labels on every assistant answer and its <|im_end|>."""
    text = processor.apply_chat_template(template_messages(messages), tokenize=False)
    batch = processor(text=[text], images=[image], return_tensors="pt")
    ids = batch["input_ids"][0]
    labels = torch.full_like(ids, -100)
    starts = ((ids[:-2] == IM_START) & (ids[1:-1] == ASSISTANT) & (ids[2:] == NEWLINE)).nonzero().flatten().tolist()
    for s in starts:
        k = s + 3
        while ids[k] != IM_END:
            labels[k] = ids[k]
            k += 1
        labels[k] = IM_END
    example = {k: v[0] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v for k, v in batch.items()}
    example["labels"] = labels
    return example


def collate(examples):
    """Right-padded batch; pixel rows and grids concatenated in order, as the model expects."""
    longest = max(len(e["input_ids"]) for e in examples)
    out = {}
    for key, fill in (("input_ids", PAD), ("attention_mask", 0), ("labels", -100), ("mm_token_type_ids", 0)):
        if key in examples[0]:
            out[key] = torch.stack([torch.nn.functional.pad(e[key], (0, longest - len(e[key])), value=fill)
                                    for e in examples])
    out["pixel_values"] = torch.cat([e["pixel_values"] for e in examples])
    out["image_grid_thw"] = torch.cat([e["image_grid_thw"] for e in examples])
    return out


def eval_items(count_scenes=80, questions_per_scene=3):
    """The held-out set: scenes from a seed stream training never draws from (training uses [seed, worker, step]
    triples; these are [0x5EED_E7A1, i] pairs), three questions each, one in four a two-turn follow-up whose first
    answer is the true one."""
    items = []
    for i in range(count_scenes):
        rng = np.random.default_rng([0x5EED_E7A1, i])
        scene = scenes.random_scene(rng)
        pool = scenes.questions(scene, rng)
        picks = rng.choice(len(pool), size=min(questions_per_scene, len(pool)), replace=False)
        for p in picks:
            kind, q, a = pool[int(p)]
            history = []
            if rng.random() < 0.25:
                others = [x for x in pool if x[1] != q]
                _, q0, a0 = others[int(rng.integers(len(others)))]
                history = [{"role": "user", "content": q0}, {"role": "assistant", "content": a0}]
            items.append({"scene_index": i, "scene": scene, "kind": kind, "history": history, "question": q,
                          "truth": a})
    return items


def item_messages(item):
    """The item as chat messages: the picture goes with the first user turn."""
    turns = item["history"] + [{"role": "user", "content": item["question"]}]
    messages = []
    for k, t in enumerate(turns):
        if t["role"] == "user" and k == 0:
            content = [{"type": "image"}, {"type": "text", "text": t["content"]}]
        else:
            content = [{"type": "text", "text": t["content"]}]
        messages.append({"role": t["role"], "content": content})
    return messages


@torch.no_grad()
def answer(model, processor, messages, image, device, max_new_tokens=48):
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], images=[image], return_tensors="pt").to(device)
    out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens, temperature=None, top_p=None,
                         top_k=None)
    return processor.tokenizer.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def accuracy_by_kind(items, answers):
    kinds = {}
    for item, a in zip(items, answers):
        right, total = kinds.get(item["kind"], (0, 0))
        kinds[item["kind"]] = (right + (a == item["truth"]), total + 1)
    overall = sum(a == it["truth"] for it, a in zip(items, answers)) / len(items)
    return overall, {k: round(r / t, 4) for k, (r, t) in sorted(kinds.items())}


def write_folder_configs(folder):
    folder = pathlib.Path(folder)
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    (folder / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n")
