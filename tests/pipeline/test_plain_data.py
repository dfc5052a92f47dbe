"""What may cross the grading boundary, and what the grader refuses to decode."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from course_lib.pipeline import reference_stubs
from course_lib.pipeline.learner import LearnerRaised, LearnerRefused, parse_reply
from course_lib.pipeline.plain_data import NotPlainData, decode, dumps, encode, loads

plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text() | st.integers() | st.tuples(st.integers(), st.integers()), inner, max_size=4),
    max_leaves=20)


@given(plain)
def test_plain_values_cross_unchanged(value):
    assert loads(dumps(value)) == value


def test_arrays_and_tensors_keep_dtype_shape_and_values():
    array = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    back = loads(dumps(array))
    assert back.dtype == np.float32 and back.shape == (3, 4) and np.array_equal(back, array)
    tensor = torch.tensor([[1.5, float("-inf")]], dtype=torch.bfloat16)
    as_array = loads(dumps(tensor))  # the grader side never holds a tensor the learner built
    assert isinstance(as_array, np.ndarray) and as_array.dtype == np.float32 and math.isinf(as_array[0, 1])
    as_tensor = loads(dumps(torch.ones(2, dtype=torch.int64)), tensors=True)  # the kernel side
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.tolist() == [1, 1]


def test_special_floats_and_numpy_scalars():
    assert math.isnan(loads(dumps(float("nan"))))
    assert loads(dumps([np.float64(0.25), np.int64(3), np.bool_(True)])) == [0.25, 3, True]


class EqualsEverything(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


@pytest.mark.parametrize("value", [EqualsEverything(1.0), object(), {1, 2}.__iter__(), np.array(["a"]),
                                   np.array([object()]), lambda: 1, [[[]]] * 0 + [type]])
def test_anything_else_cannot_be_encoded(value):
    with pytest.raises(NotPlainData):
        encode(value)


@pytest.mark.parametrize("data, fragment", [
    ({"ok": 1, "extra": 2}, "unexpected dict"),
    ({"pickle": "gASV"}, "unknown tag"),
    ({"array": {"dtype": "object", "shape": [1], "data": ""}}, "dtype"),
    ({"array": {"dtype": "float64", "shape": [4], "data": "AAAA"}}, "does not match"),
    ({"dict": [[[1], 2]]}, "cannot be a dict key"),
    ({"bytes": 5}, "base64"),
])
def test_the_decoder_refuses_malformed_data(data, fragment):
    with pytest.raises(NotPlainData, match=fragment):
        decode(data)


def test_deep_nesting_and_oversized_text_are_refused():
    with pytest.raises(NotPlainData):
        loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(NotPlainData):
        decode([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])


@pytest.mark.parametrize("reply, error", [
    (json.dumps({"raised": ["ValueError", "Exception"], "message": "no"}), LearnerRaised),
    (json.dumps({"refused": "not defined"}), LearnerRefused),
    (json.dumps({"ok": {"eval": "__import__('os')"}}), LearnerRefused),
    (json.dumps({"raised": [1], "message": None}), LearnerRefused),
    ("not json", LearnerRefused),
    (12, LearnerRefused),
])
def test_a_kernel_reply_is_a_value_or_one_of_two_errors(reply, error):
    with pytest.raises(error):
        parse_reply(reply)
    assert parse_reply(json.dumps({"ok": encode({(1, 2): [0.5]})})) == {(1, 2): [0.5]}


def test_reference_stubs_raise_and_keep_the_rest_of_the_module(tmp_path):
    overlays = reference_stubs.write_stubs(["course_lib.orientation.conversation_cost"], tmp_path)
    (real, stub), = overlays.items()
    assert real.name == "orientation.py"
    namespace = {}
    exec(stub.read_text(), namespace)
    with pytest.raises(NotImplementedError, match="not available while grading"):
        namespace["conversation_cost"]([], 1, input_usd_per_mtok=1.0, cached_usd_per_mtok=1.0,
                                       output_usd_per_mtok=1.0)
    assert namespace["softmax_with_temperature"]([0.0, 0.0], 1.0).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="defines no top-level"):
        reference_stubs.write_stubs(["course_lib.orientation.nope"], tmp_path)
