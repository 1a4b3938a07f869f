#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/{encode,decode,chat}.json with Hugging Face's own tokenizer and processor.

encode.json: >300 strings (prose, code, every kind of whitespace, digits, contractions in any case, many scripts,
emoji sequences, combining marks that NFC must compose, special tokens inline and half-written, very long words,
seeded random Unicode) and the ids transformers' Qwen2TokenizerFast gives them.
decode.json: id sequences (round trips, random ids that split multi-byte characters, special tokens) and the text
tokenizer.decode gives, with and without skip_special_tokens.
chat.json: conversations rendered with the Qwen3-VL chat template (qwen3_vl_chat_template.jinja) and tokenised by
Qwen3VLProcessor with real images, so the <|image_pad|> expansion and image_grid_thw are the processor's own.

Run from anywhere: python3 tools/reference/make_tokenizer_goldens.py"""
import json
import pathlib
import random

import tokenizers
import transformers
from PIL import Image
from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "tokenizer"
TEMPLATE = (pathlib.Path(__file__).parent / "qwen3_vl_chat_template.jinja").read_text()


def encode_strings():
    s = []
    s += [
        "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "It was the best of times, it was the worst of times.", "A man, a plan, a canal: Panama",
        "Describe this image.", "What shapes do you see?", "How many triangles are there?",
        "Is the circle left of the square?", "Yes.", "No!", "e.g. i.e. etc. vs. Mr. Mrs. Dr.",
        "Dear Sir/Madam,\n\nI am writing to...\n\nRegards,\nMe", "hello", "HELLO", "Hello", "hElLo",
        "The year 1984 and 2001: A Space Odyssey", "$19.99 (tax incl.)", "100%", "50/50", "#hashtag @mention",
        "email@example.com", "https://example.org/path?q=1&r=2#frag", "C:\\Users\\me\\file.txt", "~/.bashrc",
        "well-known self-evident state-of-the-art", "naïve café résumé coöperate", "Ünïcödé", "",
    ]
    s += [
        "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "#include <stdio.h>\nint main() { printf(\"hi\\n\"); }", '{"key": [1, 2, 3], "nested": {"a": null}}',
        "<div class=\"a\">text</div>", "SELECT * FROM t WHERE x >= 10 AND y <> 'z';", "x = [i**2 for i in range(10)]",
        "if (a && b || !c) return;", "    indented\n        more\n\tTabbed", "// comment\n/* block */",
        "lambda x: x+1", "a->b = c::d;", "std::vector<std::pair<int, float>> v;", "$ ls -la | grep '.cpp'",
        "x+=1;y-=2;z*=3;w/=4", "=== !== >>> <<= **=", "```python\nprint('hi')\n```", "\\n\\t\\r", "0x1F 0b1010 1e-6 3.0f",
        "fn main() -> Result<(), Box<dyn Error>> {}", "<|not_special|>", "  def  ", "\tif x:\n\t\tpass",
    ]
    ws = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t ", "\u00a0",
          "\u3000", "\u2028", "\u2009", "\u200b", "\x0b", "\x0c", "\x85", " \r\n "]
    for w in ws:
        s += [w, "a" + w + "b", w + "x", "x" + w, "1" + w + "2", "!" + w + "?"]
    s += ["trailing   ", "   leading", "  both  ", "a  b   c    d", "line1\nline2\r\nline3\rline4", "a \n\n b",
          "x\t \t\ty", " \n\t\r ", "end.\n\n\n", "   \n   \n", "word\n\n\n\nword", "a\u00a0\u00a0b"]
    s += ["0", "7", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "2024-11-22", "12:30:45",
          "-42", "+7", "1e10", "0.000001", "v1.2.3", "IPv4 192.168.0.1", "０１２３", "١٢٣٤", "१२३", "Ⅻ ⅻ", "½ ¾ ⅞",
          "x² y³", "①②③", "๑๒๓", "a1b2c3", "abc123def", "99bottles", "3rd 21st 42nd"]
    s += ["don't", "DON'T", "Don'T", "I'm", "I'M", "they're", "THEY'RE", "we've", "WE'VE", "you'll", "YOU'LL",
          "he'd", "HE'D", "it's", "IT'S", "isn't", "'s", "'S", "'t", "'re", "'ll", "'d", "'m", "'ve", "''", "'",
          "'sup", "O'Neil", "rock'n'roll", "'tis", "y'all", "'ſ", "ma'am", "'LL'VE'RE", "it’s (curly)", "l'été"]
    s += [
        "你好，世界！", "我爱自然语言处理。", "这是一个测试，包含标点符号：“引号”和（括号）。", "机器学习 machine learning 混合",
        "日本語のテキストです。", "カタカナとひらがな", "ｶﾀｶﾅ半角", "東京タワー 333m", "한국어 텍스트입니다.", "안녕하세요",
        "مرحبا بالعالم", "اللغة العربية جميلة", "שלום עולם", "नमस्ते दुनिया", "हिन्दी भाषा", "ภาษาไทย", "Ελληνικά γράμματα",
        "Русский язык", "Українська мова", "Tiếng Việt có dấu", "Türkçe karakterler: ğüşıöç", "Ærøskøbing ß ẞ",
        "ქართული", "Հայերեն", "አማርኛ", "தமிழ்", "বাংলা", "ગુજરાતી", "ꦗꦮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "𠀀𠀁 (CJK ext B)",
    ]
    s += ["😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇫🇷🇯🇵", "1️⃣ #️⃣", "❤️", "🧑🏿‍💻", "I ❤ NY", "smile 😊 please",
          "👩‍🔬 scientist", "🫠🫡", "☃ ★ ♫ ✓ ✗", "→ ← ↑ ↓ ⇒", "∑∫∂√∞≈≠≤≥", "┌─┐│└─┘", "«guillemets» „quotes“", "…—–",
          "\u200d", "\ufeffBOM", "\u00ad soft hyphen", "\x01\x02\x7f", "\ue000 private", "a\u0000b"]
    # Combining marks: NFC must compose these (the reference normaliser runs before splitting).
    s += ["e\u0301", "cafe\u0301", "A\u030a", "n\u0303", "u\u0308ber", "o\u0302\u0323", "o\u0323\u0302",
          "s\u0323\u0307", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "a\u0301\u0301",
          "\u0915\u093c", "\u0627\u0653", "x\u0336y\u0336", "Z\u0351\u0352\u0353\u0354", "\u212b", "\u2126",
          "\u1e9b\u0323", "\u0344", "\u0f73", "\u00c5\u0327", "q\u0307\u0323", "ά", "α\u0301", "ё е\u0308"]
    s += ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
          "<|vision_start|><|image_pad|><|vision_end|>", "<|image_pad|><|image_pad|><|image_pad|>", "text<|im_end|>text",
          "<|im_start", "<|im_start|", "im_start|>", "<|im_end|>>", "<<|im_end|>", "<|im_end|><|im_end|>",
          "<|IM_START|>", "< |im_start| >", "<think>reasoning</think>answer", "<tool_call>{}</tool_call>",
          "<|box_start|>(1,2),(3,4)<|box_end|>", "<|object_ref_start|>cat<|object_ref_end|>", "<|video_pad|>",
          "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "a<|endoftext|>b", " <|im_end|> ", "\n<|im_start|>\n"]
    s += ["a" * 1000, "supercalifragilisticexpialidocious" * 40, "ab" * 700, "1" * 400, "!" * 300, " " * 500,
          "\n" * 200, "😀" * 150, "你" * 400, "x" + "\u0301" * 50, "Ā" * 500, "a b " * 300, ". " * 400,
          "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30]
    rng = random.Random(20261122)
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3040, 0x30FF), (0x4E00, 0x4FFF),
              (0xAC00, 0xAD00), (0x1F300, 0x1F6FF), (0x1D400, 0x1D4FF), (0xFF00, 0xFFEF)]
    for _ in range(110):
        n = rng.randint(1, 40)
        chars = []
        for _ in range(n):
            lo, hi = rng.choice(blocks)
            cp = rng.randint(lo, hi)
            chars.append(chr(cp) if not 0xD800 <= cp <= 0xDFFF else "?")
            if rng.random() < 0.2:
                chars.append(rng.choice([" ", "  ", "\n", "\t", "'s", "1", "\r\n"]))
        s.append("".join(chars))
    return s


def main():
    tok = AutoTokenizer.from_pretrained(str(ROOT / "resources" / "tokenizer"))
    strings = encode_strings()
    encode_cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in strings]
    assert len(encode_cases) >= 300, len(encode_cases)

    rng = random.Random(7)
    decode_cases = []
    for t in strings[::7]:
        ids = tok.encode(t, add_special_tokens=False)
        decode_cases.append({"ids": ids, "skip_special": False, "text": tok.decode(ids)})
    for _ in range(80):  # random ids: byte tokens split characters, producing U+FFFD
        ids = [rng.randrange(0, 151643) for _ in range(rng.randint(1, 12))]
        decode_cases.append({"ids": ids, "skip_special": False, "text": tok.decode(ids)})
    for ids in ([151644, 872, 198, 9707, 151645], [151643, 151655, 151655, 151652, 151667, 1, 151668], [151657, 151658]):
        for skip in (False, True):
            decode_cases.append({"ids": ids, "skip_special": skip, "text": tok.decode(ids, skip_special_tokens=skip)})
    # Single byte tokens that cut a multi-byte character in half, in order and out of order.
    bytes_ids = tok.convert_tokens_to_ids(["ä½", "ł", "å¥", "½"])
    decode_cases.append({"ids": bytes_ids, "skip_special": False, "text": tok.decode(bytes_ids)})

    chat_cases = chat_goldens(tok)
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    (OUT / "encode.json").write_text(json.dumps({**meta, "cases": encode_cases}, ensure_ascii=False) + "\n")
    (OUT / "decode.json").write_text(json.dumps({**meta, "cases": decode_cases}, ensure_ascii=False) + "\n")
    (OUT / "chat.json").write_text(json.dumps({**meta, "cases": chat_cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(encode_cases)} encode, {len(decode_cases)} decode and {len(chat_cases)} chat cases to {OUT}")


def chat_goldens(tok):
    from transformers import Qwen2VLImageProcessorFast, Qwen3VLProcessor, Qwen3VLVideoProcessor
    processor = Qwen3VLProcessor(
        video_processor=Qwen3VLVideoProcessor(),
        image_processor=Qwen2VLImageProcessorFast(size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16,
                                                  temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                                  image_std=[0.5] * 3),
        tokenizer=tok, chat_template=TEMPLATE)
    img = {"type": "image", "image": "unused.png"}
    conversations = {
        "text_only": [{"role": "user", "content": "Hello!"}],
        "system_and_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
        "one_image": [{"role": "user", "content": [img, {"type": "text", "text": "Describe this image."}]}],
        "image_after_text": [{"role": "user", "content": [{"type": "text", "text": "Look: "}, img]}],
        "two_images": [{"role": "user", "content": [img, img, {"type": "text", "text": "Compare them."}]}],
        "multi_turn": [
            {"role": "system", "content": [{"type": "text", "text": "Answer in one word."}]},
            {"role": "user", "content": [img, {"type": "text", "text": "Colour?"}]},
            {"role": "assistant", "content": "Red."},
            {"role": "user", "content": [{"type": "text", "text": "And the shape?"}, img]},
        ],
        "assistant_list_content": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": [{"type": "text", "text": "4"}]},
            {"role": "user", "content": "Sure?"},
        ],
        "late_system_dropped": [{"role": "user", "content": "a"}, {"role": "system", "content": "ignored"},
                                {"role": "user", "content": "b"}],
        "unicode_and_specials": [{"role": "user", "content": "日本語 <think> émoji 👍🏽\n\n  spaced  "}],
        "empty_user": [{"role": "user", "content": ""}],
    }
    image_sizes = {"one_image": [(224, 224)], "image_after_text": [(480, 640)], "two_images": [(64, 640), (1000, 336)],
                   "multi_turn": [(300, 300), (90, 1800)]}
    cases = []
    for name, messages in conversations.items():
        for add_vision_id in (False, True):
            for add_generation_prompt in (True, False):
                if add_vision_id and name not in image_sizes:
                    continue
                text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                     add_vision_id=add_vision_id)
                sizes = image_sizes.get(name, [])
                images = [Image.new("RGB", (w, h), (128, 64, 32)) for h, w in sizes] or None
                batch = processor(text=[text], images=images, return_tensors="np")
                cases.append({
                    "name": name, "messages": messages, "add_vision_id": add_vision_id,
                    "add_generation_prompt": add_generation_prompt, "text": text,
                    "ids": tok.encode(text, add_special_tokens=False),
                    "image_sizes": sizes,
                    "image_grid_thw": batch["image_grid_thw"].tolist() if images else [],
                    "expanded_ids": batch["input_ids"][0].tolist(),
                })
    return cases


if __name__ == "__main__":
    main()
