"""Known-wrong answers to notebook 07, each with the rule it breaks (run by test_wrong_answers.py).

Every one is an edit of the notebook's own solution (tests/hidden/mutants.py): the edit is the
learner's mistake, and it breaks one rule that the exercise text states.
"""
from __future__ import annotations

from tests.hidden.mutants import moved, mutant

NOTEBOOK = "07_context"


def _edit(name, *edits, label):
    """The solution of ``name`` with ``edits`` applied, in place of the learner's ``name``."""
    return {name: mutant(NOTEBOOK, name, *edits, label=label)}


def _trace_edit(*edits, label):
    """An edit of the trace_chain solution cell, which defines all four functions: the learner's
    namespace holds the edited cell's four (a wrong luhn_ok is the one its redact_pii calls)."""
    return {name: mutant(NOTEBOOK, name, *edits, label=label)
            for name in ("luhn_ok", "redact_pii", "chain_records", "first_bad_line")}


# -- fit_context -------------------------------------------------------------------------------
_PASSAGE_STOP = "        if used + tokens > budget:\n            break\n"
_TURN_STOP = "        if used + turns[index] > budget:\n            break\n"
_OVERFLOW = ('    if used > budget:\n'
             '        raise ValueError(f"the system message and the question need {used} tokens but the budget is '
             '{budget}: "\n'
             '                         f"over by {used - budget} tokens")\n')
_OVERFLOW_MESSAGE = ('f"the system message and the question need {used} tokens but the budget is {budget}: "\n'
                     '                         f"over by {used - budget} tokens"')

FIT_CONTEXT = [
    (_edit("fit_context", ("budget = window - reserve_output - margin", "budget = window - reserve_output"),
           label="_fit_no_margin"), "(the margin counts)"),
    (_edit("fit_context", ("budget = window - reserve_output - margin", "budget = window - margin"),
           label="_fit_no_reserve"), "(the reserved output counts)"),
    (_edit("fit_context", ("sorted(passages, key=lambda p: -p[2])", "passages"), label="_fit_input_order"),
     "passages by score, highest first"),
    (_edit("fit_context", ("key=lambda p: -p[2]", "key=lambda p: p[2]"), label="_fit_lowest_first"),
     "passages by score, highest first"),
    (_edit("fit_context", ("for passage_id, tokens, _ in", "for passage_id, _, tokens in"),
           label="_fit_reads_score_as_tokens"), "prompt_tokens and left: prompt_tokens counts"),
    (_edit("fit_context", ("key=lambda p: -p[2]", "key=lambda p: (-p[2], p[0])"), label="_fit_ties_by_id"),
     "equal scores keep the input order"),
    (_edit("fit_context", ("sorted(passages, key=lambda p: -p[2])", "sorted(passages, key=lambda p: p[2])[::-1]"),
           label="_fit_ties_reversed"), "equal scores keep the input order"),
    (_edit("fit_context", (_PASSAGE_STOP, _PASSAGE_STOP.replace("break", "continue")), label="_fit_skips_passages"),
     "a passage that does not fit stops the ranking"),
    (_edit("fit_context", ("for index in reversed(range(len(turns))):", "for index in range(len(turns)):"),
           ("kept_turns.insert(0, index)", "kept_turns.append(index)"), label="_fit_oldest_turns"),
     "the newest turns are kept, the oldest dropped first"),
    (_edit("fit_context", (_TURN_STOP, _TURN_STOP.replace("break", "continue")), label="_fit_turn_holes"), "(no holes)"),
    (_edit("fit_context", moved("    kept_passages = []", "    kept_turns = []", before="    return {"),
           label="_fit_history_first"), "passages take the budget before the turns"),
    (_edit("fit_context", ("used + tokens > budget", "used + tokens >= budget"),
           ("used + turns[index] > budget", "used + turns[index] >= budget"), label="_fit_strict_fit"),
     "an exact fit is kept"),
    (_edit("fit_context", (_OVERFLOW, ""), label="_fit_never_raises"), "required parts over the budget raise ValueError"),
    (_edit("fit_context", (_OVERFLOW_MESSAGE, '"the system message and the question do not fit"'),
           label="_fit_bare_overflow_message"), "the overflow message says by how many tokens"),
    (_edit("fit_context", ("if used > budget:", "if used >= budget:"), label="_fit_raises_on_exact_fill"),
     "required parts that exactly fill the budget do not raise"),
    (_edit("fit_context", ("kept_turns.insert(0, index)", "kept_turns.append(index)"), label="_fit_turns_descending"),
     "kept turns are returned oldest first"),
    (_edit("fit_context", ('"prompt_tokens": used', '"prompt_tokens": used - system_tokens - question_tokens'),
           label="_fit_pieces_only"), "prompt_tokens counts the system message"),
    (_edit("fit_context", ('"passages": kept_passages', '"passages": [p[0] for p in passages if p[0] in kept_passages]'),
           label="_fit_passages_in_input_order"), "the kept passages are listed in rank order"),
    (_edit("fit_context", ('"left": budget - used', '"left": window - used'), label="_fit_left_of_window"),
     "prompt_tokens and left"),
]

# -- bm25_scores -------------------------------------------------------------------------------
_FLOOR = "floor = epsilon * sum(idf.values()) / len(idf)"
_FLOORED = "floor if value < 0 else value"
_PER_TERM = "idf.get(q, 0.0) * tf.get(q, 0) * (k1 + 1) / (tf.get(q, 0) + norm)"
_PASSAGES_HOLDING = "        for term in tf:\n            holding[term] = holding.get(term, 0) + 1\n"
_COUNT_TERM = "            tf[term] = tf.get(term, 0) + 1\n"
_EMPTY_CORPUS = ('    if not corpus_terms or not any(corpus_terms):\n'
                 '        raise ValueError("the corpus needs at least one passage with at least one term")\n')

BM25_SCORES = [
    (_edit("bm25_scores", ("math.log(n_passages - n + 0.5) - math.log(n + 0.5)", "math.log(n_passages / n)"),
           label="_bm25_textbook_idf"), "the worked example"),
    (_edit("bm25_scores", (f"    idf = {{t: {_FLOORED} for t, value in idf.items()}}\n", ""), label="_bm25_no_floor"),
     "gets the epsilon floor"),
    (_edit("bm25_scores", (_FLOORED, "epsilon if value < 0 else value"), label="_bm25_floor_is_epsilon"),
     "gets the epsilon floor"),
    (_edit("bm25_scores", (_FLOORED, "0.0 if value < 0 else value"), label="_bm25_floor_zero"), "gets the epsilon floor"),
    (_edit("bm25_scores", (_FLOOR, f"floor = max({_FLOOR[8:]}, 0.0)"), label="_bm25_floor_clamped"),
     "the negative floor of a tiny corpus"),
    (_edit("bm25_scores", (_FLOOR, "present = [idf[q] for q in query_terms if q in idf] or [0.0]\n"
                                   "    floor = epsilon * sum(present) / len(present)"), label="_bm25_floor_over_query"),
     "gets the epsilon floor"),
    (_edit("bm25_scores", ("sum(idf.values())", "sum(max(v, 0.0) for v in idf.values())"),
           label="_bm25_floor_after_clamping"), "gets the epsilon floor"),
    (_edit("bm25_scores", (_FLOORED, "floor if value <= 0 else value"), label="_bm25_floors_zero"), "an idf of exactly 0"),
    (_edit("bm25_scores", ("for q in query_terms))", "for q in set(query_terms)))"), label="_bm25_query_as_set"),
     "a repeated query term counts each time"),
    (_edit("bm25_scores", (_PER_TERM, _PER_TERM.replace("tf.get(q, 0)", "min(tf.get(q, 0), 1)")), label="_bm25_binary_tf"),
     "term frequency saturates"),
    (_edit("bm25_scores", (_PASSAGES_HOLDING, ""),
           (_COUNT_TERM, _COUNT_TERM + "            holding[term] = holding.get(term, 0) + 1\n"),
           label="_bm25_counts_occurrences"), "n(q) counts passages"),
    (_edit("bm25_scores", ("norm = k1 * (1 - b + b * len(doc) / avgdl)", "norm = k1"), label="_bm25_no_length_norm"),
     "length normalization: b = 1"),
    (_edit("bm25_scores", ("norm = k1 * (1 - b + b * len(doc) / avgdl)", "norm = k1 * (1 - 0.75 + 0.75 * len(doc) / avgdl)"),
           label="_bm25_b_ignored"), "length normalization: b = 0 ignores passage length"),
    (_edit("bm25_scores", ("sum(len(doc) for doc in corpus_terms)", "sum(len(set(doc)) for doc in corpus_terms)"),
           label="_bm25_avgdl_of_distinct_terms"), "avgdl is the total number of terms"),
    (_edit("bm25_scores", ("floor = epsilon *", "floor = 0.25 *"), label="_bm25_epsilon_ignored"), "with another epsilon"),
    (_edit("bm25_scores", ("    n_passages = len(corpus_terms)\n", "    k1 = 1.5  # the usual value\n"
                                                                   "    n_passages = len(corpus_terms)\n"),
           label="_bm25_k1_ignored"), "the k1 parameter is used"),
    (_edit("bm25_scores", ("k1=1.5", "k1=1.2"), label="_bm25_default_k1_1_2"), "the worked example"),
    (_edit("bm25_scores", (_EMPTY_CORPUS, ""), label="_bm25_no_validation"), "an empty corpus raises ValueError"),
    (_edit("bm25_scores", ("if not corpus_terms or not any(corpus_terms):", "if not corpus_terms:"),
           label="_bm25_termless_corpus_divides_by_zero"), "a corpus with no term at all raises ValueError"),
    (_edit("bm25_scores", ("idf.get(q, 0.0)", "idf[q]"), label="_bm25_absent_term_key_error"),
     "a query term absent from the corpus adds 0"),
    (_edit("bm25_scores", ("    return scores", "    return sorted(scores, reverse=True)"), label="_bm25_sorted_scores"),
     "one score per passage, in corpus order"),
]

# -- abstention_threshold ----------------------------------------------------------------------
_REACHES = "        if sum(answered) / len(answered) >= target_accuracy:"
_GUARDED = "        if answered and sum(answered) / len(answered) >= target_accuracy:"  # no division by an empty set
_VALIDATION = ('    if len(confidences) != len(correct) or not confidences:\n'
               '        raise ValueError("need one confidence and one correct flag per question, and at least one '
               'question")\n'
               '    if not 0 < target_accuracy <= 1:\n'
               '        raise ValueError(f"target_accuracy must be in (0, 1], got {target_accuracy}")\n'
               '    if any(not 0 <= c <= 1 for c in confidences):\n'
               '        raise ValueError("confidences must lie in [0, 1]")\n')

ABSTENTION_THRESHOLD = [
    (_edit("pick_threshold", ("return min(reaching) if reaching", "return max(reaching) if reaching"),
           label="_pick_highest"), "the lowest threshold that reaches"),
    (_edit("pick_threshold", ("    for t in set(confidences):", "    for t in sorted(set(confidences), reverse=True):"),
           ("            reaching.append(t)\n", "            reaching.append(t)\n        elif reaching:\n            break\n"),
           label="_pick_stops_at_first_miss"), "accuracy need not rise with the threshold"),
    (_edit("pick_threshold", ("if c >= t]", "if c > t]"), (_REACHES, _GUARDED), label="_pick_strict_answered"),
     "confidences equal to the threshold are answered"),
    (_edit("pick_threshold", ("/ len(answered) >= target_accuracy", "/ len(answered) > target_accuracy"),
           label="_pick_strict_target"), "accuracy exactly at the target reaches it"),
    (_edit("pick_threshold", ("else math.inf", "else 1.0"), label="_pick_none_is_one"),
     "no threshold reaches the target: math.inf"),
    (_edit("pick_threshold", ("else math.inf", "else None"), label="_pick_none_is_none"),
     "no threshold reaches the target: math.inf"),
    (_edit("pick_threshold", ("    for t in set(confidences):", "    for t in [i / 20 for i in range(21)]:"),
           (_REACHES, _GUARDED), label="_pick_grid"), "candidates are the confidences themselves, not a grid"),
    (_edit("pick_threshold", ("sum(answered) / len(answered)", "sum(answered) / len(confidences)"),
           label="_pick_accuracy_over_all"), "accuracy is computed over the answered questions only"),
    (_edit("pick_threshold", ("sum(answered) / len(answered) >=", "sum(answered) // len(answered) >="),
           label="_pick_integer_division"), "accuracy is a float division"),
    (_edit("pick_threshold", (_VALIDATION, ""), label="_pick_no_validation"), "invalid input raises ValueError"),
    (_edit("pick_threshold", ("len(confidences) != len(correct) or not confidences", "not confidences"),
           label="_pick_lengths_unchecked"), "(lengths differ)"),
    (_edit("pick_threshold", ("len(confidences) != len(correct) or not confidences", "len(confidences) != len(correct)"),
           label="_pick_empty_unchecked"), "(no answers)"),
    (_edit("pick_threshold", ("if not 0 < target_accuracy <= 1:", "if not 0 <= target_accuracy <= 1:"),
           label="_pick_target_zero_allowed"), "(target 0)"),
    (_edit("pick_threshold", ("if not 0 < target_accuracy <= 1:", "if not 0 < target_accuracy:"),
           label="_pick_target_above_one_allowed"), "(target above 1)"),
    (_edit("pick_threshold", ("any(not 0 <= c <= 1 for c in confidences)", "any(c > 1 for c in confidences)"),
           label="_pick_negative_confidence_allowed"), "(a negative confidence)"),
    (_edit("pick_threshold", ("any(not 0 <= c <= 1 for c in confidences)", "any(c < 0 for c in confidences)"),
           label="_pick_confidence_above_one_allowed"), "(a confidence above 1)"),
    (_edit("selective_answer", ("if c >= threshold]", "if c > threshold]"), label="_selective_strict_answered"),
     "coverage = answered / all questions"),
    (_edit("selective_answer", ("if answered else None", "if answered else 0.0"), label="_selective_empty_zero"),
     "accuracy is None when nothing is answered"),
    (_edit("selective_answer", ('"wrong_answered": len(answered) - right', '"wrong_answered": len(correct) - sum(correct)'),
           label="_selective_wrong_of_all"), "answered and wrong_answered count answered questions only"),
    (_edit("selective_answer", ('"coverage": len(answered) / len(confidences)',
                                '"coverage": (len(confidences) - len(answered)) / len(confidences)'),
           label="_selective_coverage_of_abstained"), "coverage = answered / all questions"),
    (_edit("selective_answer", ("right / len(answered) if answered", "right // len(answered) if answered"),
           label="_selective_integer_division"), "accuracy = right / answered"),
]

# -- task_cost ---------------------------------------------------------------------------------
_BILL = "prompt_tokens * input_per_million + completion_tokens * output_per_million"
_COST_CHECKS = ('    if requests < 1 or not 0 <= successes <= requests:\n'
                '        raise ValueError(f"need requests >= 1 and 0 <= successes <= requests, got {requests} and '
                '{successes}")\n'
                '    if min(prompt_tokens, completion_tokens, input_per_million, output_per_million, failure_cost) < 0:\n'
                '        raise ValueError("token counts, prices and failure_cost must not be negative")\n')

TASK_COST = [
    (_edit("task_cost", ("/ 1e6", "/ 1e3"), label="_cost_per_thousand"), "prices per million tokens"),
    (_edit("task_cost", ("/ 1e6", "* requests / 1e6"), label="_cost_tokens_per_request"), "the token bill"),
    (_edit("task_cost", (_BILL, "prompt_tokens * output_per_million + completion_tokens * input_per_million"),
           label="_cost_swapped_prices"), "prompt tokens at the input price"),
    (_edit("task_cost", (_BILL, "prompt_tokens * input_per_million"), label="_cost_no_completion"),
     "completion tokens at the output price"),
    (_edit("task_cost", ("paid / successes if successes", "paid / requests if successes"), label="_cost_per_request_divisor"),
     "cost per success divides everything paid by the successes"),
    (_edit("task_cost", ("else math.inf", "else 0.0"), label="_cost_zero_successes_zero"),
     "no success at all: the cost per success is math.inf"),
    (_edit("task_cost", ("else math.inf", "else tokens_usd"), label="_cost_zero_successes_the_bill"),
     "no success at all: the cost per success is math.inf"),
    (_edit("task_cost", ("paid / successes if successes else math.inf", "paid / successes"),
           label="_cost_zero_successes_divide"), "no success at all: the cost per success is math.inf"),
    (_edit("task_cost", ("not 0 <= successes <= requests:", "not 0 < successes <= requests:"),
           label="_cost_zero_successes_raise"), "no success at all: the cost per success is math.inf"),
    (_edit("task_cost", ("(requests - successes) * failure_cost", "requests * failure_cost"),
           label="_cost_failure_per_request"), "failure_cost is added for each failed request"),
    (_edit("task_cost", ("paid = tokens_usd + (requests - successes) * failure_cost", "paid = tokens_usd"),
           label="_cost_failure_ignored"), "failure_cost is added for each failed request"),
    (_edit("task_cost", ('"per_request": tokens_usd / requests', '"per_request": paid / requests'),
           label="_cost_failure_in_request"), "cost per request is the token bill alone"),
    (_edit("task_cost", (_COST_CHECKS, ""), label="_cost_no_validation"), "invalid input raises ValueError"),
    (_edit("task_cost", ("if requests < 1 or not 0 <= successes", "if not 0 <= successes"),
           label="_cost_zero_requests_unchecked"), "(zero requests)"),
    (_edit("task_cost", ("not 0 <= successes <= requests:", "successes < 0:"),
           label="_cost_successes_above_requests_allowed"), "(more successes than requests)"),
    (_edit("task_cost", ("not 0 <= successes <= requests:", "successes > requests:"),
           label="_cost_negative_successes_allowed"), "(negative successes)"),
    (_edit("task_cost", ("min(prompt_tokens, completion_tokens, input_per_million", "min(input_per_million"),
           label="_cost_token_counts_unchecked"), "(negative prompt tokens)"),
    (_edit("task_cost", ("output_per_million, failure_cost) < 0", "output_per_million) < 0"),
           label="_cost_failure_cost_unchecked"), "(a negative failure cost)"),
    (_edit("task_cost", ("min(prompt_tokens, completion_tokens, input_per_million, output_per_million, failure_cost)",
                         "min(prompt_tokens, completion_tokens, failure_cost)"), label="_cost_prices_unchecked"),
     "(a negative input price)"),
    (_edit("task_cost", ("failure_cost=0.0):", "failure_cost):"), label="_cost_no_default_failure_cost"),
     "failure_cost defaults to 0.0"),
]

# -- trace_chain -------------------------------------------------------------------------------
_PHONE = '        if 9 <= len(digits) <= 15 and (run.startswith("+") or run != digits):\n            return "[PHONE]"\n'
_HASHED = 'canonical({"prev": prev, "record": redacted})).hexdigest()'
_HASH_CHECK = (' and entry["hash"] ==\n'
               '                    hashlib.sha256(canonical({"prev": entry["prev"], "record": entry["record"]})).hexdigest())')

TRACE_CHAIN = [
    (_trace_edit(('    text = EMAIL_RE.sub("[EMAIL]", text)\n', ""), label="_trace_no_emails"), "redact_pii: an email address"),
    (_trace_edit((_PHONE, ""), label="_trace_no_phones"), "redact_pii: an international phone"),
    (_trace_edit(moved("        if 9 <= len(digits)", "        return run", before="        if not run.startswith"),
                 label="_trace_phone_before_card"), "a card is looked for before a phone"),
    (_trace_edit((" and luhn_ok(digits):", ":"), label="_trace_no_luhn"), "a card-length number that fails Luhn is not a card"),
    (_trace_edit(("if position % 2 == 1:", "if position % 2 == 0:"), label="_trace_luhn_doubles_from_the_last"),
     "the Luhn check doubles every second digit from the right"),
    (_trace_edit(("value = value * 2 - 9 if value > 4 else value * 2", "value = value * 2"),
                 label="_trace_luhn_keeps_two_digit_doubles"), "has 9 subtracted"),
    (_trace_edit(('9 <= len(digits) <= 15 and (run.startswith("+") or run != digits)', "9 <= len(digits) <= 15"),
                 label="_trace_bare_phones"), "a bare run of digits is not a phone"),
    (_trace_edit(('    text = EMAIL_RE.sub("[EMAIL]", text)\n', ""),
                 ("    return NUMBER_RE.sub(replace, text)", '    return EMAIL_RE.sub("[EMAIL]", NUMBER_RE.sub(replace, text))'),
                 label="_trace_numbers_first"), "emails are redacted before numbers"),
    (_trace_edit(("9 <= len(digits) <= 15", "10 <= len(digits) <= 15"), label="_trace_phone_min_10"), "a phone of 9 digits"),
    (_trace_edit(("9 <= len(digits) <= 15 and", "9 <= len(digits) and"), label="_trace_phone_no_upper_bound"),
     "16 digits with separators that fail Luhn are neither card nor phone"),
    (_trace_edit(('(run.startswith("+") or run != digits)', 'run.startswith("+")'), label="_trace_phone_needs_plus"),
     "a phone written with dashes"),
    (_trace_edit(("13 <= len(digits) <= 19", "len(digits) == 16"), label="_trace_cards_16_only"),
     "a Luhn-valid card of 13 digits"),
    (_trace_edit(("13 <= len(digits) <= 19", "13 <= len(digits) <= 16"), label="_trace_card_at_most_16"),
     "a Luhn-valid card of 19 digits"),
    (_trace_edit(('not run.startswith("+") and 13', "13"), label="_trace_plus_cards"), "a run starting with + is never a card"),
    (_trace_edit((_HASHED, 'canonical({"record": redacted})).hexdigest()'), label="_trace_no_prev_in_hash"),
     "hash = sha256 of canonical {prev, redacted record}"),
    (_trace_edit((_HASHED, 'canonical({"prev": prev, "record": record})).hexdigest()'), label="_trace_hashes_raw_record"),
     "hash = sha256 of canonical {prev, redacted record}"),
    (_trace_edit(("lines, prev = [], GENESIS", 'lines, prev = [], ""'), label="_trace_empty_genesis"),
     "the first line's prev is GENESIS"),
    (_trace_edit(("{redact_pii(key): clean(item) for", "{redact_pii(key): redact_pii(item) if isinstance(item, str) else item for"),
                 label="_trace_top_level_only"), "every string in a record is redacted, at any depth"),
    (_trace_edit(("{redact_pii(key): clean(item)", "{key: clean(item)"), label="_trace_keys_not_redacted"),
     "dict keys are redacted too"),
    (_trace_edit(('canonical({"hash": digest, "prev": prev, "record": redacted}).decode("utf-8")',
                  'json.dumps({"hash": digest, "prev": prev, "record": redacted})'), label="_trace_plain_json"),
     "each line is canonical JSON"),
    (_trace_edit(('}).decode("utf-8"))', '}))'), label="_trace_lines_as_bytes"), "chain_records: one line (a str) per record"),
    (_trace_edit(("        redacted = clean(record)\n", "        for key in record:  # redacts in place\n"
                                                         "            record[key] = clean(record[key])\n"
                                                         "        redacted = record\n"), label="_trace_mutates_input"),
     "does not change the caller's records"),
    (_trace_edit(("        prev = digest\n", ""), label="_trace_prev_stays_genesis"), "each line's prev is the previous line's hash"),
    (_trace_edit(("enumerate(lines, start=1)", "enumerate(lines)"), label="_trace_zero_based"), "1-based line numbers"),
    (_trace_edit(('entry["prev"] == prev and ', ""), label="_trace_no_prev_check"), "a removed line breaks the next prev"),
    (_trace_edit((_HASH_CHECK, ")"), label="_trace_no_hash_check"), "an edited record breaks its own hash"),
    (_trace_edit(("except (ValueError, KeyError, TypeError):", "except (KeyError, TypeError):"),
                 label="_trace_bad_json_crashes"), "a truncated line (not JSON) is bad, not a crash"),
    (_trace_edit(("except (ValueError, KeyError, TypeError):", "except ValueError:"), label="_trace_missing_key_crashes"),
     "a JSON line without its record is bad, not a crash"),
    (_trace_edit(("    prev = GENESIS\n", "    prev = None\n"),
                 ('entry["prev"] == prev and', '(prev is None or entry["prev"] == prev) and'),
                 label="_trace_first_prev_unchecked"), "the first line's prev must be GENESIS"),
    (_trace_edit(("    return None\n", "    return -1\n"), label="_trace_intact_is_minus_one"),
     "first_bad_line: an intact log is None"),
]

# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [(exercise, names, fragment) for exercise, entries in (
    ("fit_context", FIT_CONTEXT), ("bm25_scores", BM25_SCORES), ("abstention_threshold", ABSTENTION_THRESHOLD),
    ("task_cost", TASK_COST), ("trace_chain", TRACE_CHAIN)) for names, fragment in entries]
