"""Synthetic scenes and questions about them, for training and evaluating the qvl demo model.

A scene is 1-4 shapes (circle, square, triangle, star), each in its own cell of a 3x3 grid over the picture (so "at the top left" is never
ambiguous), drawn in one of six colours at a random size and offset inside its cell, on a plain or noisy neutral
background, at a random picture size and aspect ratio (so the engine's resize and odd patch grids are exercised).
Every question is answered from the scene description alone; the answers are short, fixed-form sentences, so
exact match is the evaluation.
"""
import math

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ["circle", "square", "triangle", "star"]
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 210, 40),
           "purple": (140, 60, 190), "orange": (245, 140, 30)}
BACKGROUNDS = [(245, 245, 245), (200, 200, 200), (120, 120, 120), (40, 40, 40), (235, 225, 205)]
# Cell (row, column) -> the phrase after "is"/"a red circle": reading order is row-major.
PLACES = {(0, 0): "at the top left", (0, 1): "at the top", (0, 2): "at the top right",
          (1, 0): "on the left", (1, 1): "in the center", (1, 2): "on the right",
          (2, 0): "at the bottom left", (2, 1): "at the bottom", (2, 2): "at the bottom right"}
NUMBERS = ["None", "One", "Two", "Three", "Four"]


def random_scene(rng):
    """A scene description: picture size, background, and shapes as dicts (shape, colour, cell, box)."""
    aspect = math.exp(rng.uniform(math.log(0.5), math.log(2.0)))
    area = math.exp(rng.uniform(math.log(96 * 96), math.log(480 * 480)))
    width = int(round(min(640, max(64, math.sqrt(area * aspect)))))
    height = int(round(min(640, max(64, math.sqrt(area / aspect)))))
    count = int(rng.integers(1, 5))
    cells = rng.choice(9, size=count, replace=False)
    shapes = []
    for cell in sorted(int(c) for c in cells):
        row, col = divmod(cell, 3)
        cw, ch = width / 3, height / 3
        size = rng.uniform(0.6, 0.95) * min(cw, ch)
        cx = (col + 0.5) * cw + rng.uniform(-0.5, 0.5) * (cw - size)
        cy = (row + 0.5) * ch + rng.uniform(-0.5, 0.5) * (ch - size)
        shapes.append({"shape": SHAPES[int(rng.integers(len(SHAPES)))],
                       "colour": list(COLOURS)[int(rng.integers(len(COLOURS)))],
                       "cell": (row, col), "centre": (cx, cy), "size": size})
    background = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    noise = float(rng.choice([0.0, 0.0, 8.0, 20.0]))
    return {"width": width, "height": height, "background": background, "noise": noise, "shapes": shapes,
            "seed": int(rng.integers(1 << 31))}


def _polygon(kind, cx, cy, r, turn):
    if kind == "triangle":
        angles = [turn - math.pi / 2 + k * 2 * math.pi / 3 for k in range(3)]
        return [(cx + r * math.cos(a), cy + r * math.sin(a)) for a in angles]
    if kind == "star":
        points = []
        for k in range(10):
            a = turn - math.pi / 2 + k * math.pi / 5
            rr = r if k % 2 == 0 else 0.45 * r
            points.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
        return points
    raise ValueError(kind)


def draw(scene, with_labels=False):
    """The scene as an RGB PIL image (deterministic for a given scene). With `with_labels`, also a label map of the
    same size: 0 for background, else 1 + shape index * len(COLOURS) + colour index (training's per-token targets)."""
    rng = np.random.default_rng(scene["seed"])
    w, h = scene["width"], scene["height"]
    base = np.empty((h, w, 3), dtype=np.float32)
    base[:] = scene["background"]
    if scene["noise"] > 0:
        base += rng.normal(0, scene["noise"], size=base.shape)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    pens = [(ImageDraw.Draw(img), False)]  # (pen, draws labels)
    labels = None
    if with_labels:
        labels = Image.new("L", (w, h), 0)
        pens.append((ImageDraw.Draw(labels), True))
    for s in scene["shapes"]:
        colour = tuple(int(np.clip(c + rng.integers(-20, 21), 0, 255)) for c in COLOURS[s["colour"]])
        label = 1 + SHAPES.index(s["shape"]) * len(COLOURS) + list(COLOURS).index(s["colour"])
        (cx, cy), r = s["centre"], s["size"] / 2
        turn = float(rng.uniform(-0.15, 0.15)) if s["shape"] in ("triangle", "star") else 0.0
        for pen, is_label in pens:
            fill = label if is_label else colour
            if s["shape"] == "circle":
                pen.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
            elif s["shape"] == "square":
                q = r * 0.85
                pen.rectangle([cx - q, cy - q, cx + q, cy + q], fill=fill)
            else:
                pen.polygon(_polygon(s["shape"], cx, cy, r, turn), fill=fill)
    return (img, labels) if with_labels else img


def token_targets(labels, rows, cols):
    """What each of rows x cols image tokens covers, as area fractions: [tokens, 1 + shapes] (background first) and
    [tokens, 1 + colours]; and the grid cell (row * 3 + column) its centre lies in, [tokens]. Tokens in row-major
    order like the vision tower's merged tokens."""
    lab = np.asarray(labels).astype(np.int64)
    shape_class = np.where(lab > 0, (lab - 1) // len(COLOURS) + 1, 0)
    colour_class = np.where(lab > 0, (lab - 1) % len(COLOURS) + 1, 0)

    def fractions(classes, n):
        planes = [np.asarray(Image.fromarray((classes == c).astype(np.float32), mode="F").resize((cols, rows),
                                                                                                 Image.BOX))
                  for c in range(n)]
        out = np.stack(planes, -1).reshape(rows * cols, n)
        return out / out.sum(-1, keepdims=True)
    row = np.minimum(2, ((np.arange(rows) + 0.5) * 3 / rows).astype(np.int64))
    col = np.minimum(2, ((np.arange(cols) + 0.5) * 3 / cols).astype(np.int64))
    cells = (row[:, None] * 3 + col[None, :]).reshape(-1)
    return fractions(shape_class, 1 + len(SHAPES)), fractions(colour_class, 1 + len(COLOURS)), cells


def _a(s):
    article = "an" if s["colour"][0] in "aeiou" else "a"
    return f"{article} {s['colour']} {s['shape']}"


def _join(parts):
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def describe(scene):
    text = _join([f"{_a(s)} {PLACES[s['cell']]}" for s in scene["shapes"]])
    return text[0].upper() + text[1:] + "."


def _unique(scene, shape):
    found = [s for s in scene["shapes"] if s["shape"] == shape]
    return found[0] if len(found) == 1 else None


def questions(scene, rng):
    """Every question kind this scene supports, as (kind, question, answer); the caller samples from them."""
    shapes = scene["shapes"]
    out = [("describe", str(rng.choice(["What shapes do you see?", "Describe the picture.",
                                         "What is in this image?"])), describe(scene))]
    # Ask about a shape that is there more often than not, so "None." is not the easy answer.
    shape = shapes[int(rng.integers(len(shapes)))]["shape"] if rng.random() < 0.6 else SHAPES[int(rng.integers(len(SHAPES)))]
    n = sum(s["shape"] == shape for s in shapes)
    out.append(("count", f"How many {shape}s are there?", NUMBERS[n] + "."))
    out.append(("count", "How many shapes are there?", NUMBERS[len(shapes)] + "."))
    uniques = [s for s in shapes if _unique(scene, s["shape"]) is s]
    if uniques:
        s = uniques[int(rng.integers(len(uniques)))]
        out.append(("colour", f"What colour is the {s['shape']}?", s["colour"].capitalize() + "."))
        place = PLACES[s["cell"]]
        out.append(("where", f"Where is the {s['shape']}?", place[0].upper() + place[1:] + "."))
    cell = tuple(int(v) for v in divmod(int(rng.integers(9)), 3))
    at = [s for s in shapes if s["cell"] == cell]
    answer = (_a(at[0])[0].upper() + _a(at[0])[1:] + ".") if at else "Nothing."
    out.append(("what_at", f"What is {PLACES[cell]}?", answer))
    if len(uniques) >= 2:
        i, j = rng.choice(len(uniques), size=2, replace=False)
        a, b = uniques[int(i)], uniques[int(j)]
        if a["cell"][1] != b["cell"][1]:
            out.append(("relation", f"Is the {a['shape']} left of the {b['shape']}?",
                        "Yes." if a["cell"][1] < b["cell"][1] else "No."))
        if a["cell"][0] != b["cell"][0]:
            out.append(("relation", f"Is the {a['shape']} above the {b['shape']}?",
                        "Yes." if a["cell"][0] < b["cell"][0] else "No."))
    return out


# How much more often training asks each kind than the others: "where is the X" and "is the X left of the Y" need
# a shape found and its place read back, which the first models learned last (relation was at chance).
TRAINING_WEIGHT = {"where": 2.0, "relation": 3.0}


def conversation(scene, rng, turns):
    """A chat about the scene: the image in the first user turn, then `turns` question/answer pairs."""
    pool = questions(scene, rng)
    weights = np.array([TRAINING_WEIGHT.get(kind, 1.0) for kind, _, _ in pool])
    picks = rng.choice(len(pool), size=min(turns, len(pool)), replace=False, p=weights / weights.sum())
    messages = []
    for k, p in enumerate(picks):
        kind, q, a = pool[int(p)]
        content = [{"type": "image"}, {"type": "text", "text": q}] if k == 0 else [{"type": "text", "text": q}]
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": a}], "kind": kind})
    return messages
