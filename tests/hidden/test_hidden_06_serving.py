"""Known-wrong answers to notebook 06, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

from collections import deque

import torch

from course_lib.checks.serving import chain_hash
from course_lib.sampling import sample_from_probs


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
def _schedule_with(*, order=("decode", "prefill", "admit"), victim="newest", front=True, admit_after_preempt=False,
                   head_of_line=True, chunk=True, grow=True, seats=True, needs_output=True, reset=True):
    def schedule_step(running, waiting, free_blocks, block_size, max_num_seqs, max_batched_tokens):
        state = {"budget": max_batched_tokens, "free": free_blocks}
        batch, preempted = [], []

        def decoding(seq):
            return (seq["outputs"] >= 1 or not needs_output) and seq["tokens"] - seq["computed"] == 1

        def decodes():
            i = 0
            while i < len(running):
                seq = running[i]
                i += 1
                if not decoding(seq):
                    continue
                if grow and seq["blocks"] < -(-seq["tokens"] // block_size):
                    gone = False
                    while state["free"] == 0 and not gone:
                        out = running.pop() if victim == "newest" else running.pop(0)
                        state["free"] += out["blocks"]
                        out["blocks"] = 0
                        if reset:
                            out["computed"] = 0
                        if front:
                            waiting.insert(0, out)
                        else:
                            waiting.append(out)
                        preempted.append(out["id"])
                        gone = out is seq
                        if victim != "newest":
                            i -= 1
                    if gone:
                        return
                    state["free"] -= 1
                    seq["blocks"] += 1
                batch.append([seq["id"], 1])
                state["budget"] -= 1

        def prefills():
            for seq in running:
                if state["budget"] <= 0:
                    break
                if not decoding(seq) and not any(e[0] == seq["id"] for e in batch):
                    n = seq["tokens"] - seq["computed"]
                    n = min(n, state["budget"]) if chunk else n
                    batch.append([seq["id"], n])
                    state["budget"] -= n

        def admit():
            j = 0
            while (admit_after_preempt or not preempted) and j < len(waiting) and state["budget"] > 0 \
                    and (len(running) < max_num_seqs or not seats):
                head = waiting[j]
                need = -(-head["tokens"] // block_size)
                if need > state["free"]:
                    if head_of_line:
                        break
                    j += 1
                    continue
                waiting.pop(j)
                state["free"] -= need
                head["blocks"] = need
                running.append(head)
                n = min(head["tokens"], state["budget"])
                batch.append([head["id"], n])
                state["budget"] -= n

        for phase in order:
            {"decode": decodes, "prefill": prefills, "admit": admit}[phase]()
        return {"batch": batch, "preempted": preempted, "running": running, "waiting": waiting,
                "free_blocks": state["free"]}
    schedule_step.__name__ = "_schedule_" + "_".join(
        k for k, on in (("admission_first", order[0] == "admit"), ("prefill_first", order[0] == "prefill"),
                        ("oldest_victim", victim != "newest"), ("back_of_queue", not front),
                        ("admits_after_preempting", admit_after_preempt), ("overtakes", not head_of_line),
                        ("no_chunking", not chunk), ("never_grows", not grow), ("ignores_seats", not seats),
                        ("decode_by_count", not needs_output), ("keeps_computed", not reset)) if on)
    return schedule_step


# -- block_pool --------------------------------------------------------------------------------
def _pool_with(*, chained=True, verify="prefix", decrement=True, to_back=True, last_first=True, evict=True,
               lookup_all=False, count_free_hits=True, atomic=True, first_wins=True):
    class BlockPool:
        def __init__(self, num_blocks, block_size, hash_fn=chain_hash):
            self.size, self.hash_fn = block_size, hash_fn
            self.free_list, self.refs = deque(range(num_blocks)), [0] * num_blocks
            self.cache, self.key, self.prefix, self.tables = {}, [None] * num_blocks, [None] * num_blocks, {}

        def allocate(self, seq_id, token_ids):
            tokens = list(token_ids)
            if not tokens or seq_id in self.tables:
                raise ValueError("bad")
            size = self.size
            keys, parent = [], None
            for i in range(len(tokens) // size):
                key = self.hash_fn(parent if chained else None, tuple(tokens[i * size:(i + 1) * size]))
                keys.append(key)
                parent = key
            hits = []
            for i in range(len(tokens) // size if lookup_all else (len(tokens) - 1) // size):
                block = self.cache.get(keys[i])
                if block is None:
                    break
                if verify == "prefix" and self.prefix[block] != tuple(tokens[:(i + 1) * size]):
                    break
                if verify == "block" and self.prefix[block][-size:] != tuple(tokens[i * size:(i + 1) * size]):
                    break
                hits.append(block)
            new = -(-len(tokens) // size) - len(hits)
            if not atomic:  # takes the hits before it knows the allocation fits
                for b in hits:
                    self.refs[b] += 1
            needed = new + (sum(self.refs[b] == 0 for b in hits) if count_free_hits else 0)
            if needed > len(self.free_list):
                raise RuntimeError("full")
            for b in hits:
                if self.refs[b] == 0 or (not atomic and self.refs[b] == 1 and b in self.free_list):
                    self.free_list.remove(b)
                if atomic:
                    self.refs[b] += 1
            table = list(hits)
            for _ in range(new):
                b = self.free_list.popleft()
                if evict and self.key[b] is not None:
                    del self.cache[self.key[b]]
                    self.key[b] = self.prefix[b] = None
                self.refs[b] = 1
                table.append(b)
            for i, k in enumerate(keys):
                if k not in self.cache or (not first_wins and self.cache[k] != table[i]):
                    self.cache[k], self.key[table[i]] = table[i], k
                    self.prefix[table[i]] = tuple(tokens[:(i + 1) * size])
            self.tables[seq_id] = table
            return list(table), len(hits) * size

        def free(self, seq_id):
            if seq_id not in self.tables:
                raise ValueError("unknown")
            table = self.tables.pop(seq_id)
            for b in (reversed(table) if last_first else table):
                if decrement:
                    self.refs[b] -= 1
                if self.refs[b] == 0 and b not in self.free_list:
                    if to_back:
                        self.free_list.append(b)
                    else:
                        self.free_list.appendleft(b)

        def ref_count(self, block_id):
            return self.refs[block_id]

        def num_free(self):
            return len(self.free_list)

    BlockPool.__name__ = "_pool_" + "_".join(
        k for k, on in (("unchained", not chained), (f"verify_{verify}", verify != "prefix"),
                        ("no_decrement", not decrement), ("to_front", not to_back), ("first_first", not last_first),
                        ("no_eviction", not evict), ("lookup_all", lookup_all), ("ignores_free_hits", not count_free_hits),
                        ("not_atomic", not atomic), ("last_wins", not first_wins)) if on)
    return BlockPool


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
    ("schedule_step", {"schedule_step": _schedule_with(order=("admit", "decode", "prefill"))},
     "decodes come first, then running prefills share the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with(order=("prefill", "decode", "admit"))},
     "decodes come first, then running prefills share the budget left"),
    ("schedule_step", {"schedule_step": _schedule_with(victim="oldest")},
     "no free block: the newest running sequence is preempted"),
    ("schedule_step", {"schedule_step": _schedule_with(front=False)}, "to the front of waiting"),
    ("schedule_step", {"schedule_step": _schedule_with(head_of_line=False)},
     "head of line: a waiting request that does not fit stops admission"),
    ("schedule_step", {"schedule_step": _schedule_with(chunk=False)},
     "a running prefill's chunk is capped by the budget left (chunked prefill)"),
    ("schedule_step", {"schedule_step": _schedule_with(grow=False)},
     "a decode whose newest token starts a block takes one free block"),
    ("schedule_step", {"schedule_step": _schedule_with(seats=False)}, "admission stops at max_num_seqs"),
    ("schedule_step", {"schedule_step": _schedule_with(needs_output=False)},
     "one prompt token left and no output yet is a prefill after the decodes"),
    ("schedule_step", {"schedule_step": _schedule_with(reset=False)},
     "a preempted sequence keeps tokens and outputs, and gets computed 0 and blocks 0"),
    ("block_pool", {"BlockPool": _pool_with(chained=False)},
     "chained keys: the same block tokens at different depths are different blocks"),
    ("block_pool", {"BlockPool": _pool_with(verify="none")},
     "a hit is verified: a colliding key whose block holds other tokens is a miss"),
    ("block_pool", {"BlockPool": _pool_with(verify="block")},
     "a hit is verified on the whole prefix, not just the block's own tokens"),
    ("block_pool", {"BlockPool": _pool_with(decrement=False)}, "free decrements reference counts"),
    ("block_pool", {"BlockPool": _pool_with(to_back=False)},
     "free walks the table last-first; a block reaching 0 goes to the back of the free list"),
    ("block_pool", {"BlockPool": _pool_with(last_first=False)},
     "free walks the table last-first; a block reaching 0 goes to the back of the free list"),
    ("block_pool", {"BlockPool": _pool_with(evict=False)}, "taking a cached block from the free list evicts its key"),
    ("block_pool", {"BlockPool": _pool_with(lookup_all=True)},
     "only the first (len - 1) // block_size blocks are looked up"),
    ("block_pool", {"BlockPool": _pool_with(count_free_hits=False)}, "hits that wait on the free list count against it"),
    ("block_pool", {"BlockPool": _pool_with(atomic=False)}, "not enough free blocks: RuntimeError and nothing changes"),
    ("block_pool", {"BlockPool": _pool_with(first_wins=False)},
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
]
