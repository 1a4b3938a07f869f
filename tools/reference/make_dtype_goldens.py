#!/usr/bin/env python3
"""Writes tests/golden/dtype/conversions.json: f32 bit patterns and what PyTorch rounds them to in bf16 and f16.

The C++ conversions (engine/core/half.h) must agree bit for bit. Inputs cover ties, subnormals, overflow
boundaries, NaN/inf and random values over the whole exponent range."""
import json
import pathlib
import struct

import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden" / "dtype" / "conversions.json"


def f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def main():
    rng = np.random.default_rng(1234)
    special = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e-8, 6.0e-8, 5.96e-8, 2.98e-8, 2.99e-8,
               6.1035156e-05, 6.097555e-05, 3.0e38, 3.4028235e38, float("inf"), float("-inf"), float("nan")]
    bits = list(f32_bits(special))
    # Exact ties for bf16 (low 16 bits = 0x8000) and f16 (low 13 bits = 0x1000), odd and even.
    for b in rng.integers(0x3F000000, 0x47000000, 200, dtype=np.uint32):
        bits.append((int(b) & 0xFFFF0000) | 0x8000)
        bits.append((int(b) & 0xFFFFE000) | 0x1000)
    # f16 subnormal range and random magnitudes over the whole f32 range.
    bits += list(f32_bits(rng.uniform(-6.2e-5, 6.2e-5, 400)))
    bits += list(rng.integers(0, 0xFFFFFFFF, 1200, dtype=np.uint32))
    bits = np.array([int(b) for b in bits], dtype=np.uint32)
    x = torch.from_numpy(bits.view(np.float32).copy())
    bf16 = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    f16 = x.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    cases = [[int(b), int(h), int(g)] for b, h, g in zip(bits, bf16, f16)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"torch": torch.__version__, "columns": ["f32_bits", "bf16_bits", "f16_bits"],
                               "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
