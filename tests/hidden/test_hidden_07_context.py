"""Known-wrong answers to notebook 07, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter

from course_lib.context.trace_log import GENESIS, canonical
from tests.hidden.conftest import answers


def _setup(name):
    """A name the notebook's setup cell defines (EMAIL_RE, NUMBER_RE), read when a wrong answer runs."""
    return answers("07_context")[name]


# -- fit_context -------------------------------------------------------------------------------
def _fit_with(*, margin=True, reserve=True, order="score", ties="input", passage_stop=True, newest=True,
              turn_stop=True, passages_first=True, fits="<=", raises="message", turns_ascending=True,
              count_required=True):
    def fit_context(window, reserve_output, margin_, system_tokens, question_tokens, turns, passages):
        budget = window - (reserve_output if reserve else 0) - (margin_ if margin else 0)
        required = system_tokens + question_tokens
        if required > budget and raises != "none":
            raise ValueError(f"over by {required - budget} tokens" if raises == "message" else "too long")
        used = required

        def fit(tokens):
            return used + tokens <= budget if fits == "<=" else used + tokens < budget

        if order == "input":
            ranked = list(passages)
        elif ties == "by_id":
            ranked = sorted(passages, key=lambda p: (-p[2], p[0]))
        else:
            ranked = sorted(passages, key=lambda p: -p[2])
        kept, kept_turns = [], []

        def fill_passages():
            nonlocal used
            for pid, tokens, _ in ranked:
                if not fit(tokens):
                    if passage_stop:
                        break
                    continue
                kept.append(pid)
                used += tokens

        def fill_turns():
            nonlocal used
            indices = range(len(turns) - 1, -1, -1) if newest else range(len(turns))
            for i in indices:
                if not fit(turns[i]):
                    if turn_stop:
                        break
                    continue
                kept_turns.append(i)
                used += turns[i]

        for fill in ((fill_passages, fill_turns) if passages_first else (fill_turns, fill_passages)):
            fill()
        turns_out = sorted(kept_turns) if turns_ascending else sorted(kept_turns, reverse=True)
        tokens = used if count_required else used - required
        return {"passages": kept, "turns": turns_out, "prompt_tokens": tokens, "left": budget - used}
    fit_context.__name__ = "_fit_" + "_".join(
        k for k, on in (("no_margin", not margin), ("no_reserve", not reserve), ("input_order", order == "input"),
                        ("ties_by_id", ties == "by_id"), ("skips_passages", not passage_stop),
                        ("oldest_turns", not newest), ("holes", not turn_stop), ("history_first", not passages_first),
                        ("strict_fit", fits != "<="), (f"raise_{raises}", raises != "message"),
                        ("turns_descending", not turns_ascending), ("pieces_only", not count_required)) if on)
    return fit_context


# -- bm25_scores -------------------------------------------------------------------------------
def _bm25_with(*, idf="okapi", floor="average", floor_when="negative", average="all_before", tf="count",
               document_frequency="passages", query="as_given", length=True, avgdl="terms", epsilon_used=True,
               k1_used=True, validate=True):
    def bm25_scores(query_terms, corpus_terms, k1=1.5, b=0.75, epsilon=0.25):
        if validate and (not corpus_terms or not any(corpus_terms)):
            raise ValueError("empty corpus")
        k1 = k1 if k1_used else 1.5
        epsilon = epsilon if epsilon_used else 0.25
        n = len(corpus_terms)
        lengths = [len(d) if avgdl == "terms" else len(set(d)) for d in corpus_terms]
        average_length = sum(lengths) / n
        counts = [Counter(d) for d in corpus_terms]
        if document_frequency == "passages":
            holding = Counter(t for c in counts for t in c)
        else:
            holding = Counter(t for d in corpus_terms for t in d)
        if idf == "okapi":
            raw = {t: math.log(n - m + 0.5) - math.log(m + 0.5) for t, m in holding.items()}
        else:  # the textbook log(N / n)
            raw = {t: math.log(n / m) for t, m in holding.items()}
        if floor == "none":
            table = raw
        else:
            if average == "all_before":
                mean = sum(raw.values()) / len(raw)
            elif average == "query":
                present = [raw[q] for q in query_terms if q in raw] or [0.0]
                mean = sum(present) / len(present)
            else:  # after clamping negatives to 0
                mean = sum(max(v, 0.0) for v in raw.values()) / len(raw)
            value = {"average": epsilon * mean, "epsilon": epsilon, "zero": 0.0,
                     "clamped": max(epsilon * mean, 0.0)}[floor]
            below = (lambda v: v < 0) if floor_when == "negative" else (lambda v: v <= 0)
            table = {t: (value if below(v) else v) for t, v in raw.items()}
        terms = query_terms if query == "as_given" else list(dict.fromkeys(query_terms))
        scores = []
        for c, dl in zip(counts, lengths):
            norm = k1 * (1 - b + b * dl / average_length) if length else k1
            total = 0.0
            for q in terms:
                f = c.get(q, 0) if tf == "count" else min(c.get(q, 0), 1)
                total += table.get(q, 0.0) * f * (k1 + 1) / (f + norm) if f + norm else 0.0
            scores.append(total)
        return scores
    bm25_scores.__name__ = "_bm25_" + "_".join(
        k for k, on in ((f"idf_{idf}", idf != "okapi"), (f"floor_{floor}", floor != "average"),
                        ("floors_zero", floor_when != "negative"), (f"average_{average}", average != "all_before"),
                        ("binary_tf", tf != "count"), ("df_occurrences", document_frequency != "passages"),
                        ("query_set", query != "as_given"), ("no_length_norm", not length),
                        ("avgdl_unique", avgdl != "terms"), ("fixed_epsilon", not epsilon_used),
                        ("fixed_k1", not k1_used), ("no_validation", not validate)) if on)
    return bm25_scores


# -- abstention_threshold ----------------------------------------------------------------------
def _validate_threshold_args(confidences, correct, target):
    if len(confidences) != len(correct) or not confidences or not 0 < target <= 1 \
            or any(not 0 <= c <= 1 for c in confidences):
        raise ValueError("bad input")


def _pick_with(*, choose="lowest", scan="all", answered_cmp=">=", target_cmp=">=", none=math.inf,
               candidates="confidences", accuracy_over="answered", validate=True):
    def pick_threshold(confidences, correct, target_accuracy):
        if validate:
            _validate_threshold_args(confidences, correct, target_accuracy)

        def accuracy(t):
            answered = [ok for c, ok in zip(confidences, correct) if (c >= t if answered_cmp == ">=" else c > t)]
            if not answered:
                return -1.0
            return sum(answered) / (len(answered) if accuracy_over == "answered" else len(confidences))

        def reaches(t):
            a = accuracy(t)
            return a >= target_accuracy if target_cmp == ">=" else a > target_accuracy

        pool = sorted(set(confidences), reverse=True) if candidates == "confidences" else \
            [i / 20 for i in range(20, -1, -1)]
        if scan == "stop_at_first_miss":  # assumes accuracy falls as the threshold falls
            best = none
            for t in pool:
                if not reaches(t):
                    if best is not none:
                        break
                    continue
                best = t
            return best
        reaching = [t for t in pool if reaches(t)]
        if not reaching:
            return none
        return min(reaching) if choose == "lowest" else max(reaching)
    pick_threshold.__name__ = "_pick_" + "_".join(
        k for k, on in (("highest", choose != "lowest"), ("stops_early", scan != "all"),
                        ("strict_answered", answered_cmp != ">="), ("strict_target", target_cmp != ">="),
                        (f"none_{none}", none != math.inf), ("grid", candidates != "confidences"),
                        ("accuracy_over_all", accuracy_over != "answered"), ("no_validation", not validate)) if on)
    return pick_threshold


def _selective_with(*, empty_accuracy=None, wrong="answered", coverage="all"):
    def selective_answer(confidences, correct, threshold):
        answered = [ok for c, ok in zip(confidences, correct) if c >= threshold]
        right = sum(answered)
        if coverage == "all":
            share = len(answered) / len(confidences)
        else:  # answered against abstained
            share = len(answered) / max(len(confidences) - len(answered), 1)
        wrong_count = len(answered) - right if wrong == "answered" else len(correct) - sum(correct)
        return {"coverage": share, "accuracy": right / len(answered) if answered else empty_accuracy,
                "answered": len(answered), "wrong_answered": wrong_count}
    selective_answer.__name__ = "_selective_" + "_".join(
        k for k, on in (("empty_zero", empty_accuracy is not None), ("wrong_all", wrong != "answered"),
                        ("coverage_vs_abstained", coverage != "all")) if on)
    return selective_answer


# -- task_cost ---------------------------------------------------------------------------------
def _cost_with(*, per=1e6, swapped=False, completion=True, divide_success="successes", zero="inf",
               failure="failed", failure_in_request=False, validate=True):
    def task_cost(requests, successes, prompt_tokens, completion_tokens, input_per_million, output_per_million,
                  failure_cost=0.0):
        if validate and (requests < 1 or not 0 <= successes <= requests or
                         min(prompt_tokens, completion_tokens, input_per_million, output_per_million, failure_cost) < 0):
            raise ValueError("bad input")
        inp, out = (output_per_million, input_per_million) if swapped else (input_per_million, output_per_million)
        tokens_usd = (prompt_tokens * inp + (completion_tokens * out if completion else 0)) / per
        extra = {"failed": requests - successes, "requests": requests, "none": 0}[failure] * failure_cost
        per_request = (tokens_usd + (extra if failure_in_request else 0)) / requests
        if successes == 0:
            per_success = {"inf": math.inf, "zero": 0.0, "tokens": tokens_usd}[zero]
        else:
            per_success = (tokens_usd + extra) / (successes if divide_success == "successes" else requests)
        return {"tokens_usd": tokens_usd, "per_request": per_request, "per_success": per_success}
    task_cost.__name__ = "_cost_" + "_".join(
        k for k, on in (("per_thousand", per != 1e6), ("swapped_prices", swapped), ("no_completion", not completion),
                        ("per_request_divisor", divide_success != "successes"), (f"zero_{zero}", zero != "inf"),
                        (f"failure_{failure}", failure != "failed"), ("failure_in_request", failure_in_request),
                        ("no_validation", not validate)) if on)
    return task_cost


# -- trace_chain -------------------------------------------------------------------------------
def _luhn(digits, parity=1):
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == parity:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _redact_with(*, phones=True, luhn="right", bare_phones=False, emails_first=True, phone_min=9, card_lengths=(13, 19),
                 plus_cards=False):
    def redact_pii(text):
        def numbers(s):
            def replace(match):
                run = match.group()
                digits = re.sub(r"\D", "", run)
                valid = {"right": _luhn(digits), "none": True, "wrong_parity": _luhn(digits, parity=0)}[luhn]
                if (plus_cards or not run.startswith("+")) and card_lengths[0] <= len(digits) <= card_lengths[1] and valid:
                    return "[CARD]"
                if phones and phone_min <= len(digits) <= 15 and (bare_phones or run.startswith("+") or run != digits):
                    return "[PHONE]"
                return run
            return _setup("NUMBER_RE").sub(replace, s)
        if emails_first:
            return numbers(_setup("EMAIL_RE").sub("[EMAIL]", text))
        return _setup("EMAIL_RE").sub("[EMAIL]", numbers(text))
    redact_pii.__name__ = "_redact_" + "_".join(
        k for k, on in (("no_phones", not phones), (f"luhn_{luhn}", luhn != "right"), ("bare_phones", bare_phones),
                        ("numbers_first", not emails_first), (f"phone_min_{phone_min}", phone_min != 9),
                        ("cards_16_only", card_lengths != (13, 19)), ("plus_cards", plus_cards)) if on)
    return redact_pii


_RIGHT_REDACT = _redact_with()


def _chain_with(*, with_prev=True, redact_before_hash=True, genesis=GENESIS, deep=True, line="canonical",
                copy_input=True, prev_from="hash"):
    def chain_records(records):
        def clean(value, depth=0):
            if isinstance(value, str):
                return _RIGHT_REDACT(value)
            if isinstance(value, dict) and (deep or depth == 0):
                return {k: clean(v, depth + 1) for k, v in value.items()}
            if isinstance(value, list) and deep:
                return [clean(v, depth + 1) for v in value]
            return value

        lines, prev = [], genesis
        for record in records:
            if copy_input:
                redacted = clean(record)
            else:  # redacts in place: the caller's records change
                for key, value in list(record.items()):
                    record[key] = clean(value, 1)
                redacted = record
            hashed = redacted if redact_before_hash else record
            payload = {"prev": prev, "record": hashed} if with_prev else {"record": hashed}
            digest = hashlib.sha256(canonical(payload)).hexdigest()
            entry = {"hash": digest, "prev": prev, "record": redacted}
            lines.append(canonical(entry).decode("utf-8") if line == "canonical" else json.dumps(entry))
            prev = digest if prev_from == "hash" else prev
        return lines
    chain_records.__name__ = "_chain_" + "_".join(
        k for k, on in (("no_prev_in_hash", not with_prev), ("hashes_raw_record", not redact_before_hash),
                        ("empty_genesis", genesis != GENESIS), ("shallow", not deep), ("plain_json", line != "canonical"),
                        ("mutates_input", not copy_input), ("prev_stays_genesis", prev_from != "hash")) if on)
    return chain_records


def _first_bad_with(*, base=1, check_prev=True, check_hash=True, catch=True):
    def first_bad_line(lines):
        prev = GENESIS
        for number, line in enumerate(lines, start=base):
            if catch:
                try:
                    entry = json.loads(line)
                    good = isinstance(entry, dict) and {"hash", "prev", "record"} <= set(entry)
                except ValueError:
                    good = False
                if not good:
                    return number
            else:
                entry = json.loads(line)
            ok = (not check_prev or entry["prev"] == prev) and (not check_hash or entry["hash"] == hashlib.sha256(
                canonical({"prev": entry["prev"], "record": entry["record"]})).hexdigest())
            if not ok:
                return number
            prev = entry["hash"]
        return None
    first_bad_line.__name__ = "_first_bad_" + "_".join(
        k for k, on in (("zero_based", base != 1), ("no_prev_check", not check_prev), ("no_hash_check", not check_hash),
                        ("crashes", not catch)) if on)
    return first_bad_line


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("fit_context", {"fit_context": _fit_with(margin=False)}, "(the margin counts)"),
    ("fit_context", {"fit_context": _fit_with(reserve=False)}, "(the reserved output counts)"),
    ("fit_context", {"fit_context": _fit_with(order="input")}, "passages by score, highest first"),
    ("fit_context", {"fit_context": _fit_with(ties="by_id")}, "equal scores keep the input order"),
    ("fit_context", {"fit_context": _fit_with(passage_stop=False)}, "a passage that does not fit stops the ranking"),
    ("fit_context", {"fit_context": _fit_with(newest=False)}, "the newest turns are kept, the oldest dropped first"),
    ("fit_context", {"fit_context": _fit_with(turn_stop=False)}, "(no holes)"),
    ("fit_context", {"fit_context": _fit_with(passages_first=False)}, "passages take the budget before the turns"),
    ("fit_context", {"fit_context": _fit_with(fits="<")}, "an exact fit is kept"),
    ("fit_context", {"fit_context": _fit_with(raises="none")}, "required parts over the budget raise ValueError"),
    ("fit_context", {"fit_context": _fit_with(raises="bare")}, "the overflow message says by how many tokens"),
    ("fit_context", {"fit_context": _fit_with(turns_ascending=False)}, "kept turns are returned oldest first"),
    ("fit_context", {"fit_context": _fit_with(count_required=False)}, "prompt_tokens counts the system message"),
    ("bm25_scores", {"bm25_scores": _bm25_with(idf="textbook")}, "the worked example"),
    ("bm25_scores", {"bm25_scores": _bm25_with(floor="none")}, "gets the epsilon floor"),
    ("bm25_scores", {"bm25_scores": _bm25_with(floor="epsilon")}, "gets the epsilon floor"),
    ("bm25_scores", {"bm25_scores": _bm25_with(floor="zero")}, "gets the epsilon floor"),
    ("bm25_scores", {"bm25_scores": _bm25_with(floor="clamped")}, "the negative floor of a tiny corpus"),
    ("bm25_scores", {"bm25_scores": _bm25_with(average="query")}, "gets the epsilon floor"),
    ("bm25_scores", {"bm25_scores": _bm25_with(average="after_clamp")}, "gets the epsilon floor"),
    ("bm25_scores", {"bm25_scores": _bm25_with(floor_when="non_positive")}, "an idf of exactly 0"),
    ("bm25_scores", {"bm25_scores": _bm25_with(query="set")}, "a repeated query term counts each time"),
    ("bm25_scores", {"bm25_scores": _bm25_with(tf="binary")}, "term frequency saturates"),
    ("bm25_scores", {"bm25_scores": _bm25_with(document_frequency="occurrences")}, "n(q) counts passages"),
    ("bm25_scores", {"bm25_scores": _bm25_with(length=False)}, "length normalization: b = 1"),
    ("bm25_scores", {"bm25_scores": _bm25_with(avgdl="unique")}, "avgdl is the total number of terms"),
    ("bm25_scores", {"bm25_scores": _bm25_with(epsilon_used=False)}, "with another epsilon"),
    ("bm25_scores", {"bm25_scores": _bm25_with(k1_used=False)}, "the k1 parameter is used"),
    ("bm25_scores", {"bm25_scores": _bm25_with(validate=False)}, "an empty corpus raises ValueError"),
    ("abstention_threshold", {"pick_threshold": _pick_with(choose="highest")}, "the lowest threshold that reaches"),
    ("abstention_threshold", {"pick_threshold": _pick_with(scan="stop_at_first_miss")},
     "accuracy need not rise with the threshold"),
    ("abstention_threshold", {"pick_threshold": _pick_with(answered_cmp=">")},
     "confidences equal to the threshold are answered"),
    ("abstention_threshold", {"pick_threshold": _pick_with(target_cmp=">")}, "accuracy exactly at the target reaches it"),
    ("abstention_threshold", {"pick_threshold": _pick_with(none=1.0)}, "no threshold reaches the target: math.inf"),
    ("abstention_threshold", {"pick_threshold": _pick_with(none=None)}, "no threshold reaches the target: math.inf"),
    ("abstention_threshold", {"pick_threshold": _pick_with(candidates="grid")},
     "candidates are the confidences themselves, not a grid"),
    ("abstention_threshold", {"pick_threshold": _pick_with(accuracy_over="all")},
     "accuracy is computed over the answered questions only"),
    ("abstention_threshold", {"pick_threshold": _pick_with(validate=False)}, "invalid input raises ValueError"),
    ("abstention_threshold", {"selective_answer": _selective_with(empty_accuracy=0.0)},
     "accuracy is None when nothing is answered"),
    ("abstention_threshold", {"selective_answer": _selective_with(wrong="all")},
     "answered and wrong_answered count answered questions only"),
    ("abstention_threshold", {"selective_answer": _selective_with(coverage="abstained")},
     "coverage = answered / all questions"),
    ("task_cost", {"task_cost": _cost_with(per=1e3)}, "prices per million tokens"),
    ("task_cost", {"task_cost": _cost_with(swapped=True)}, "prompt tokens at the input price"),
    ("task_cost", {"task_cost": _cost_with(completion=False)}, "completion tokens at the output price"),
    ("task_cost", {"task_cost": _cost_with(divide_success="requests")}, "cost per success divides everything paid by "
                                                                        "the successes"),
    ("task_cost", {"task_cost": _cost_with(zero="zero")}, "no success at all: the cost per success is math.inf"),
    ("task_cost", {"task_cost": _cost_with(zero="tokens")}, "no success at all: the cost per success is math.inf"),
    ("task_cost", {"task_cost": _cost_with(failure="requests")}, "failure_cost is added for each failed request"),
    ("task_cost", {"task_cost": _cost_with(failure="none")}, "failure_cost is added for each failed request"),
    ("task_cost", {"task_cost": _cost_with(failure_in_request=True)}, "cost per request is the token bill alone"),
    ("task_cost", {"task_cost": _cost_with(validate=False)}, "invalid input raises ValueError"),
    ("trace_chain", {"redact_pii": _redact_with(phones=False)}, "redact_pii: an international phone"),
    ("trace_chain", {"redact_pii": _redact_with(luhn="none")}, "a card-length number that fails Luhn is not a card"),
    ("trace_chain", {"redact_pii": _redact_with(luhn="wrong_parity")},
     "the Luhn check doubles every second digit from the right"),
    ("trace_chain", {"redact_pii": _redact_with(bare_phones=True)}, "a bare run of digits is not a phone"),
    ("trace_chain", {"redact_pii": _redact_with(emails_first=False)}, "emails are redacted before numbers"),
    ("trace_chain", {"redact_pii": _redact_with(phone_min=10)}, "a phone of 9 digits"),
    ("trace_chain", {"redact_pii": _redact_with(card_lengths=(16, 16))}, "a Luhn-valid card of 13 digits"),
    ("trace_chain", {"redact_pii": _redact_with(plus_cards=True)}, "a run starting with + is never a card"),
    ("trace_chain", {"chain_records": _chain_with(with_prev=False)}, "hash = sha256 of canonical {prev, redacted record}"),
    ("trace_chain", {"chain_records": _chain_with(redact_before_hash=False)},
     "hash = sha256 of canonical {prev, redacted record}"),
    ("trace_chain", {"chain_records": _chain_with(genesis="")}, "the first line's prev is GENESIS"),
    ("trace_chain", {"chain_records": _chain_with(deep=False)}, "every string in a record is redacted, at any depth"),
    ("trace_chain", {"chain_records": _chain_with(line="plain")}, "each line is canonical JSON"),
    ("trace_chain", {"chain_records": _chain_with(copy_input=False)}, "does not change the caller's records"),
    ("trace_chain", {"chain_records": _chain_with(prev_from="genesis")}, "each line's prev is the previous line's hash"),
    ("trace_chain", {"first_bad_line": _first_bad_with(base=0)}, "1-based line numbers"),
    ("trace_chain", {"first_bad_line": _first_bad_with(check_prev=False)}, "a removed line breaks the next prev"),
    ("trace_chain", {"first_bad_line": _first_bad_with(check_hash=False)}, "an edited record breaks its own hash"),
    ("trace_chain", {"first_bad_line": _first_bad_with(catch=False)}, "a truncated line (not JSON) is bad, not a crash"),
]
