"""The fixed tables the course corpus draws from: number words, what the model knows, and
the values its tools and records are built from; and the names it was never taught.

Everything here is constant data (or a pure function of a given ``random.Random``), so the
corpus generator stays a pure function of its seed.

    >>> number_to_words(42)
    'forty-two'
    >>> CAPITALS["France"]
    'Paris'
"""
from __future__ import annotations

import random

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_to_words(n: int) -> str:
    """English words for 0..100, hyphenated the usual way.

    >>> [number_to_words(n) for n in (0, 13, 20, 57, 100)]
    ['zero', 'thirteen', 'twenty', 'fifty-seven', 'one hundred']
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"number_to_words takes an int, got {type(n).__name__}")
    if not 0 <= n <= 100:
        raise ValueError(f"number_to_words covers 0..100 (the corpus's answer range), got {n}")
    if n == 100:
        return "one hundred"
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] if ones == 0 else f"{_TENS[tens]}-{_ONES[ones]}"


# What the model knows. Questions about anything else must be answered "I don't know."
CAPITALS: dict[str, str] = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Japan": "Tokyo", "Canada": "Ottawa", "Egypt": "Cairo", "Kenya": "Nairobi",
    "Peru": "Lima", "Chile": "Santiago", "Norway": "Oslo", "Sweden": "Stockholm",
    "Greece": "Athens", "Portugal": "Lisbon", "Ireland": "Dublin", "Poland": "Warsaw",
    "Austria": "Vienna", "China": "Beijing", "Australia": "Canberra", "Turkey": "Ankara",
}
SYMBOLS: dict[str, str] = {
    "gold": "Au", "silver": "Ag", "iron": "Fe", "copper": "Cu", "oxygen": "O",
    "hydrogen": "H", "carbon": "C", "sodium": "Na", "helium": "He", "lead": "Pb",
    "tin": "Sn", "nitrogen": "N", "calcium": "Ca", "zinc": "Zn", "potassium": "K",
}
LEGS: dict[str, int] = {
    "spider": 8, "dog": 4, "cat": 4, "bird": 2, "ant": 6, "horse": 4, "chicken": 2,
    "beetle": 6, "crab": 10, "bee": 6, "cow": 4, "duck": 2, "sheep": 4, "fly": 6,
}
# Questions no table can answer: the model must abstain on these too.
UNANSWERABLE: tuple[str, ...] = (
    "What is my name?",
    "What number am I thinking of?",
    "Who will win the next match?",
    "What did I eat for breakfast?",
    "What is the password to my account?",
    "How old is my neighbour?",
    "What will the stock market do tomorrow?",
    "Where did I leave my keys?",
)
# Syllables for made-up names (countries, elements, animals) the model has never seen.
SYLLABLES: tuple[str, ...] = (
    "ka", "lo", "mi", "ve", "zor", "tan", "bel", "qui", "dra", "nox", "fen", "ril",
    "sha", "tor", "vel", "mar", "lin", "dor", "pex", "gru", "sol", "yth", "bar", "wen",
)

# Values for records and tool calls.
CITIES: tuple[str, ...] = (
    "Paris", "Berlin", "Rome", "Madrid", "Tokyo", "Cairo", "Lima", "Oslo", "Athens",
    "Dublin", "Vienna", "London", "Chicago", "Toronto", "Sydney", "Seoul", "Mumbai",
    "Boston", "Denver", "Lagos",
)
CONDITIONS: tuple[str, ...] = ("sunny", "cloudy", "rainy", "snowy", "windy", "foggy")
ORDER_STATUSES: tuple[str, ...] = ("processing", "shipped", "delivered", "cancelled")
# Currency -> value of one unit in USD (made-up, fixed, so tool results are reproducible).
CURRENCIES: dict[str, float] = {"USD": 1.0, "EUR": 1.08, "GBP": 1.27, "JPY": 0.0067, "CHF": 1.13}
SURNAMES: tuple[str, ...] = (
    "Garcia", "Smith", "Nguyen", "Kowalski", "Okafor", "Tanaka", "Rossi", "Muller",
    "Dubois", "Silva", "Patel", "Johansson", "Murphy", "Novak", "Haddad", "Kim",
    "Lopez", "Brown", "Ivanova", "Mensah",
)
DAYS: tuple[str, ...] = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# A refund's reason is one label; customers describe it in many ways ("it ...").
REFUND_REASONS: dict[str, tuple[str, ...]] = {
    "damaged": ("arrived damaged", "was broken", "came with a cracked screen"),
    "late": ("arrived late", "came two weeks late", "was delayed"),
    "wrong_item": ("was the wrong item", "was the wrong size", "was not what I ordered"),
    "changed_mind": ("is no longer needed", "was bought by mistake"),
}


def article(noun: str) -> str:
    """The indefinite article before ``noun``: 'an ant', 'a cat'."""
    return "an" if noun[0].lower() in "aeiou" else "a"


def made_up_name(rng: random.Random, kind: str) -> str:
    """A name the model was never taught (e.g. 'Velmora', 'zorlinium'); never a known one.

    ``kind`` is "capital" (a country), "symbol" (an element) or "legs" (an animal).
    """
    while True:
        stem = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        name = {"capital": stem.capitalize() + rng.choice(("ia", "a", "land", "stan")),
                "symbol": stem + "ium", "legs": stem}[kind]
        if name.lower() not in _KNOWN_NAMES:
            return name


_KNOWN_NAMES = {name.lower() for table in (CAPITALS, SYMBOLS, LEGS) for name in table}
