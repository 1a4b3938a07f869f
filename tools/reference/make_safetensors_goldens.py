#!/usr/bin/env python3
"""Writes tests/golden/safetensors/: a file made by the reference `safetensors` library (torch tensors of several
dtypes, one empty, with metadata) and a JSON listing what it holds, so the C++ reader is checked against the
reference writer rather than only against our own writer."""
import json
import pathlib

import torch
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden" / "safetensors"


def main():
    torch.manual_seed(7)
    tensors = {
        "a.f32": torch.randn(3, 5),
        "b.bf16": torch.randn(4, 2).to(torch.bfloat16),
        "c.f16": torch.randn(7).to(torch.float16),
        "d.i64": torch.arange(-3, 3, dtype=torch.int64).reshape(2, 3),
        "e.empty": torch.zeros(0, 4),
        "f.scalar": torch.tensor(2.5),
        "g.u8": torch.tensor([0, 1, 254, 255], dtype=torch.uint8),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT / "reference.safetensors"), metadata={"format": "pt", "made_by": "safetensors"})
    expected = {
        name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
               "values": t.to(torch.float64).flatten().tolist()}
        for name, t in tensors.items()
    }
    (OUT / "reference.json").write_text(json.dumps(expected, indent=1) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
