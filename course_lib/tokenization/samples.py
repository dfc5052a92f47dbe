"""Texts for measuring tokenizers: short samples per category and a seeded synthetic corpus.

Nothing here is downloaded: the samples are written for the course and the corpus is
generated from a seed, so every run (and every learner) sees the same text.

    >>> sorted(CATEGORY_SAMPLES)
    ['adversarial', 'cjk', 'code', 'emoji', 'prose']
    >>> len(PARALLEL_PASSAGE), sorted(PARALLEL_FUNCTION)
    (9, ['JavaScript', 'Python', 'Rust'])
    >>> synthetic_corpus(200, seed=1) == synthetic_corpus(200, seed=1)
    True
"""
from __future__ import annotations

import itertools
import random

CATEGORY_SAMPLES: dict[str, str] = {
    "prose": (
        "When you press Enter, your message is wrapped in a chat template, cut into tokens and "
        "sent through the model one token at a time. Every step is billed and timed in tokens, "
        "not in words, so it pays to know how many tokens a piece of text really costs. Plain "
        "English is cheap: most common words are a single token, and a page of prose costs only "
        "a little more tokens than it has words."
    ),
    "code": (
        "def moving_average(values: list[float], window: int = 3) -> list[float]:\n"
        "    if window <= 0:\n"
        "        raise ValueError(f\"window must be positive, got {window}\")\n"
        "    out = []\n"
        "    for i in range(len(values) - window + 1):\n"
        "        out.append(sum(values[i:i + window]) / window)\n"
        "    return out\n"
    ),
    "cjk": (
        "当你按下回车键时，你的消息会被包装进对话模板，再被切分成词元。"
        "東京の天気は今日とても良いです。モデルは一度に一つのトークンを生成します。"
        "토큰 수는 비용과 지연 시간을 결정합니다."
    ),
    "emoji": "Great job 👍🏽🎉! Family trip 👨‍👩‍👧‍👦✈️🏝️ was fun 😂😂😂 ❤️‍🔥 🇫🇷🇯🇵 🤷🏽‍♀️",
    "adversarial": (
        "Pay\u200bPal ра\u0443pal Z\u0351\u0308\u0353a\u0346l\u035bg\u0327o "
        "co\u0301\u0301\u0301mbining" + " " * 24 + "spaces \u200d\u200d\u200d joiners \ufeff\u2060 "
        "𝐇𝐞𝐥𝐥𝐨 ℌ𝔢𝔩𝔩𝔬 " + "9" * 20
    ),
}

# A parallel set: the same short passage in several languages, translated for the course, so
# that token counts compare cost per unit of meaning (the samples above are not translations).
PARALLEL_PASSAGE: dict[str, str] = {
    "English": "The river rose during the night, so the villagers moved their boats to higher ground. "
               "By morning everyone was safe, and the bakery opened as usual.",
    "French": "La rivière a monté pendant la nuit, alors les villageois ont déplacé leurs bateaux vers un terrain "
              "plus élevé. Au matin, tout le monde était en sécurité et la boulangerie a ouvert comme d'habitude.",
    "German": "Der Fluss stieg in der Nacht, also brachten die Dorfbewohner ihre Boote auf höheres Gelände. "
              "Am Morgen waren alle in Sicherheit, und die Bäckerei öffnete wie gewohnt.",
    "Spanish": "El río creció durante la noche, así que los aldeanos llevaron sus barcas a un terreno más alto. "
               "Por la mañana todos estaban a salvo y la panadería abrió como siempre.",
    "Russian": "Ночью река поднялась, поэтому жители деревни перенесли лодки на возвышенность. "
               "К утру все были в безопасности, и пекарня открылась как обычно.",
    "Hindi": "रात में नदी का पानी बढ़ गया, इसलिए गाँव वालों ने अपनी नावें ऊँची जगह पर पहुँचा दीं। "
             "सुबह तक सब सुरक्षित थे और बेकरी हमेशा की तरह खुली।",
    "Arabic": "ارتفع النهر خلال الليل، فنقل أهل القرية قواربهم إلى أرض أعلى. "
              "وفي الصباح كان الجميع بأمان، وفتح المخبز كالمعتاد.",
    "Chinese": "夜里河水上涨，村民们把船搬到了地势更高的地方。到了早上，大家都安然无恙，面包店也照常开门了。",
    "Japanese": "夜のうちに川が増水したので、村人たちは舟を高台へ移した。朝になると全員が無事で、パン屋はいつも通り開店した。",
}

# One small function (the mean of the positive numbers in a list, 0.0 when there are none)
# written in three programming languages, for the same comparison on code.
PARALLEL_FUNCTION: dict[str, str] = {
    "Python": (
        "def mean_of_positives(values):\n"
        "    positives = [v for v in values if v > 0]\n"
        "    if not positives:\n"
        "        return 0.0\n"
        "    return sum(positives) / len(positives)\n"
    ),
    "JavaScript": (
        "function meanOfPositives(values) {\n"
        "  const positives = values.filter((v) => v > 0);\n"
        "  if (positives.length === 0) {\n"
        "    return 0.0;\n"
        "  }\n"
        "  return positives.reduce((a, b) => a + b, 0) / positives.length;\n"
        "}\n"
    ),
    "Rust": (
        "fn mean_of_positives(values: &[f64]) -> f64 {\n"
        "    let positives: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();\n"
        "    if positives.is_empty() {\n"
        "        return 0.0;\n"
        "    }\n"
        "    positives.iter().sum::<f64>() / positives.len() as f64\n"
        "}\n"
    ),
}

_WORDS = (
    "the of and to in is that it for as with was on be by this are from at or an have not "
    "which one all but they were their has more can will would been about there when what "
    "model token tokens text request response user assistant system cache memory latency "
    "layer attention head query key value batch sequence prompt decode prefill sample "
    "probability logit temperature server queue schedule block page budget cost price "
    "language data train learn vector matrix number count rate time second first last "
    "people world house water light night small large quick brown fox lazy dog river city"
).split()
_SYLLABLES = "ka to ri sen mo la pe dun qua zi ber lo nat ion ing ed er re un ex pro".split()
_CJK = ["我们今天学习分词。", "模型一次生成一个词元。", "東京は晴れです。", "토큰은 비용입니다."]
_CODE = [
    "for i in range({n}):\n    total += values[i] * {n}\n",
    "def f_{n}(x):\n    return x ** 2 + {n}\n",
    "if (count > {n}) {{ return -1; }}\n",
    "SELECT id FROM t WHERE n = {n};\n",
]
_EMOJI = ["🎉", "👍🏽", "😂", "🚀", "👨‍👩‍👧", "❤️"]


def synthetic_corpus(n_chars: int, seed: int = 0) -> str:
    """A deterministic mixed corpus of about ``n_chars`` characters (mostly English-like prose).

    Words follow a Zipf-like frequency curve over real words plus invented ones, with code
    lines, CJK sentences, numbers and emoji mixed in, so BPE has both frequent and rare
    chunks to learn from.
    """
    if isinstance(n_chars, bool) or not isinstance(n_chars, int) or n_chars < 0:
        raise ValueError(f"n_chars must be a non-negative int, got {n_chars!r}")
    rng = random.Random(seed)
    invented = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(20_000)]
    vocabulary = _WORDS + invented
    # cumulative weights once, not per call: same draws, far less work
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocabulary))))
    parts: list[str] = []
    size = 0
    while size < n_chars:
        roll = rng.random()
        if roll < 0.80:
            words = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(6, 18))
            words[0] = words[0].capitalize()
            piece = " ".join(words) + rng.choice([". ", ", ", "? ", ".\n", ".\n\n"])
        elif roll < 0.90:
            piece = rng.choice(_CODE).format(n=rng.randint(0, 999))
        elif roll < 0.95:
            piece = rng.choice(_CJK)
        elif roll < 0.98:
            piece = f" {rng.randint(0, 10**rng.randint(1, 7))} "
        else:
            piece = rng.choice(_EMOJI) + " "
        parts.append(piece)
        size += len(piece)
    return "".join(parts)[:n_chars]
