"""Known-wrong answers to notebook 04, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import torch

from tests.hidden.mutants import mutant

NEG_INF = float("-inf")


# -- apply_temperature -------------------------------------------------------------------------
def _temp_rules(logits, temperature, zero):
    if temperature < 0:
        raise ValueError("negative")
    return zero(logits) if temperature == 0 else logits / temperature


def _temp_last_max(logits, temperature):  # T = 0 keeps the last maximal logit on a tie
    def zero(z):
        flipped = z.flip(-1)
        top = (z.shape[-1] - 1 - flipped.argmax(dim=-1, keepdim=True))
        return torch.full_like(z, NEG_INF).scatter(-1, top, z.gather(-1, top))
    return _temp_rules(logits, temperature, zero)


def _temp_all_max(logits, temperature):  # T = 0 keeps every maximal logit
    return _temp_rules(logits, temperature,
                       lambda z: z.masked_fill(z < z.amax(dim=-1, keepdim=True), NEG_INF))


def _temp_flat_argmax(logits, temperature):  # T = 0 takes one argmax over the whole batch
    def zero(z):
        out = torch.full_like(z, NEG_INF).flatten()
        i = int(z.flatten().argmax())
        out[i] = z.flatten()[i]
        return out.reshape(z.shape)
    return _temp_rules(logits, temperature, zero)


def _temp_one_hot(logits, temperature):  # T = 0 returns 0/1 instead of the logit and -inf
    def zero(z):
        return torch.zeros_like(z).scatter(-1, z.argmax(dim=-1, keepdim=True), 1.0)
    return _temp_rules(logits, temperature, zero)


def _temp_multiply(logits, temperature):
    if temperature < 0:
        raise ValueError("negative")
    return logits * temperature


def _temp_in_place(logits, temperature):
    if temperature < 0:
        raise ValueError("negative")
    if temperature == 0:
        top = logits.argmax(dim=-1, keepdim=True)
        keep = logits.gather(-1, top)
        logits.fill_(NEG_INF)
        return logits.scatter_(-1, top, keep)
    return logits.div_(temperature)


def _temp_accepts_negative(logits, temperature):
    if temperature == 0:
        top = logits.argmax(dim=-1, keepdim=True)
        return torch.full_like(logits, NEG_INF).scatter(-1, top, logits.gather(-1, top))
    return logits / abs(temperature)


def _temp_divides_by_zero(logits, temperature):  # "T = 0 is just a very small T"
    if temperature < 0:
        raise ValueError("negative")
    return logits / max(temperature, 1e-30)



# -- top_k_filter ------------------------------------------------------------------------------
def _topk_indices(logits, k):  # keeps exactly k, dropping ties with the k-th
    if k < 0:
        raise ValueError("negative")
    if k == 0 or k >= logits.shape[-1]:
        return logits.clone()
    idx = torch.topk(logits, k, dim=-1).indices
    return torch.full_like(logits, NEG_INF).scatter(-1, idx, logits.gather(-1, idx))


def _topk_no_bound_check(logits, k):  # torch.topk fails for k > V
    if k < 0:
        raise ValueError("negative")
    if k == 0:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, NEG_INF)


def _topk_zero_means_none(logits, k):  # k = 0 treated as "keep nothing"
    if k < 0:
        raise ValueError("negative")
    if k == 0:
        return torch.full_like(logits, NEG_INF)
    if k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, NEG_INF)


def _topk_off_by_one(logits, k):  # keeps the k+1 largest
    if k < 0:
        raise ValueError("negative")
    if k == 0 or k + 1 >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k + 1, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, NEG_INF)


def _topk_flat(logits, k):  # one threshold for the whole batch
    if k < 0:
        raise ValueError("negative")
    if k == 0 or k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits.flatten(), k).values[-1]
    return logits.masked_fill(logits < kth, NEG_INF)


def _topk_accepts_negative(logits, k):
    if k <= 0 or k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, NEG_INF)



# -- top_p_filter ------------------------------------------------------------------------------
def _nucleus_mask(logits, p, *, before_not_including=True, ties=True, dim_rows=True):
    if not 0 < p <= 1:
        raise ValueError("p")
    if p == 1:
        return logits.clone()
    z = logits if dim_rows else logits.flatten()
    probs = torch.softmax(z.double(), dim=-1)
    sorted_probs, _ = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)
    kept = ((cum - sorted_probs) < p if before_not_including else cum < p) & (sorted_probs > 0)
    kept[..., 0] = True
    smallest = sorted_probs.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True)
    if ties:
        out = z.masked_fill(probs < smallest, NEG_INF)
    else:
        rank = probs.argsort(dim=-1, descending=True).argsort(dim=-1)
        out = z.masked_fill(rank >= kept.sum(dim=-1, keepdim=True), NEG_INF)
    return out.reshape(logits.shape)


def _topp_renormalised(logits, p):  # returns log-probabilities, not the kept logits
    out = _nucleus_mask(logits, p)
    return torch.log_softmax(out, dim=-1)


def _topp_accepts_zero(logits, p):
    if p == 0:
        return torch.full_like(logits, NEG_INF)
    return _nucleus_mask(logits, p)



# -- min_p_filter ------------------------------------------------------------------------------
def _minp(logits, min_p, bound_of, *, strict=False, check=True):
    if check and not 0 <= min_p <= 1:
        raise ValueError("min_p")
    probs = torch.softmax(logits.double(), dim=-1)
    bound = bound_of(probs, min_p)
    drop = probs <= bound if strict else probs < bound
    if min_p == 0:
        return logits.clone()
    return logits.masked_fill(drop, NEG_INF)


def _row_bound(probs, m):
    return m * probs.amax(dim=-1, keepdim=True)



# -- apply_penalties ---------------------------------------------------------------------------
def _penalties(logits, generated_ids, frequency_penalty=0.0, presence_penalty=0.0, repetition_penalty=1.0, *,
               divide_always=False, subtract_first=False, presence_per_count=False, frequency_once=False,
               in_place=False, check=True):
    if check and repetition_penalty <= 0:
        raise ValueError("repetition_penalty")
    counts = torch.zeros(logits.shape[-1], dtype=logits.dtype)
    for token in generated_ids:
        counts[token] += 1
    seen = (counts > 0).to(logits.dtype)
    out = logits if in_place else logits.clone()

    def subtract(x):
        freq = seen if frequency_once else counts
        pres = counts if presence_per_count else seen
        return x - freq * frequency_penalty - pres * presence_penalty

    def repeat(x):
        penalised = x / repetition_penalty if divide_always else torch.where(
            x < 0, x * repetition_penalty, x / repetition_penalty)
        return torch.where(seen > 0, penalised, x)

    result = repeat(subtract(out)) if subtract_first else subtract(repeat(out))
    if in_place:
        logits.copy_(result)
        return logits
    return result



# -- stop_at -----------------------------------------------------------------------------------
def _stop_each_piece(pieces, stops):  # looks for the stop in each piece alone
    text = ""
    for piece in pieces:
        hits = [piece.find(s) for s in stops if s in piece]
        if hits:
            return text + piece[:min(hits)], True
        text += piece
    return text, False


def _stop_first_listed(pieces, stops):  # cuts at the first stop in list order, not the earliest
    text = ""
    for piece in pieces:
        text += piece
        for s in stops:
            if s in text:
                return text[:text.find(s)], True
    return text, False


def _stop_keeps_stop(pieces, stops):  # leaves the stop string in the text
    text = ""
    for piece in pieces:
        text += piece
        hits = [text.find(s) + len(s) for s in stops if s in text]
        if hits:
            return text[:min(hits)], True
    return text, False


def _stop_reads_everything(pieces, stops):  # joins the whole stream first
    text = "".join(pieces)
    hits = [text.find(s) for s in stops if s in text]
    return (text[:min(hits)], True) if hits else (text, False)


def _stop_indexes(pieces, stops):  # takes the length of the pieces
    text = ""
    for i in range(len(pieces)):
        text += pieces[i]
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return text[:min(hits)], True
    return text, False


def _stop_endswith(pieces, stops):  # only notices a stop at the very end of the text
    text = ""
    for piece in pieces:
        text += piece
        for s in stops:
            if text.endswith(s):
                return text[:-len(s)], True
    return text, False



# -- sample_token ------------------------------------------------------------------------------
def _cdf_pick(probs, u, *, scale=True):
    cdf = probs.double().cumsum(dim=0)
    target = u * cdf[-1].item() if scale else u
    return int(torch.searchsorted(cdf, target, right=True).clamp_max(len(cdf) - 1))


def _sample_unscaled(probs, generator):  # assumes the probabilities sum to 1
    return _cdf_pick(probs, torch.rand((), generator=generator, dtype=torch.float64).item(), scale=False)


def _sample_multinomial(probs, generator):
    return int(torch.multinomial(probs.double(), 1, generator=generator))


def _sample_returns_tensor(probs, generator):
    u = torch.rand((), generator=generator, dtype=torch.float64).item()
    cdf = probs.double().cumsum(dim=0)
    return torch.searchsorted(cdf, u * cdf[-1], right=True).clamp_max(len(cdf) - 1)


def _sample_two_draws(probs, generator):  # a second, wasted draw per call
    torch.rand((), generator=generator, dtype=torch.float64)
    return _cdf_pick(probs, torch.rand((), generator=generator, dtype=torch.float64).item())


def _sample_float32(probs, generator):  # a float32 uniform: a different stream
    return _cdf_pick(probs, torch.rand((), generator=generator).item())


def _sample_argmax(probs, generator):  # greedy: ignores the generator
    return int(probs.argmax())


def _sample_global_rng(probs, generator):  # ignores the generator it was given
    return _cdf_pick(probs, torch.rand((), dtype=torch.float64).item())




# -- generate_text -----------------------------------------------------------------------------
def _generate_with(label, *edits):
    """The notebook's own generate loop with one rule of the exercise broken (see tests/hidden/mutants.py)."""
    return mutant("04_sampling", "generate_text", *edits, label=label)


_PROCESS = "logits = top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)"
_SAMPLE = "        token = sample_token(torch.softmax(logits, dim=-1), generator)"
_ENDS = 'return token_ids, tokenizer.decode(token_ids[:-1]), "stop"'


# -- named versions of the one-line wrong answers ----------------------------------------------
def _topp_mass_including(logits, p):  # keeps a token while the mass *including* it is below p
    return _nucleus_mask(logits, p, before_not_including=False)


def _topp_drops_ties(logits, p):  # cuts by rank, so a tie with the last kept token is dropped
    return _nucleus_mask(logits, p, ties=False)


def _topp_flat(logits, p):  # one nucleus over the whole batch
    return _nucleus_mask(logits, p, dim_rows=False)


def _topp_keeps_all(logits, p):  # never filters
    return logits.clone()


def _minp_absolute(logits, min_p):  # min_p as an absolute probability floor
    return _minp(logits, min_p, lambda probs, m: m)


def _minp_strict(logits, min_p):  # drops tokens exactly at the bound
    return _minp(logits, min_p, _row_bound, strict=True)


def _minp_batch_max(logits, min_p):  # one top probability for the whole batch
    return _minp(logits, min_p, lambda probs, m: m * probs.max())


def _minp_no_range_check(logits, min_p):
    return _minp(logits, min_p, _row_bound, check=False)


def _minp_on_logits(logits, min_p):  # compares logits, not probabilities
    if not 0 <= min_p <= 1:
        raise ValueError("min_p")
    return logits.masked_fill(logits < min_p * logits.amax(dim=-1, keepdim=True), NEG_INF)


def _penalties_with(**options):
    def wrong(logits, generated_ids, frequency_penalty=0.0, presence_penalty=0.0, repetition_penalty=1.0):
        return _penalties(logits, generated_ids, frequency_penalty, presence_penalty, repetition_penalty, **options)
    wrong.__name__ = "_penalties_" + "_".join(options)
    return wrong


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("apply_temperature", {"apply_temperature": _temp_last_max}, "T = 0 with a tie keeps only the first maximal logit"),
    ("apply_temperature", {"apply_temperature": _temp_all_max}, "T = 0 with a tie"),
    ("apply_temperature", {"apply_temperature": _temp_flat_argmax}, "T = 0 on (B, V) rows"),
    ("apply_temperature", {"apply_temperature": _temp_one_hot}, "T = 0 keeps only the first maximal logit of each row"),
    ("apply_temperature", {"apply_temperature": _temp_multiply}, "T > 0 divides every logit by T"),
    ("apply_temperature", {"apply_temperature": _temp_in_place}, "leaves the input logits unchanged"),
    ("apply_temperature", {"apply_temperature": _temp_accepts_negative}, "a negative temperature raises ValueError"),
    ("apply_temperature", {"apply_temperature": _temp_divides_by_zero}, "T = 0 keeps only the first maximal logit"),
    ("top_k_filter", {"top_k_filter": _topk_indices}, "tied with the k-th"),
    ("top_k_filter", {"top_k_filter": _topk_indices}, "ties with the k-th largest are kept, per row"),
    ("top_k_filter", {"top_k_filter": _topk_no_bound_check}, "k >= V keeps every logit"),
    ("top_k_filter", {"top_k_filter": _topk_zero_means_none}, "k = 0 keeps every logit"),
    ("top_k_filter", {"top_k_filter": _topk_off_by_one}, "keeps the k largest logits of each row unchanged"),
    ("top_k_filter", {"top_k_filter": _topk_flat}, "per row"),
    ("top_k_filter", {"top_k_filter": _topk_accepts_negative}, "a negative k raises ValueError"),
    ("top_p_filter", {"top_p_filter": _topp_mass_including}, "keeps a token while the mass ranked above it is below p"),
    ("top_p_filter", {"top_p_filter": _topp_drops_ties}, "tied in probability with the least likely kept one"),
    ("top_p_filter", {"top_p_filter": _topp_flat}, "each row of a (B, V) batch gets its own nucleus"),
    ("top_p_filter", {"top_p_filter": _topp_renormalised}, "keeps a token while the mass ranked above it is below p"),
    ("top_p_filter", {"top_p_filter": _topp_accepts_zero}, "p = 0 raises ValueError"),
    ("top_p_filter", {"top_p_filter": _topp_keeps_all}, "keeps a token while the mass ranked above it is below p"),
    ("min_p_filter", {"min_p_filter": _minp_absolute}, "keeps tokens with probability >= min_p x the row's top"),
    ("min_p_filter", {"min_p_filter": _minp_strict}, "min_p = 1 keeps every token tied with the top one"),
    ("min_p_filter", {"min_p_filter": _minp_batch_max}, "each row of a (B, V) batch is cut against its own"),
    ("min_p_filter", {"min_p_filter": _minp_no_range_check}, "min_p outside [0, 1] raises ValueError"),
    ("min_p_filter", {"min_p_filter": _minp_on_logits}, "keeps tokens with probability >= min_p x"),
    ("apply_penalties", {"apply_penalties": _penalties_with(divide_always=True)},
     "divides a positive logit and multiplies a negative one"),
    ("apply_penalties", {"apply_penalties": _penalties_with(subtract_first=True)},
     "the repetition penalty is applied before the frequency and presence penalties"),
    ("apply_penalties", {"apply_penalties": _penalties_with(presence_per_count=True)},
     "the presence penalty is subtracted once per token that occurred"),
    ("apply_penalties", {"apply_penalties": _penalties_with(frequency_once=True)},
     "the frequency penalty is subtracted once per occurrence"),
    ("apply_penalties", {"apply_penalties": _penalties_with(in_place=True)}, "leaves the input logits unchanged"),
    ("apply_penalties", {"apply_penalties": _penalties_with(check=False)}, "repetition_penalty <= 0 raises ValueError"),
    ("stop_at", {"stop_at": _stop_each_piece}, "a stop string split across three pieces is found"),
    ("stop_at", {"stop_at": _stop_each_piece}, "a stop string arriving one letter at a time"),
    ("stop_at", {"stop_at": _stop_first_listed}, "cut before the earliest start, not the first listed"),
    ("stop_at", {"stop_at": _stop_keeps_stop}, "the text before the stop string and True"),
    ("stop_at", {"stop_at": _stop_reads_everything}, "stops reading pieces as soon as a stop string completes"),
    ("stop_at", {"stop_at": _stop_reads_everything}, "the first stop to complete ends the stream"),
    ("stop_at", {"stop_at": _stop_indexes}, "given as a stream"),
    ("stop_at", {"stop_at": _stop_endswith}, "a stop at the very start leaves the empty text and True"),
    ("sample_token", {"sample_token": _sample_unscaled}, "weights that do not sum to 1, u scaled by their total"),
    ("sample_token", {"sample_token": _sample_multinomial}, "cumulative sum exceeds u x total, for probabilities summing to 1"),
    ("sample_token", {"sample_token": _sample_returns_tensor}, "each draw is returned as a Python int"),
    ("sample_token", {"sample_token": _sample_two_draws}, "each call draws exactly one uniform from the generator"),
    ("sample_token", {"sample_token": _sample_float32}, "cumulative sum exceeds u x total"),
    ("sample_token", {"sample_token": _sample_argmax}, "draws follow the given probabilities"),
    ("sample_token", {"sample_token": _sample_argmax}, "cumulative sum exceeds u x total"),
    ("sample_token", {"sample_token": _sample_global_rng}, "cumulative sum exceeds u x total"),
    ("generate_text", {"generate_text": _generate_with("_generate_multinomial", (_SAMPLE, "        token = int(torch.multinomial(torch.softmax(logits, dim=-1).double(), 1, generator=generator))"))}, "one uniform per step by inverse CDF"),
    ("generate_text", {"generate_text": _generate_with("_generate_truncate_first", (_PROCESS, "logits = apply_temperature(top_p_filter(top_k_filter(logits, top_k), top_p), temperature)"))}, "temperature, then top-p"),
    ("generate_text", {"generate_text": _generate_with("_generate_reseed", (_SAMPLE, "        generator = torch.Generator().manual_seed(seed)\n" + _SAMPLE))}, "one generator per call"),
    ("generate_text", {"generate_text": _generate_with("_generate_eos", (_ENDS, _ENDS.replace('"stop"', '"eos"')))},
     "<|end|> ends it with finish reason 'stop', left out of the text: the finish reason"),
    ("generate_text", {"generate_text": _generate_with("_generate_end_in_text", (_ENDS, _ENDS.replace("token_ids[:-1]", "token_ids")))},
     "<|end|> ends it with finish reason 'stop', left out of the text: the text"),
    ("generate_text", {"generate_text": _generate_with("_generate_no_stops", ('        if stopped:\n            return token_ids, text, "stop"\n', ""))}, "a stop string cuts the text before the earliest"),
]
