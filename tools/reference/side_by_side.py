#!/usr/bin/env python3
"""qvl and Hugging Face transformers on the same checkpoint, the same prompts and token counts, in one run, one table.

Three scenarios, as issue 6 states its targets:
  decode   a text prompt of --prompt-tokens tokens, then --decode-tokens generated tokens (ms per token)
  prefill  a text prompt of --prefill-tokens tokens (time of the forward pass that yields the first token)
  image    an --image-size square picture plus 40 text tokens: vision encode and time to first token
qvl runs through `qvl bench --json` (medians after a warm-up); transformers runs in bf16 with SDPA attention and
its dynamic cache, eager (no torch.compile), timed with CUDA synchronisation, medians of --repeat runs after one
warm-up. transformers' decode time is (time of generate(D+1) - time of generate(1)) / D. The prompts are built
the same way on both sides (" hello" repeated inside the chat template); the table prints both token counts.

usage: side_by_side.py --qvl build/gpu-headless/app/qvl [--model DIR | --preset qwen3-vl-2b] [--device cuda]
                       [--prompt-tokens 256] [--decode-tokens 64] [--prefill-tokens 512] [--image-size 448]
                       [--repeat 5] [--json-out FILE]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np
import torch


def qvl_bench(args, model, device, prompt_tokens, decode_tokens, image_size=0):
    cmd = [args.qvl, "bench", "--model", str(model), "--device", device, "--prompt-tokens", str(prompt_tokens),
           "--decode-tokens", str(decode_tokens), "--repeat", str(args.repeat), "--json"]
    if image_size:
        cmd += ["--image-size", str(image_size)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{run.stderr}")
    return json.loads(run.stdout)


class Transformers:
    def __init__(self, model_dir, device):
        from transformers import AutoProcessor, Qwen3VLForConditionalGeneration
        self.device = device
        self.model = Qwen3VLForConditionalGeneration.from_pretrained(
            str(model_dir), dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
        self.processor = AutoProcessor.from_pretrained(str(model_dir))
        self.processor.chat_template = (pathlib.Path(__file__).parent / "qwen3_vl_chat_template.jinja").read_text()

    def inputs(self, prompt_tokens, image_size=0):
        """The bench prompt: " hello" x (tokens - 8) in the chat template (8 template tokens), optional image."""
        text = " hello" * max(1, prompt_tokens - 8)
        content = ([{"type": "image"}] if image_size else []) + [{"type": "text", "text": text}]
        prompt = self.processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                    add_generation_prompt=True)
        images = None
        if image_size:
            rng = np.random.default_rng(0)
            from PIL import Image
            images = [Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8))]
        return prompt, images

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def timed(self, fn, repeat):
        fn()  # warm-up
        times = []
        for _ in range(repeat):
            self.sync()
            t = time.perf_counter()
            fn()
            self.sync()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)

    @torch.no_grad()
    def generate_ms(self, prompt, images, new_tokens, repeat, preprocess=False):
        batch = self.processor(text=[prompt], images=images, return_tensors="pt").to(self.device)

        def run():
            b = self.processor(text=[prompt], images=images, return_tensors="pt").to(self.device) if preprocess else batch
            self.model.generate(**b, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                temperature=None, top_p=None, top_k=None)
        return self.timed(run, repeat), int(batch["input_ids"].shape[1])

    @torch.no_grad()
    def vision_ms(self, prompt, images, repeat):
        batch = self.processor(text=[prompt], images=images, return_tensors="pt").to(self.device)
        pixels, grid = batch["pixel_values"].to(torch.bfloat16), batch["image_grid_thw"]
        return self.timed(lambda: self.model.model.visual(pixels, grid_thw=grid), repeat)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qvl", required=True)
    ap.add_argument("--model")
    ap.add_argument("--preset", default="qwen3-vl-2b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--image-size", type=int, default=448)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    model = pathlib.Path(args.model) if args.model else pathlib.Path(f"/tmp/qvl-side-by-side/{args.preset}")
    if not args.model and not (model / "config.json").exists():
        subprocess.run([args.qvl, "make-random-model", "--preset", args.preset, "--out", str(model), "--overwrite"],
                       check=True, stdout=subprocess.DEVNULL)

    q_decode = qvl_bench(args, model, args.device, args.prompt_tokens, args.decode_tokens)
    q_prefill = qvl_bench(args, model, args.device, args.prefill_tokens, 2)  # bench needs two tokens to time decode
    q_image = qvl_bench(args, model, args.device, 40, 2, args.image_size)

    hf = Transformers(model, args.device)
    prompt, _ = hf.inputs(args.prompt_tokens)
    one, t_decode_prompt = hf.generate_ms(prompt, None, 1, args.repeat)
    many, _ = hf.generate_ms(prompt, None, args.decode_tokens + 1, args.repeat)
    prompt_p, _ = hf.inputs(args.prefill_tokens)
    prefill, t_prefill_prompt = hf.generate_ms(prompt_p, None, 1, args.repeat)
    prompt_i, images = hf.inputs(40, args.image_size)
    ttft, t_image_prompt = hf.generate_ms(prompt_i, images, 1, args.repeat, preprocess=True)
    vision = hf.vision_ms(prompt_i, images, args.repeat)
    decode_ms = (many - one) / args.decode_tokens

    rows = [
        ("decode ms/token", f"{args.prompt_tokens}-token prompt", q_decode["decode_ms_per_token"], decode_ms,
         q_decode["prompt_tokens"], t_decode_prompt),
        ("decode tokens/s", "", q_decode["decode_tokens_per_s"], 1e3 / decode_ms, None, None),
        (f"prefill ms ({args.prefill_tokens} tokens)", "to the first token", q_prefill["prefill_ms"], prefill,
         q_prefill["prompt_tokens"], t_prefill_prompt),
        (f"vision encode ms ({args.image_size}²)", "", q_image["vision_ms"], vision, None, None),
        (f"time to first token ms ({args.image_size}² + 40)", "incl. preprocessing", q_image["time_to_first_token_ms"],
         ttft, q_image["prompt_tokens"], t_image_prompt),
    ]
    import transformers
    env = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
           "transformers": transformers.__version__, "model": str(model), "repeat": args.repeat,
           "qvl_backend": q_decode["backend"], "qvl_fusions": q_decode["fusions"],
           "qvl_roofline": q_decode["roofline"]}
    print(f"qvl vs transformers (bf16, sdpa, eager) on {env['device']}; torch {env['torch']}, "
          f"transformers {env['transformers']}; medians of {args.repeat} after a warm-up")
    print(f"{'':40s} {'qvl':>10s} {'transformers':>13s} {'qvl speed-up':>13s}   prompt tokens (qvl / hf)")
    for name, note, q, h, qt, ht in rows:
        speed = (q / h if "tokens/s" in name else h / q) if q and h else float("nan")
        tokens = f"{qt} / {ht}" if qt is not None else ""
        print(f"{name:40s} {q:10.2f} {h:13.2f} {speed:12.2f}x   {tokens} {note}")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(
            {"env": env, "rows": [dict(zip(("metric", "note", "qvl", "transformers", "qvl_prompt_tokens",
                                            "transformers_prompt_tokens"), r)) for r in rows],
             "qvl": {"decode": q_decode, "prefill": q_prefill, "image": q_image}}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
