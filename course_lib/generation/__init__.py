"""The decode helpers: loops that run prompts through the serving engine to completion.

The engine (``course_lib.serving.Engine``) is the course's one decode loop; everything here
builds an engine sized for its job (``Engine.for_job``) and drives it:

- ``generate`` / ``generate_many``: one prompt under a ``SamplingParams`` rule, once or as n rows;
- ``greedy_generate``: the argmax on token ids alone, with the uncached reference of notebook 03;
- ``generate_replies`` / ``generate_replies_for``: many prompts at once, as ``course eval`` scores them.

This package sits above ``course_lib.serving``, ``course_lib.model`` and ``course_lib.sampling``;
none of them imports it.

>>> from course_lib.model import Transformer, get_config
>>> model = Transformer(get_config("test-mha"), generator=torch.Generator().manual_seed(0))
>>> len(greedy_generate(model, [1, 2, 3], max_new_tokens=4))
4
"""
import torch  # noqa: F401  (used by the doctest above)

from course_lib.generation.generate import (
    GenerationResult,
    default_eos_ids,
    encode_prompt,
    generate,
    generate_many,
    greedy_generate,
)
from course_lib.generation.replies import generate_replies, generate_replies_for

__all__ = ["GenerationResult", "default_eos_ids", "encode_prompt", "generate", "generate_many", "generate_replies",
           "generate_replies_for", "greedy_generate"]
