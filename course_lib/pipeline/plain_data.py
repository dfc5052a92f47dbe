"""Plain data across the grading boundary: what a hidden test may send and get back.

Hidden tests run in the grader's process and talk to the learner's functions, which run in
a sandboxed kernel, through JSON text. Only plain values cross: None, bools, ints, floats
(NaN and infinities included), strings, bytes, lists, tuples, sets, dicts with plain keys,
and numeric arrays. A torch tensor travels as an array tag; the kernel side rebuilds it as a
tensor (hidden tests may pass tensors in), the grader side as a NumPy array. Anything else,
such as an object whose ``__eq__`` says yes to everything, cannot be encoded at all.

    >>> decode(json.loads(json.dumps(encode({(1, 2): 2, "ids": [1, 2], "raw": b"hi"}))))
    {(1, 2): 2, 'ids': [1, 2], 'raw': b'hi'}

The decoder is strict: every JSON object must be exactly one known tag, sizes and nesting
are bounded, and it builds only the built-in types above and ``numpy.ndarray``.
"""
from __future__ import annotations

import base64
import json
import math

import numpy as np

MAX_DEPTH = 40
MAX_ARRAY_BYTES = 64 * 2**20
MAX_TEXT = 96 * 2**20  # bytes of JSON text accepted by `loads`
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")
TAGS = ("tuple", "set", "dict", "bytes", "array", "tensor")


class NotPlainData(TypeError):
    """A value that cannot cross the grading boundary; the message names its type."""


def encode(value, _depth: int = 0):
    """A JSON-ready structure for ``value``; NotPlainData for anything that is not plain."""
    if _depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value
    if kind in (list, tuple, set, frozenset):
        items = [encode(v, _depth + 1) for v in value]
        if kind is list:
            return items
        return {"tuple": items} if kind is tuple else {"set": items}
    if kind is dict:
        return {"dict": [[encode(k, _depth + 1), encode(v, _depth + 1)] for k, v in value.items()]}
    if kind in (bytes, bytearray):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.generic) and kind.__module__ == "numpy":
        return encode(value.item(), _depth)
    if kind is np.ndarray:
        return {"array": _array_fields(value)}
    if kind.__module__ == "torch" and kind.__name__ in ("Tensor", "Parameter"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        return {"tensor": _array_fields(tensor.numpy())}
    raise NotPlainData(f"a {kind.__module__}.{kind.__qualname__} is not plain data "
                       "(return numbers, strings, lists, tuples, dicts, arrays or tensors)")


def _array_fields(array: np.ndarray) -> dict:
    if array.dtype.name not in DTYPES:
        raise NotPlainData(f"an array of dtype {array.dtype} is not plain data (use a numeric dtype)")
    if array.nbytes > MAX_ARRAY_BYTES:
        raise NotPlainData(f"an array of {array.nbytes} bytes is larger than {MAX_ARRAY_BYTES}")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {"dtype": array.dtype.name, "shape": list(array.shape),
            "data": base64.b64encode(little.tobytes()).decode("ascii")}


def decode(data, *, tensors: bool = False, _depth: int = 0):
    """Rebuild plain values from ``encode``'s output, refusing anything else.

    ``tensors=True`` (the kernel side) turns tensor tags back into torch tensors; otherwise
    they become NumPy arrays, so the grader never holds an object the learner built.
    """
    if _depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [decode(v, tensors=tensors, _depth=_depth + 1) for v in data]
    if kind is not dict or len(data) != 1:
        raise NotPlainData(f"unexpected {kind.__name__} in the encoded data")
    (tag, body), = data.items()
    if tag not in TAGS:
        raise NotPlainData(f"unknown tag {tag!r} in the encoded data")
    inner = lambda v: decode(v, tensors=tensors, _depth=_depth + 1)  # noqa: E731
    if tag == "tuple":
        return tuple(inner(v) for v in _list(body))
    if tag == "set":
        return {_key(inner(v)) for v in _list(body)}
    if tag == "dict":
        pairs = _list(body)
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise NotPlainData("a dict must be encoded as [key, value] pairs")
        return {_key(inner(k)): inner(v) for k, v in pairs}
    if tag == "bytes":
        return base64.b64decode(_str(body), validate=True)
    array = _array(body)
    if tag == "tensor" and tensors:
        import torch

        return torch.from_numpy(array.copy())
    return array


def _list(body) -> list:
    if type(body) is not list:
        raise NotPlainData("a tagged collection must hold a list")
    return body


def _str(body) -> str:
    if type(body) is not str:
        raise NotPlainData("expected base64 text")
    return body


def _key(value):
    if type(value) in (list, dict, set) or isinstance(value, np.ndarray):
        raise NotPlainData(f"a {type(value).__name__} cannot be a dict key or set member")
    return value


def _array(body) -> np.ndarray:
    if type(body) is not dict or set(body) != {"dtype", "shape", "data"}:
        raise NotPlainData("an array needs exactly dtype, shape and data")
    dtype, shape = body["dtype"], body["shape"]
    if dtype not in DTYPES:
        raise NotPlainData(f"an array of dtype {dtype!r} is not plain data")
    if type(shape) is not list or not all(type(n) is int and 0 <= n for n in shape):
        raise NotPlainData("an array's shape must be a list of non-negative ints")
    raw = base64.b64decode(_str(body["data"]), validate=True)
    expected = math.prod(shape) * np.dtype(dtype).itemsize
    if len(raw) != expected or expected > MAX_ARRAY_BYTES:
        raise NotPlainData("an array's data does not match its shape and dtype")
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)


def dumps(value) -> str:
    """``encode`` then JSON text (NaN and infinities allowed, as Python's json writes them)."""
    return json.dumps(encode(value), separators=(",", ":"))


def loads(text: str, *, tensors: bool = False):
    """JSON text -> plain values; NotPlainData for anything too large or not plain."""
    if type(text) is not str or len(text) > MAX_TEXT:
        raise NotPlainData(f"the encoded data is not text of at most {MAX_TEXT} characters")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotPlainData(f"the encoded data is not valid JSON ({type(exc).__name__})") from None
    return decode(data, tensors=tensors)
