#!/usr/bin/env python3
"""Trains the qvl demo model from scratch: the real Qwen3-VL architecture and tokenizer, small, on synthetic scenes.

Runs on the GPU machine (about 10 minutes on an H100) or, for a smoke test, on the CPU. Seeded: the same seed,
steps, batch and worker count give the same model. Writes a Hugging Face folder (bf16 safetensors in shards of at
most 15 MB, config, generation and preprocessor configs, tokenizer) and a training log with the held-out accuracy.

usage: train.py --out DIR [--steps N] [--batch N] [--workers N] [--seed N] [--eval-scenes N]
"""
import argparse
import json
import math
import os
import pathlib
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import common  # noqa: E402
import scenes  # noqa: E402

SHARD_LIMIT = 15_000_000


class SceneStream(torch.utils.data.IterableDataset):
    """Endless training batches; worker w draws from the seed stream [seed, w, step]."""

    def __init__(self, seed, batch):
        self.seed, self.batch = seed, batch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = info.id if info else 0
        processor = common.make_processor()
        rope_index = position_ids_function()
        for step in range(1 << 40):
            rng = np.random.default_rng([self.seed, worker, step])
            examples, shape_targets, colour_targets, cell_targets = [], [], [], []
            for _ in range(self.batch):
                scene = scenes.random_scene(rng)
                # Several questions per picture: more answers to learn from per pass of the vision tower.
                turns = int(rng.integers(1, 7))
                picture, labels = scenes.draw(scene, with_labels=True)
                example = common.encode_for_training(processor, scenes.conversation(scene, rng, turns), picture)
                _, rows, cols = (int(v) // m for v, m in zip(example["image_grid_thw"][0], (1, 2, 2)))
                shapes, colours, cells = scenes.token_targets(labels, rows, cols)
                examples.append(example)
                shape_targets.append(torch.from_numpy(shapes))
                colour_targets.append(torch.from_numpy(colours))
                cell_targets.append(torch.from_numpy(cells))
            batch = common.collate(examples)
            batch["position_ids"] = rope_index(batch)
            batch["shape_targets"] = torch.cat(shape_targets)
            batch["colour_targets"] = torch.cat(colour_targets)
            batch["cell_targets"] = torch.cat(cell_targets)
            yield batch


def position_ids_function():
    """transformers' own M-RoPE position ids, computed here in the data workers on the CPU: inside the forward pass
    it is a per-sample Python loop over GPU tensors that cost more than the step's kernels."""
    import inspect
    from transformers import Qwen3VLConfig, Qwen3VLModel
    model = Qwen3VLModel(Qwen3VLConfig(**common.CONFIG))
    accepted = inspect.signature(model.get_rope_index).parameters

    def rope_index(batch):
        kwargs = {k: batch[k] for k in ("image_grid_thw", "attention_mask", "mm_token_type_ids") if k in accepted}
        return model.get_rope_index(batch["input_ids"], **kwargs)[0]
    return rope_index


def batched_vision_attention(self, hidden_states, cu_seqlens, rotary_pos_emb=None, position_embeddings=None,
                             **kwargs):
    """Qwen3VLVisionAttention.forward for training: the same block-diagonal attention, but the images are padded
    into one batch for a single SDPA call (transformers' non-flash path makes one call per image, which made the
    per-step launch overhead grow with the batch). Padded keys are masked; padded queries are dropped."""
    from transformers.models.qwen3_vl import modeling_qwen3_vl as m
    n = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(n, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = m.apply_rotary_pos_emb_vision(q, k, cos, sin)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    images, longest = len(lengths), int(lengths.max())
    # Row of each patch in the padded [images * longest] layout: one scatter in, one gather out (pad_sequence's
    # per-image copies cost 2,300 autograd nodes a step at batch 128).
    image_of = torch.repeat_interleave(torch.arange(images, device=q.device), lengths)
    slot = image_of * longest + torch.arange(n, device=q.device) - torch.repeat_interleave(cu_seqlens[:-1], lengths)

    def pad(t):
        return t.new_zeros(images * longest, *t.shape[1:]).index_copy(0, slot, t).view(
            images, longest, *t.shape[1:]).transpose(1, 2)
    valid = torch.arange(longest, device=q.device)[None, :] < lengths[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=valid[:, None, None, :],
                                                         scale=self.scaling)
    return self.proj(out.transpose(1, 2).reshape(images * longest, -1)[slot])


class TokenProbe(torch.nn.Module):
    """Training-only linear heads on the merged image tokens (what the text model reads): which shape and which colour
    each token covers, and which grid cell it is in. The answers alone teach shapes slowly (the first model got
    colours and places of 102/107 objects right but shapes of only 61/107); these dense targets supervise the vision
    tower directly, and the cell puts the place into the token a "where is the X" answer reads. The heads are not
    part of the saved model."""

    def __init__(self, model):
        super().__init__()
        width = model.config.vision_config.out_hidden_size
        self.shape = torch.nn.Linear(width, 1 + len(scenes.SHAPES))
        self.colour = torch.nn.Linear(width, 1 + len(scenes.COLOURS))
        self.cell = torch.nn.Linear(width, 9)
        self.tokens = None
        model.model.visual.merger.register_forward_hook(lambda module, args, out: setattr(self, "tokens", out))

    def loss(self, shape_targets, colour_targets, cell_targets):
        tokens = self.tokens.float()

        def soft_cross_entropy(logits, targets):
            return -(targets * torch.log_softmax(logits, -1)).sum(-1).mean()
        return soft_cross_entropy(self.shape(tokens), shape_targets) + \
            soft_cross_entropy(self.colour(tokens), colour_targets) + \
            torch.nn.functional.cross_entropy(self.cell(tokens), cell_targets)


def training_loss(model, probe, batch):
    """Cross-entropy on the answer tokens only (the 151,936-wide head runs on those rows, not on every position), and
    the token probe's loss."""
    labels = batch.pop("labels")
    probe_targets = [batch.pop(k) for k in ("shape_targets", "colour_targets", "cell_targets")]
    hidden = model.model(**batch).last_hidden_state
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[:, :-1][keep]).float()
    return torch.nn.functional.cross_entropy(logits, targets[keep]), probe.loss(*probe_targets)


def profile_steps(model, probe, opt, batches, device):
    """Where a step's time goes (5 steps, CPU and CUDA time per op), printed once for the record."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                answer, probed = training_loss(model, probe, batch)
            opt.zero_grad(set_to_none=True)
            (answer + probed).backward()
            opt.step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25), flush=True)


def learning_rate(step, progress, peak, warmup):
    """Linear warm-up, then cosine to a tenth; progress runs 0..1 (steps done, or time used if that is further)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save(model, out):
    out = pathlib.Path(out)
    if out.exists():
        shutil.rmtree(out)
    model.to(torch.bfloat16).save_pretrained(str(out), max_shard_size="14MB")
    common.write_folder_configs(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(common.TOKENIZER_DIR / name, out / name)
    sizes = {p.name: p.stat().st_size for p in out.glob("*.safetensors")}
    assert all(s <= SHARD_LIMIT for s in sizes.values()), f"a shard is over 15 MB: {sizes}"
    return sizes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--eval-scenes", type=int, default=80)
    ap.add_argument("--log", default=None)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--probe-weight", type=float, default=1.0, help="weight of the per-token shape/colour loss")
    ap.add_argument("--max-minutes", type=float, default=8.5)
    args = ap.parse_args()

    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**common.CONFIG)).to(device)
    model.config._attn_implementation = "sdpa"
    from transformers.models.qwen3_vl import modeling_qwen3_vl
    plain_vision_attention = modeling_qwen3_vl.Qwen3VLVisionAttention.forward
    modeling_qwen3_vl.Qwen3VLVisionAttention.forward = batched_vision_attention
    params = sum(p.numel() for p in model.parameters())
    probe = TokenProbe(model).to(device)
    trained = list(model.parameters()) + list(probe.parameters())
    decay = [p for p in trained if p.dim() >= 2]
    no_decay = [p for p in trained if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=device == "cuda")
    loader = torch.utils.data.DataLoader(SceneStream(args.seed, args.batch), batch_size=None,
                                         num_workers=args.workers, prefetch_factor=4 if args.workers else None,
                                         persistent_workers=bool(args.workers))
    log = {"config": common.CONFIG, "params": params, "args": vars(args), "device": device,
           "torch": torch.__version__, "losses": []}
    print(f"{params / 1e6:.2f}M parameters on {device}; {args.steps} steps of {args.batch}", flush=True)
    model.train()
    start = time.time()
    window, probe_window, waited = [], [], 0.0
    batches = iter(loader)
    step = 0
    while True:
        progress = max(step / args.steps, (time.time() - start) / (60 * args.max_minutes))
        if progress >= 1:
            break
        t = time.time()
        batch = next(batches)
        waited += time.time() - t
        for g in opt.param_groups:
            g["lr"] = learning_rate(step, progress, args.lr, warmup=min(300, args.steps // 10 + 1))
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            answer, probed = training_loss(model, probe, batch)
        opt.zero_grad(set_to_none=True)
        (answer + args.probe_weight * probed).backward()
        norm = torch.nn.utils.clip_grad_norm_(trained, 1.0)
        if torch.isfinite(norm):
            opt.step()
            window.append(answer.item())
            probe_window.append(probed.item())
        else:  # a bf16 overflow: drop this batch rather than poison the weights
            log["skipped_steps"] = log.get("skipped_steps", 0) + 1
        step += 1
        if args.profile and step == 60:
            profile_steps(model, probe, opt, batches, device)
        if step % 100 == 0:
            elapsed = time.time() - start
            mean = sum(window) / max(1, len(window))
            probe_mean = sum(probe_window) / max(1, len(probe_window))
            window, probe_window = [], []
            log["losses"].append([step, round(mean, 5), round(elapsed, 1)])
            log.setdefault("probe_losses", []).append([step, round(probe_mean, 5)])
            print(f"step {step} loss {mean:.4f} probe {probe_mean:.4f} {elapsed:.0f}s {step * args.batch / elapsed:.0f} examples/s, "
                  f"{waited:.0f}s waiting for data, {log.get('skipped_steps', 0)} skipped", flush=True)
    log["train_seconds"] = round(time.time() - start, 1)
    log["steps_done"] = step
    log["stopped_by"] = "steps" if step == args.steps else "time (the schedule followed the clock)"

    modeling_qwen3_vl.Qwen3VLVisionAttention.forward = plain_vision_attention  # evaluate as transformers runs
    model.eval()
    processor = common.make_processor()
    items = common.eval_items(args.eval_scenes)
    t = time.time()
    answers = [common.answer(model, processor, common.item_messages(it), scenes.draw(it["scene"]), device)
               for it in items]
    overall, kinds = common.accuracy_by_kind(items, answers)
    log.update({"eval_items": len(items), "eval_accuracy": overall, "eval_by_kind": kinds,
                "eval_seconds": round(time.time() - t, 1),
                "eval_wrong": [[it["question"], it["truth"], a] for it, a in zip(items, answers) if a != it["truth"]][:40]})
    print(f"held-out accuracy {overall:.4f} over {len(items)} items: {kinds}", flush=True)
    log["shards"] = save(model, args.out)
    text = json.dumps(log, indent=1)
    (pathlib.Path(args.out) / "training_log.json").write_text(text + "\n")
    if args.log:
        pathlib.Path(args.log).write_text(text + "\n")


if __name__ == "__main__":
    main()
