"""Sampling, one step at a time: logit processors, a seeded sampler, stop strings.

The loops that drive these steps through the engine are ``course_lib.generation``.

>>> import torch
>>> z = torch.tensor([2.0, 1.0, 0.0])
>>> [round(p, 3) for p in next_token_probs(z, SamplingParams(temperature=0.7)).tolist()]
[0.771, 0.185, 0.044]
"""
from course_lib.sampling.batch import process_logits, sample_batch
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.prompt import encode_prompt
from course_lib.sampling.result import GenerationResult
from course_lib.sampling.processors import (
    apply_frequency_presence_penalties,
    apply_min_p,
    apply_repetition_penalty,
    apply_temperature,
    apply_token_mask,
    apply_top_k,
    apply_top_p,
    check_logits,
    token_counts,
)
from course_lib.sampling.sampler import Sampler, next_token_probs, sample_from_probs, sample_next_token
from course_lib.sampling.stats import ChiSquareResult, chi_square_gof, chi_square_p_value, frequencies, sample_counts
from course_lib.sampling.stops import (
    StopSequenceMatcher,
    find_stop,
    held_back_length,
    stream_until_stop,
    trim_at_stop,
)

__all__ = [
    "ChiSquareResult", "GenerationResult", "Sampler", "SamplingParams",
    "StopSequenceMatcher", "apply_frequency_presence_penalties", "apply_min_p",
    "apply_repetition_penalty", "apply_temperature", "apply_token_mask", "apply_top_k", "apply_top_p", "check_logits",
    "chi_square_gof", "chi_square_p_value", "encode_prompt", "find_stop",
    "frequencies", "held_back_length", "next_token_probs",
    "process_logits", "sample_batch", "sample_counts", "sample_from_probs", "sample_next_token", "stream_until_stop",
    "token_counts", "trim_at_stop",
]
