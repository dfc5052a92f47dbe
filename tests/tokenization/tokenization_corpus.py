"""A wide, named corpus for checking tokenizers against tiktoken.

Each entry is (name, text). The texts are written for this course (no downloads) and aim at
the places where tokenizers disagree: scripts, emoji sequences, invisible characters,
pathological whitespace and digit runs, and pattern corner cases (contractions, CRLF).
"""

PROSE = (
    "The quick brown fox jumps over the lazy dog. It wasn't the fox's first time; "
    "she'd done it before, and she'll do it again. Isn't that remarkable?\n\n"
    "In 1969, 600 million people watched a grainy broadcast. “Smart quotes” — and em-dashes… "
    "DON'T SHOUT, I'LL HEAR YOU. We've, they're, you'd, I'm."
)

CODE = {
    "python": 'def fib(n: int) -> int:\n    """Return F(n)."""\n    a, b = 0, 1\n    for _ in range(n):\n'
              "        a, b = b, a + b\n    return a\n\nprint(f\"{fib(30):,}\")  # 832,040\n",
    "javascript": "const add = (a, b) => a + b;\nexport default async function main() {\n"
                  "  const res = await fetch(`/api/v1/items?id=${id}&limit=10`);\n  return res.json();\n}\n",
    "rust": "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n"
            "    println!(\"{:?}\", v);\n    let s = &v[..3]; // slice\n}\n",
    "c": "#include <stdio.h>\nint main(void) {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i << 2);\n"
         "\t}\n\treturn 0;\n}\n",
    "sql": "SELECT u.id, COUNT(*) AS n\nFROM users u\nJOIN orders o ON o.user_id = u.id\n"
           "WHERE o.created_at >= '2024-01-01'\nGROUP BY u.id\nHAVING n > 3;\n",
    "html": '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Hi</title></head>\n'
            '<body><div class="a b" data-x=\'1\'>&amp;&lt;&gt;</div></body></html>\n',
    "shell": "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone\n",
    "json": '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2, 3], "ok": true, "x": null}}',
    "crlf_windows": "line one\r\nline two\r\n\r\n  indented\r\n",
}

SCRIPTS = {
    "chinese": "我们今天去公园散步，天气非常好。机器学习是人工智能的一个分支。",
    "japanese": "こんにちは、世界！東京は日本の首都です。カタカナとひらがなと漢字を混ぜて書きます。",
    "korean": "안녕하세요, 세계! 한국어는 한글로 씁니다. 오늘 날씨가 좋네요.",
    "arabic": "مرحبا بالعالم! اللغة العربية تكتب من اليمين إلى اليسار. ١٢٣٤٥",
    "hebrew": "שלום עולם! עברית נכתבת מימין לשמאל, עם ניקוד: שָׁלוֹם.",
    "devanagari": "नमस्ते दुनिया! हिन्दी देवनागरी लिपि में लिखी जाती है। क्षत्रिय ज्ञान",
    "thai_no_spaces": "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "russian_greek": "Привет, мир! Γειά σου Κόσμε! Ελληνικά και русский.",
}

EMOJI = {
    "simple": "I love pizza 🍕 and cats 🐈 and rockets 🚀!!",
    "zwj_family": "family: 👨‍👩‍👧‍👦 couple: 👩‍❤️‍💋‍👨 technologist: 🧑🏽‍💻",
    "skin_tones": "👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 🤷🏽‍♀️ 🙋🏿‍♂️",
    "flags_keycaps": "🇫🇷 🇯🇵 🇺🇸 🏳️‍🌈 🏴‍☠️ 1️⃣ #️⃣ ©️",
    "emoji_run": "😀😃😄😁😆😅😂🤣🥲☺️😊😇🙂🙃😉",
}

ADVERSARIAL = {
    "combining_marks": "e\u0301 a\u0308 n\u0303 Z\u0351\u0308\u0353\u036b\u0310a\u0346\u0351l\u035b\u0341g\u0327o\u0353",
    "precomposed_vs_decomposed": "caf\u00e9 vs cafe\u0301, \u00c5ngstr\u00f6m vs A\u030angstro\u0308m",
    "homoglyphs": "paypal vs раураl (Cyrillic), Apple vs Αpple (Greek A), 0O vs О0, ℌello 𝐇𝐞𝐥𝐥𝐨",
    "zero_width": "zero\u200bwidth\u200cnon\u200djoiner\u2060word\ufeffbom \u200e\u200fmarks",
    "bidi_controls": "abc\u202edcba\u202c \u2066isolate\u2069 \u061c",
    "spaces_run": "a" + " " * 300 + "b",
    "newlines_run": "x" + "\n" * 200 + "y\n\n\n",
    "mixed_whitespace": "\t \t\u00a0\u2003\u3000 \r\n \x0b\x0c end   \n   ",
    "digits_run": "1234567890" * 30 + " 3.14159265358979 1,000,000 0x1F 1e-9",
    "trailing_space": "ends with spaces   ",
    "only_spaces": "     ",
    "contractions_caps": "IT'S THEY'RE WE'VE I'D YOU'LL 's 't 'S 'LL",
    "control_chars": "\x00\x01\x02\x7f\x1b[31mred\x1b[0m",
    "astral_math": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 ∀x∈ℝ: x² ≥ 0 ∑∫∂√∞ ≠ ≈",
    "private_use_and_rare": "\ue000\uf8ff \U000f0000 \ufffd \u0378",
    "special_token_lookalikes": "<|endoftext|> <|endofprompt|> <|fim_prefix|> <|end|> <|user|> <|im_start|>",
    "long_word": "Pneumonoultramicroscopicsilicovolcanoconiosis" * 5,
    "repeated_punct": "!!!!!!!!!!?????...,,,,;;;;----____====" * 4,
}

MIXED = {
    "mixed_scripts": "English, 中文, 日本語, 한국어, العربية, עברית, हिन्दी and emoji 🎉 in one line.",
    "code_with_cjk_comments": "x = 1  # 设置变量\nprint('こんにちは')  // 안녕\n",
    "url_and_email": "See https://example.com/a/b?c=d&e=f#g or mail me@example.org.",
}


def wide_corpus() -> list[tuple[str, str]]:
    """All entries as (name, text), plus one long document made of all of them."""
    entries = [("prose", PROSE)]
    for group, items in (("code", CODE), ("script", SCRIPTS), ("emoji", EMOJI),
                         ("adversarial", ADVERSARIAL), ("mixed", MIXED)):
        entries += [(f"{group}/{name}", text) for name, text in items.items()]
    entries.append(("everything_joined", "\n".join(text for _, text in entries)))
    return entries
