#!/usr/bin/env python3
"""Writes tests/golden/images/decode/: small images in the pixel formats users have (grey, grey+alpha, RGBA,
palette, 16-bit grey, BMP, CMYK JPEG, an EXIF-rotated JPEG) and, in expected.safetensors, the RGB array transformers'
load_image makes of each (PIL: exif_transpose, then convert("RGB"), which drops alpha and clips 16-bit samples)."""
import pathlib

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers.image_utils import load_image

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden" / "images" / "decode"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    h, w = 24, 40
    images = {
        "gray8.png": Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L"),
        "gray_alpha.png": Image.fromarray(rng.integers(0, 256, (h, w, 2), dtype=np.uint8), "LA"),
        "rgba.png": Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA"),
        "palette.png": Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").quantize(16),
        "gray16.png": Image.fromarray(rng.integers(0, 600, (h, w), dtype=np.uint16)),
        "rgb.bmp": Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB"),
    }
    for name, im in images.items():
        im.save(OUT / name)
    # CMYK JPEG (as print workflows save them): PIL converts CMYK to RGB multiplicatively.
    Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "CMYK").save(OUT / "cmyk.jpg", quality=95)
    # EXIF orientation 6 (rotate 90° clockwise to display): the stored 24x40 picture must come out 40x24.
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").save(OUT / "exif_rotate90.jpg", exif=exif, quality=95)
    expected = {}
    for path in sorted(OUT.glob("*")):
        if path.suffix in (".png", ".jpg", ".bmp"):
            expected[path.name] = torch.from_numpy(np.asarray(load_image(str(path))).copy())
    save_file(expected, str(OUT / "expected.safetensors"))
    for k, v in expected.items():
        print(k, tuple(v.shape))


if __name__ == "__main__":
    main()
