#!/usr/bin/env python3
"""Draws the PNG icons (48, 128, 256 px) with the shapes of qvl-studio.svg: PIL has no SVG renderer, so the same
shapes are drawn at 1024 px and downsampled. Run from the repository root; the PNGs are committed."""
from PIL import Image, ImageDraw


def quad(p0, p1, p2, steps=100):
    return [((1 - t) ** 2 * p0[0] + 2 * (1 - t) * t * p1[0] + t * t * p2[0],
             (1 - t) ** 2 * p0[1] + 2 * (1 - t) * t * p1[1] + t * t * p2[1]) for t in (i / steps for i in range(steps + 1))]


def draw(size):
    big = 1024
    k = big / 256
    im = Image.new('RGBA', (big, big), (0, 0, 0, 0))
    d = ImageDraw.Draw(im)
    s = lambda pts: [(x * k, y * k) for x, y in pts]
    d.rounded_rectangle([8 * k, 8 * k, 248 * k, 248 * k], radius=48 * k, fill='#1f2a44')
    d.polygon(s(quad((28, 128), (128, 40), (228, 128)) + quad((228, 128), (128, 216), (28, 128))), fill='#e8eefc')
    d.ellipse([82 * k, 82 * k, 174 * k, 174 * k], fill='#4f7cff')
    d.ellipse([108 * k, 108 * k, 148 * k, 148 * k], fill='#1f2a44')
    d.rounded_rectangle([150 * k, 172 * k, 228 * k, 224 * k], radius=12 * k, fill='#ffb84d')
    d.polygon(s([(164, 224), (160, 242), (182, 224)]), fill='#ffb84d')
    im.resize((size, size), Image.LANCZOS).save(f'packaging/icons/qvl-studio-{size}.png', optimize=True)


for size in (48, 128, 256):
    draw(size)
