"""Known-wrong answers to notebook 06, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import torch

from course_lib.sampling import sample_from_probs
from tests.hidden.mutants import moved, mutant

A = "06_serving"


# -- stream_metrics ----------------------------------------------------------------------------
def _metrics_with(*, tpot="right", itl_from_start=False, empty="end", validate=True):
    def stream_metrics(start, chunk_times, output_tokens, end):
        times = [start, *chunk_times, end]
        if validate and any(b < a for a, b in zip(times, times[1:])):
            raise ValueError("backwards")
        if chunk_times:
            first = chunk_times[0]
        elif empty == "end":
            first = end
        else:
            first = chunk_times[0]  # IndexError: a reply without chunks was never considered
        ttft, latency = first - start, end - start
        if tpot == "over_n":  # divides by every token, the first included
            value = (latency - ttft) / output_tokens if output_tokens > 1 else None
        elif tpot == "latency":  # the whole latency per token: TTFT counted again
            value = latency / output_tokens if output_tokens > 1 else None
        elif tpot == "zero":  # 0 instead of "undefined" for a one-token reply
            value = (latency - ttft) / (output_tokens - 1) if output_tokens > 1 else 0.0
        else:
            value = (latency - ttft) / (output_tokens - 1) if output_tokens > 1 else None
        points = [start, *chunk_times] if itl_from_start else list(chunk_times)
        return {"ttft": ttft, "latency": latency, "tpot": value, "itl": [b - a for a, b in zip(points, points[1:])]}
    stream_metrics.__name__ = "_metrics_" + "_".join(
        k for k, on in ((f"tpot_{tpot}", tpot != "right"), ("itl_from_start", itl_from_start),
                        ("empty_crashes", empty != "end"), ("no_validation", not validate)) if on)
    return stream_metrics


# -- decode_roofline ---------------------------------------------------------------------------
def _roofline_with(*, giga=1e9, bits=False, flops_factor=2, weights_per_seq=False, kv_per_batch=True,
                   per_step=False, add_times=False, strict_memory=False, validate=True):
    def decode_roofline(n_params, bytes_per_param, kv_bytes_per_seq, batch, bandwidth_gb_s, peak_tflops):
        if validate and (batch < 1 or kv_bytes_per_seq < 0
                         or min(n_params, bytes_per_param, bandwidth_gb_s, peak_tflops) <= 0):
            raise ValueError("bad input")
        bandwidth = bandwidth_gb_s * giga / (8 if bits else 1)
        peak = peak_tflops * 1e12
        weights = n_params * bytes_per_param * (batch if weights_per_seq else 1)
        total = weights + (batch if kv_per_batch else 1) * kv_bytes_per_seq
        flops = flops_factor * n_params * batch
        memory_s, compute_s = total / bandwidth, flops / peak
        step = memory_s + compute_s if add_times else max(memory_s, compute_s)
        memory_bound = memory_s > compute_s if strict_memory else memory_s >= compute_s
        return {"bytes_per_step": total, "flops_per_step": flops, "intensity": flops / total, "ridge": peak / bandwidth,
                "step_s": step, "tokens_per_s": (1 if per_step else batch) / step,
                "bound": "memory" if memory_bound else "compute"}
    decode_roofline.__name__ = "_roofline_" + "_".join(
        k for k, on in (("gib", giga != 1e9), ("bits", bits), ("no_factor_2", flops_factor != 2),
                        ("weights_per_seq", weights_per_seq), ("kv_once", not kv_per_batch), ("per_step", per_step),
                        ("add_times", add_times), ("strict", strict_memory), ("no_validation", not validate)) if on)
    return decode_roofline


# -- schedule_step -----------------------------------------------------------------------------
# The notebook's own schedule_step with one rule broken (see tests/hidden/mutants.py).
def _schedule_with(label, *edits):
    return mutant(A, "schedule_step", *edits, label=label)


_DECODES, _PREFILLS, _ADMISSION, _RETURN = "    i = 0", "    for seq in running:", "    while not preempted", "    return {"
_GROWS = 'if seq["blocks"] < -(-seq["tokens"] // block_size):'
_HEAD_STOPS = "        if needed > free_blocks:\n            break\n"
_OVERTAKES = """        if needed > free_blocks:  # let the first request that fits jump the queue
            fits = [w for w in waiting if -(-w["tokens"] // block_size) <= free_blocks]
            if not fits:
                break
            waiting.remove(fits[0])
            waiting.insert(0, fits[0])
            continue
"""


# -- block_pool --------------------------------------------------------------------------------
def _pool_with(label, *edits):
    return mutant(A, "BlockPool", *edits, label=label)


_LOOKUP = "if block is None or self.prefix_of[block] != tuple(tokens[:(i + 1) * size]):"
_FULL = 'raise RuntimeError(f"not enough free blocks for {seq_id!r}")'


# -- accept_or_resample ------------------------------------------------------------------------
def _spec_with(*, resample="residual", accept="ratio", lazy=False, stop=True, bonus_row="k", final="cdf", check_q=True):
    def accept_or_resample(draft_tokens, draft_probs, target_probs, generator):
        k = len(draft_tokens)
        tokens = [int(t) for t in draft_tokens]
        q = draft_probs.double()
        p = target_probs.double()
        q_x = [float(q[i, t]) for i, t in enumerate(tokens)]
        p_x = [float(p[i, t]) for i, t in enumerate(tokens)]
        if check_q and min(q_x) <= 0:
            raise ValueError("q(x) = 0")
        u = None if lazy else torch.rand(k, generator=generator, dtype=torch.float64).tolist()
        kept, rejected_at = [], None  # with stop=False, guesses after a rejection are still tried and emitted
        for i in range(k):
            ui = torch.rand((), generator=generator, dtype=torch.float64).item() if lazy else u[i]
            if accept == "ratio":
                ok = ui < p_x[i] / q_x[i] if q_x[i] > 0 else True
            elif accept == "inverted":
                ok = ui < q_x[i] / p_x[i] if p_x[i] > 0 else False
            else:  # deterministic: keep whatever the target likes at least as much
                ok = p_x[i] >= q_x[i]
            if ok:
                kept.append(tokens[i])
                continue
            rejected_at = i if rejected_at is None else rejected_at
            if stop:
                break
        if rejected_at is None:
            dist = p[k if bonus_row == "k" else k - 1]
        elif resample == "residual":
            dist = (p[rejected_at] - q[rejected_at]).clamp_min(0)
        else:
            dist = p[rejected_at]
        if final == "multinomial":
            token = int(torch.multinomial(dist / dist.sum(), 1, generator=generator))
        else:
            token = int(sample_from_probs(dist, generator))
        return kept + [token]
    accept_or_resample.__name__ = "_spec_" + "_".join(
        k for k, on in ((f"resample_{resample}", resample != "residual"), (f"accept_{accept}", accept != "ratio"),
                        ("lazy_uniforms", lazy), ("goes_on", not stop), ("bonus_from_k_minus_1", bonus_row != "k"),
                        ("multinomial", final != "cdf"), ("no_q_check", not check_q)) if on)
    return accept_or_resample


# -- quantize_per_channel ----------------------------------------------------------------------
def _quantize_with(*, rounding="even", axis="row", zero_row="one", qmax=127, validate=True, dtype=torch.int8):
    def quantize_per_channel(weight):
        if validate and (weight.dim() != 2 or not torch.isfinite(weight).all()):
            raise ValueError("bad weight")
        w = weight.detach().double()
        if axis == "row":
            amax = w.abs().amax(dim=1)
        elif axis == "tensor":  # one scale for the whole matrix, repeated per row
            amax = w.abs().amax().expand(w.shape[0])
        else:  # per input column, squeezed into one value per row by mistake
            amax = w.abs().amax(dim=0)[: w.shape[0]]
            amax = torch.cat([amax, amax.new_ones(max(0, w.shape[0] - amax.numel()))])
        if zero_row == "one":
            scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax)).float()
        else:
            scale = (amax / qmax).float()
        x = w / scale.double()[:, None]
        if rounding == "even":
            x = torch.round(x)
        elif rounding == "truncate":
            x = torch.trunc(x)
        else:  # half away from zero
            x = torch.sign(x) * torch.floor(x.abs() + 0.5)
        q = torch.nan_to_num(x, nan=0.0).clamp(-127, 127).to(dtype)
        return q, scale
    quantize_per_channel.__name__ = "_quantize_" + "_".join(
        k for k, on in ((f"round_{rounding}", rounding != "even"), (f"per_{axis}", axis != "row"),
                        ("zero_row_nan", zero_row != "one"), (f"qmax_{qmax}", qmax != 127),
                        ("no_validation", not validate), ("int32", dtype != torch.int8)) if on)
    return quantize_per_channel


def _dequantize_divides(q, scale):
    return q.float() / scale.float()[:, None]


# -- mutants of the other solutions, one stated rule broken each (see tests/hidden/mutants.py) --------
def _metrics_mutant(label, *edits):
    return mutant(A, "stream_metrics", *edits, label=label)


def _roofline_mutant(label, *edits):
    return mutant(A, "decode_roofline", *edits, label=label)


def _spec_mutant(label, *edits):
    return mutant(A, "accept_or_resample", *edits, label=label)


def _quantize_mutant(label, *edits):
    return mutant(A, "quantize_per_channel", *edits, label=label)


def _dequantize_mutant(label, *edits):
    return mutant(A, "dequantize", *edits, label=label)


_TIMES = "times = [start, *chunk_times, end]"
_DECODE_BUDGET = '        batch.append([seq["id"], 1])\n        budget -= 1\n'
_Q_CHECK = "if (q_x <= 0).any():"


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("stream_metrics", {"stream_metrics": _metrics_with(tpot="over_n")}, "TPOT = (latency - TTFT) / (output_tokens - 1)"),
    ("stream_metrics", {"stream_metrics": _metrics_with(tpot="latency")}, "TPOT = (latency - TTFT) / (output_tokens - 1)"),
    ("stream_metrics", {"stream_metrics": _metrics_with(tpot="zero")}, "TPOT is None with fewer than 2 tokens"),
    ("stream_metrics", {"stream_metrics": _metrics_with(itl_from_start=True)},
     "ITL: the gaps between consecutive chunks, TTFT not among them"),
    ("stream_metrics", {"stream_metrics": _metrics_with(empty="crash")}, "no chunk at all: TTFT = end - start"),
    ("stream_metrics", {"stream_metrics": _metrics_with(validate=False)}, "times going backwards raise ValueError"),
    ("decode_roofline", {"decode_roofline": _roofline_with(bits=True)},
     "ridge = peak FLOP/s / bandwidth in bytes/s (decimal GB, bytes not bits)"),
    ("decode_roofline", {"decode_roofline": _roofline_with(giga=2**30)}, "ridge = peak FLOP/s / bandwidth in bytes/s"),
    ("decode_roofline", {"decode_roofline": _roofline_with(flops_factor=1)}, "FLOPs per step = 2 x params x batch"),
    ("decode_roofline", {"decode_roofline": _roofline_with(weights_per_seq=True)},
     "bytes per step: the weights once plus every sequence's KV"),
    ("decode_roofline", {"decode_roofline": _roofline_with(kv_per_batch=False)},
     "bytes per step: the weights once plus every sequence's KV"),
    ("decode_roofline", {"decode_roofline": _roofline_with(per_step=True)}, "tokens/s = batch / step"),
    ("decode_roofline", {"decode_roofline": _roofline_with(add_times=True)},
     "step = the larger of bytes / bandwidth and FLOPs / peak"),
    ("decode_roofline", {"decode_roofline": _roofline_with(strict_memory=True)},
     "bound: 'memory' when the memory time is at least the compute time (equal times)"),
    ("decode_roofline", {"decode_roofline": _roofline_with(validate=False)}, "invalid input raises ValueError"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_admission_first", moved(_ADMISSION, _RETURN, _DECODES))},
     "decodes come first, then running prefills share the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_prefill_first", moved(_PREFILLS, _ADMISSION, _DECODES))},
     "decodes come first, then running prefills share the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_oldest_victim", ("running.pop()  # the newest", "running.pop(0)"), ("gave_up = victim is seq", "gave_up, i = victim is seq, i - 1"))},
     "no free block: the newest running sequence is preempted"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_back_of_queue", ("waiting.insert(0, victim)", "waiting.append(victim)"))}, "to the front of waiting"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_overtakes", (_HEAD_STOPS, _OVERTAKES))},
     "head of line: a waiting request that does not fit stops admission"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_no_chunking", ('n = min(seq["tokens"] - seq["computed"], budget)', 'n = seq["tokens"] - seq["computed"]'))},
     "a running prefill's chunk is capped by the budget left (chunked prefill)"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_never_grows", (_GROWS, "if False:"))},
     "a decode whose newest token starts a block takes one free block"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_ignores_seats", (" and len(running) < max_num_seqs:", ":"))}, "admission stops at max_num_seqs"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_decode_by_count", ('seq["outputs"] >= 1 and ', ""))},
     "one prompt token left and no output yet is a prefill after the decodes"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_keeps_computed", ('victim["blocks"], victim["computed"] = 0, 0', 'victim["blocks"] = 0'))},
     "a preempted sequence keeps tokens and outputs, and gets computed 0 and blocks 0"),
    ("block_pool", {"BlockPool": _pool_with("_pool_unchained", ("self.hash_fn(parent, ", "self.hash_fn(None, "))},
     "chained keys: the same block tokens at different depths are different blocks"),
    ("block_pool", {"BlockPool": _pool_with("_pool_unverified", (_LOOKUP, "if block is None:"))},
     "a hit is verified: a colliding key whose block holds other tokens is a miss"),
    ("block_pool", {"BlockPool": _pool_with("_pool_verifies_block_only", (_LOOKUP, "if block is None or self.prefix_of[block][-size:] != tuple(tokens[i * size:(i + 1) * size]):"))},
     "a hit is verified on the whole prefix, not just the block's own tokens"),
    ("block_pool", {"BlockPool": _pool_with("_pool_no_decrement", ("            self.refs[block] -= 1\n", ""))}, "free decrements reference counts"),
    ("block_pool", {"BlockPool": _pool_with("_pool_to_front", ("self.free_list.append(block)", "self.free_list.appendleft(block)"))},
     "free walks the table last-first; a block reaching 0 goes to the back of the free list"),
    ("block_pool", {"BlockPool": _pool_with("_pool_first_first", ("in reversed(self.tables.pop(seq_id)):", "in self.tables.pop(seq_id):"))},
     "free walks the table last-first; a block reaching 0 goes to the back of the free list"),
    ("block_pool", {"BlockPool": _pool_with("_pool_no_eviction", ("if self.key_of[block] is not None:", "if False:"))}, "taking a cached block from the free list evicts its key"),
    ("block_pool", {"BlockPool": _pool_with("_pool_lookup_all", ("range((len(tokens) - 1) // size)", "range(len(tokens) // size)"))},
     "only the first (len - 1) // block_size blocks are looked up"),
    ("block_pool", {"BlockPool": _pool_with("_pool_ignores_free_hits", ("n_new + sum(self.refs[b] == 0 for b in hits) >", "n_new >"))}, "hits that wait on the free list count against it"),
    ("block_pool", {"BlockPool": _pool_with("_pool_not_atomic", (_FULL, "for taken in hits:\n                self.refs[taken] += 1\n            " + _FULL))}, "not enough free blocks: RuntimeError and nothing changes"),
    ("block_pool", {"BlockPool": _pool_with("_pool_last_wins", ("            if key not in self.cache:", "            if self.cache.get(key) != table[i]:"))},
     "a key already in the cache keeps its first block (first copy wins)"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(resample="target")},
     "after a rejection the replacement comes from max(0, p - q), never from p or q"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(resample="target")}, "follows the target p"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(accept="inverted")}, "follows the target p"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(accept="deterministic")}, "follows the target p"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(lazy=True)},
     "each round draws k uniforms and then exactly one more, even after an early rejection"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(stop=False)},
     "the rejection stops the round: later guesses are not examined"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(bonus_row="k-1")},
     "every guess has p(x) >= q(x): all kept, then the bonus token from p[k]"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(final="multinomial")}, "by inverse CDF"),
    ("accept_or_resample", {"accept_or_resample": _spec_with(check_q=False)},
     "a drafted token with q(x) = 0 raises ValueError"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(rounding="truncate")},
     "values round to the nearest integer, never truncated"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(rounding="away")}, "rounding is half to even"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(axis="tensor")},
     "one scale per output row: rows of very different size keep their own precision"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(axis="column")},
     "one scale per output row, not per column"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(zero_row="nan")},
     "a row of zeros gets scale 1.0 and q = 0"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(qmax=128)}, "scale = max|row| / 127"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(validate=False)}, "invalid weight raises ValueError"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_with(dtype=torch.int32)}, "q is int8"),
    ("quantize_per_channel", {"dequantize": _dequantize_divides}, "dequantize(q, scale) = q * scale"),
    # -- added with the rule-by-rule review: each breaks one more sentence of an exercise text --
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_ttft_not_relative", ("ttft = (chunk_times[0] if chunk_times else end) - start", "ttft = chunk_times[0] if chunk_times else end - start"))},
     "TTFT is the first chunk minus start"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_latency_to_last_chunk", ("latency = end - start", "latency = (chunk_times[-1] if chunk_times else end) - start"))},
     "latency = end - start"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_tpot_per_chunk", ("(output_tokens - 1) if output_tokens > 1", "(len(chunk_times) - 1) if len(chunk_times) > 1"))},
     "TPOT = (latency - TTFT) / (output_tokens - 1)"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_tpot_none_only_at_one", ("if output_tokens > 1 else None", "if output_tokens != 1 else None"))},
     "TPOT is None with fewer than 2 tokens"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_itl_to_end", ("zip(chunk_times, chunk_times[1:])", "zip(chunk_times, [*chunk_times[1:], end])"))},
     "ITL: the gaps between consecutive chunks"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_equal_times_raise", ("if any(later < earlier", "if any(later <= earlier"))},
     "TTFT is the first chunk minus start"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_checks_chunk_order_only", (_TIMES, "times = list(chunk_times)"))},
     "times going backwards raise ValueError (a chunk before start)"),
    ("stream_metrics", {"stream_metrics": _metrics_mutant("_metrics_end_unchecked", (_TIMES, "times = [start, *chunk_times]"))},
     "times going backwards raise ValueError (end before the last chunk)"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_bytes_per_flop", ('"intensity": flops_per_step / bytes_per_step', '"intensity": bytes_per_step / flops_per_step'))},
     "intensity = FLOPs / bytes"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_ridge_in_mixed_units", ('"ridge": peak / bandwidth', '"ridge": peak_tflops / bandwidth_gb_s'))},
     "ridge = peak FLOP/s / bandwidth in bytes/s"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_memory_time_only", ("step_s = max(memory_s, compute_s)", "step_s = memory_s"))},
     "step = the larger of bytes / bandwidth and FLOPs / peak"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_extra_keys", ('"bound": "memory" if', '"memory_s": memory_s, "compute_s": compute_s, "bound": "memory" if'))},
     "returns a dict with the seven keys"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_rejects_empty_cache", ("kv_bytes_per_seq < 0 or", "kv_bytes_per_seq <= 0 or"))},
     "a KV of 0 bytes per sequence is valid"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_allows_batch_0", ("batch < 1", "batch < 0"))},
     "invalid input raises ValueError (batch 0)"),
    ("decode_roofline", {"decode_roofline": _roofline_mutant("_roofline_bytes_per_param_unchecked", ("min(n_params, bytes_per_param, bandwidth_gb_s, peak_tflops)", "min(n_params, bandwidth_gb_s, peak_tflops)"))},
     "invalid input raises ValueError (negative bytes per parameter)"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_floor_blocks", (_GROWS, 'if seq["blocks"] < seq["tokens"] // block_size:'))},
     "a decode whose newest token starts a block takes one free block"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_victim_keeps_blocks", ('                free_blocks += victim["blocks"]\n', ""))},
     "no free block: the newest running sequence is preempted"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_self_victim_decodes", ("            if gave_up:\n                break\n", ""))},
     "it preempts itself and the decodes stop"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_free_decodes", (_DECODE_BUDGET, '        batch.append([seq["id"], 1])\n'))},
     "decodes come first, then running prefills share the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_admission_uncapped", ('n = min(head["tokens"], budget)', 'n = head["tokens"]'))},
     "admission in arrival order, each chunk capped by the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_admission_floor_blocks", ('needed = -(-head["tokens"] // block_size)', 'needed = head["tokens"] // block_size'))},
     "admission in arrival order, each chunk capped by the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_marks_victims", ('victim["blocks"], victim["computed"] = 0, 0', 'victim["blocks"], victim["computed"], victim["preempted"] = 0, 0, True'))},
     "a preempted sequence keeps tokens and outputs, and gets computed 0 and blocks 0"),
    ("schedule_step", {"schedule_step": _schedule_with("_schedule_runs_the_forward_pass", ('            batch.append([seq["id"], n])\n            budget -= n\n', '            batch.append([seq["id"], n])\n            seq["computed"] += n\n            budget -= n\n'))},
     "decodes come first, then running prefills share the budget left"),
    ("block_pool", {"BlockPool": _pool_with("_pool_counts_blocks_not_tokens", ("return list(table), len(hits) * size", "return list(table), len(hits)"))},
     "a shared prefix hits its full blocks and adds a reference to each"),
    ("block_pool", {"BlockPool": _pool_with("_pool_takes_from_back", ("block = self.free_list.popleft()", "block = self.free_list.pop()"))},
     "a fresh pool hands out blocks from the front of the free list"),
    ("block_pool", {"BlockPool": _pool_with("_pool_skips_misses", ("                break\n            hits.append(block)", "                continue\n            hits.append(block)"))},
     "the lookup stops at the first miss"),
    ("block_pool", {"BlockPool": _pool_with("_pool_registers_looked_up_only", ("for i, key in enumerate(keys):", "for i, key in enumerate(keys[:(len(tokens) - 1) // size]):"))},
     "every full block is registered, the last one too"),
    ("block_pool", {"BlockPool": _pool_with("_pool_hit_stays_free", ("            if self.refs[block] == 0:\n                self.free_list.remove(block)\n", ""))},
     "a freed cached block keeps its contents and leaves the free list when hit"),
    ("block_pool", {"BlockPool": _pool_with("_pool_exact_fit_refused", ("> len(self.free_list):", ">= len(self.free_list):"))},
     "a request that needs exactly the free blocks gets them"),
    ("block_pool", {"BlockPool": _pool_with("_pool_empty_prompt_allowed", ('        if not tokens:\n            raise ValueError("the prompt is empty")\n', ""))},
     "ValueError: a sequence that holds blocks, an unknown or freed one, an empty prompt"),
    ("block_pool", {"BlockPool": _pool_with("_pool_reallocates_live_id", ('        if seq_id in self.tables:\n            raise ValueError(f"{seq_id!r} already holds blocks; free it first")\n', ""))},
     "ValueError: a sequence that holds blocks, an unknown or freed one, an empty prompt"),
    ("block_pool", {"BlockPool": _pool_with("_pool_free_unknown_silent", ('raise ValueError(f"unknown sequence {seq_id!r}")', "return"))},
     "ValueError: a sequence that holds blocks, an unknown or freed one, an empty prompt"),
    ("block_pool", {"BlockPool": _pool_with("_pool_table_kept_after_free", ("reversed(self.tables.pop(seq_id))", "reversed(self.tables[seq_id])"))},
     "ValueError: a sequence that holds blocks, an unknown or freed one, an empty prompt"),
    ("accept_or_resample", {"accept_or_resample": _spec_mutant("_spec_q_checked_on_first_guess", (_Q_CHECK, "if q_x[0] <= 0:"))},
     "a drafted token with q(x) = 0 raises ValueError (a later guess)"),
    ("accept_or_resample", {"accept_or_resample": _spec_mutant("_spec_ratio_in_float32", ("q_x = draft_probs[rows, index].double()", "q_x = draft_probs[rows, index]"), ("p_x = target_probs[rows, index].double()", "p_x = target_probs[rows, index]"))},
     "p / q divided in float64"),
    ("accept_or_resample", {"accept_or_resample": _spec_mutant("_spec_tensor_token", ("[int(sample_from_probs(final, generator))]", "[sample_from_probs(final, generator)]"))},
     "returns a list of Python ints"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_mutant("_quantize_unstored_scale", ("w / scale.double()[:, None]", "w / torch.where(amax > 0, amax / 127, torch.ones_like(amax))[:, None]"))},
     "divided by the stored float32 scale"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_mutant("_quantize_scale_float64", ("torch.ones_like(amax)).float()  # (out,)", "torch.ones_like(amax))  # (out,)"))},
     "scale is float32"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_mutant("_quantize_nan_only", ("not torch.isfinite(weight).all()", "torch.isnan(weight).any()"))},
     "invalid weight raises ValueError (an infinity)"),
    ("quantize_per_channel", {"quantize_per_channel": _quantize_mutant("_quantize_accepts_3d", ("weight.dim() != 2", "weight.dim() < 2"))},
     "invalid weight raises ValueError (a 3-D tensor)"),
    ("quantize_per_channel", {"dequantize": _dequantize_mutant("_dequantize_float64", ("return q.float() * scale.float()[:, None]", "return q.double() * scale.double()[:, None]"))},
     "dequantize returns float32"),
    ("quantize_per_channel", {"dequantize": _dequantize_mutant("_dequantize_unbroadcast", ("q.float() * scale.float()[:, None]", "q.float() * scale.float()"))},
     "dequantize(q, scale) = q * scale row by row"),
]
