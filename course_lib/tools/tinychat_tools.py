"""The four tools the course model was trained to call, with deterministic fake services.

Names and argument names match the training corpus (``course_lib.data.corpus``), so the
shipped model's calls validate. The services are fakes, computed from a hash of their input:
the same city always has the same weather, and no network is needed.

    >>> registry = tinychat_registry()
    >>> registry.names
    ('get_weather', 'get_time', 'lookup_order', 'convert_currency')
    >>> registry.get("convert_currency").fn(amount=100, from_currency="EUR", to_currency="USD")
    {'amount': 108.0, 'currency': 'USD'}
    >>> registry.get("get_weather").fn(city="Paris") == registry.get("get_weather").fn(city="Paris")
    True
"""
from __future__ import annotations

import hashlib
from typing import Any

from course_lib.data import facts
from course_lib.tools.registry import ToolRegistry
from course_lib.tools.tool import Tool

ORDER_ID_PATTERN = "^[A-Z][0-9]{4}$"  # the corpus's order ids: one capital letter, four digits


def stable_hash(*parts: str) -> int:
    """A hash that is the same in every process (Python's hash() of a str is salted per run)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


def _known_city(city: str) -> str:
    if city not in facts.CITIES:
        raise LookupError(f"no data for city {city!r}; this service knows {', '.join(facts.CITIES[:5])} "
                          f"and {len(facts.CITIES) - 5} more")
    return city


def get_weather(city: str) -> dict[str, Any]:
    """The corpus's ranges: -5..35 degrees C and one of facts.CONDITIONS."""
    h = stable_hash("weather", _known_city(city))
    return {"city": city, "temperature_c": h % 41 - 5, "condition": facts.CONDITIONS[h // 41 % len(facts.CONDITIONS)]}


def get_time(city: str) -> dict[str, Any]:
    h = stable_hash("time", _known_city(city))
    return {"city": city, "time": f"{h % 24:02d}:{h // 24 % 60:02d}"}


def lookup_order(order_id: str) -> dict[str, Any]:
    status = facts.ORDER_STATUSES[stable_hash("order", order_id) % len(facts.ORDER_STATUSES)]
    return {"order_id": order_id, "status": status}


def convert_currency(amount: float, from_currency: str, to_currency: str) -> dict[str, Any]:
    """The corpus's formula: amount x (USD per unit of from) / (USD per unit of to), to cents."""
    rate = facts.CURRENCIES[from_currency] / facts.CURRENCIES[to_currency]
    return {"amount": round(amount * rate, 2), "currency": to_currency}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    # Every argument required and nothing else allowed: a fabricated argument is rejected.
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


CITY = {"type": "string", "minLength": 1, "maxLength": 64, "description": "a city name, e.g. Paris"}
CURRENCY = {"type": "string", "enum": list(facts.CURRENCIES)}


def tinychat_registry() -> ToolRegistry:
    """A fresh registry of get_weather, get_time, lookup_order and convert_currency."""
    return ToolRegistry([
        Tool("get_weather", "Current temperature (C) and conditions in a city.", _object({"city": CITY}), get_weather),
        Tool("get_time", "Local time (HH:MM) in a city.", _object({"city": CITY}), get_time),
        Tool("lookup_order", "Shipping status of an order.",
             _object({"order_id": {"type": "string", "pattern": ORDER_ID_PATTERN}}), lookup_order),
        Tool("convert_currency", "Convert an amount between currencies at today's rate.",
             _object({"amount": {"type": "number", "exclusiveMinimum": 0},
                      "from_currency": CURRENCY, "to_currency": CURRENCY}), convert_currency),
    ])
