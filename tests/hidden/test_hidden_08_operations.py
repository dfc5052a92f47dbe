"""Known-wrong answers to notebook 08, each with the rule it breaks (run by test_wrong_answers.py).

Every one is an edit of the notebook's own solution (tests/hidden/mutants.py): the edit is the
learner's mistake, and it breaks one rule that the exercise text states.
"""
from __future__ import annotations

from tests.hidden.mutants import mutant

NOTEBOOK = "08_operations"


def _edit(name, *edits, label):
    """The solution of ``name`` with ``edits`` applied, in place of the learner's ``name``."""
    return {name: mutant(NOTEBOOK, name, *edits, label=label)}


# -- paired_comparison -------------------------------------------------------------------------------
_BOOLS = ('    if not all(type(flag) is bool for flag in list(before) + list(after)):\n'
          '        raise ValueError("every score must be a bool")\n')
PAIRED = [
    (_edit("paired_comparison", ("int(a) - int(b) for b, a", "int(b) - int(a) for b, a"), label="_paired_before_minus_after"),
     "delta is the mean of after - before"),
    (_edit("paired_comparison", ("statistics.stdev(diffs)", "statistics.pstdev(diffs)"), label="_paired_population_stdev"),
     "se is the sample stdev of the differences"),
    (_edit("paired_comparison", ("se = statistics.stdev(diffs) / math.sqrt(len(diffs))",
                                 "p1, p2 = sum(before) / len(before), sum(after) / len(after)\n"
                                 "    se = math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / len(diffs))"),
           label="_paired_unpaired_se"), "se is the sample stdev of the differences"),
    (_edit("paired_comparison", ("low, high = delta - z * se, delta + z * se",
                                 "low, high = delta - 1.96 * se, delta + 1.96 * se"), label="_paired_z_ignored"),
     "low and high are delta -/+ z * se"),
    (_edit("paired_comparison", ('"worse" if high < 0', '"worse" if high <= 0'), label="_paired_boundary_is_worse"),
     "the verdict reads the interval, boundaries included"),
    (_edit("paired_comparison", ('"right_to_wrong": diffs.count(-1), "wrong_to_right": diffs.count(1)',
                                 '"right_to_wrong": diffs.count(1), "wrong_to_right": diffs.count(-1)'),
           label="_paired_flips_swapped"), "right_to_wrong and wrong_to_right count the flips"),
    (_edit("paired_comparison", (_BOOLS, ""), label="_paired_accepts_ints"), "(ints instead of bools)"),
    (_edit("paired_comparison", ("    if len(before) != len(after):\n", "    if False:\n"), label="_paired_zips_unequal"),
     "(lists of different lengths)"),
    (_edit("paired_comparison", ("    if len(before) < 2:\n", "    if False:\n"), label="_paired_no_minimum"),
     "(no inputs)"),
    (_edit("paired_comparison", ("or not z > 0:", "or False:"), label="_paired_any_z"), "(z = 0)"),
]

# -- serve_with_fallback -----------------------------------------------------------------------------
_OUTAGE = '        except (TimeoutError, ConnectionError):\n            attempts.append([name, "unavailable"])\n'
FALLBACK = [
    (_edit("serve_with_fallback", ("except (TimeoutError, ConnectionError):", "except TimeoutError:"),
           label="_fallback_timeouts_only"), "a ConnectionError moves to the next backend: reply"),
    (_edit("serve_with_fallback", ("except (TimeoutError, ConnectionError):", "except Exception:"),
           label="_fallback_swallows_bugs"), "a KeyError is a bug: it propagates"),
    (_edit("serve_with_fallback", ("except (TimeoutError, ConnectionError):", "except (TimeoutError, ConnectionError, "
                                   "KeyError, TypeError, ValueError):"), label="_fallback_swallows_common_bugs"),
     "a TypeError is a bug: it propagates"),
    (_edit("serve_with_fallback", ("        if validate(reply):\n", "        if True:\n"), label="_fallback_never_validates"),
     "an invalid reply moves to the next backend"),
    (_edit("serve_with_fallback", ('"attempts": attempts, "fell_back": len(attempts) > 1}\n    ### END',
                                   '"attempts": attempts, "fell_back": True}\n    ### END'),
           label="_fallback_failure_always_fell_back"), "a single backend that fails: fell_back stays False"),
    (_edit("serve_with_fallback", ('            attempts.append([name, "ok"])\n', ''), label="_fallback_logs_failures_only"),
     "attempts lists every call in order"),
    (_edit("serve_with_fallback", (_OUTAGE, '        except (TimeoutError, ConnectionError):\n'
                                            '            try:\n'
                                            '                reply = call(request)  # one retry first\n'
                                            '            except (TimeoutError, ConnectionError):\n'
                                            '                attempts.append([name, "unavailable"])\n'
                                            '                continue\n'
                                            '        else:\n'
                                            '            pass\n'
                                            '        if False:\n'), label="_fallback_retries_first"),
     "each backend called at most once"),
    (_edit("serve_with_fallback", ("    if len(set(names)) != len(names):\n", "    if False:\n"),
           label="_fallback_duplicate_names"), "invalid backends raise ValueError (two backends named alike)"),
    (_edit("serve_with_fallback", ("    if not backends:\n", "    if False:\n"), label="_fallback_empty_chain"),
     "invalid backends raise ValueError (no backends)"),
]

# -- slice_report ------------------------------------------------------------------------------------
SLICES = [
    (_edit("slice_report", ("sorted(groups, key=str)", "sorted(groups)"), label="_slices_sorted_by_value"),
     "sorted by str(value) (numbered slices sort by str)"),
    (_edit("slice_report", ("sorted(groups, key=str)", "groups"), label="_slices_in_arrival_order"),
     "sorted by str(value)"),
    (_edit("slice_report", ("/ len(group) for name in thresholds}", "/ len(events) for name in thresholds}"),
           label="_slices_rate_of_all_traffic"), "each rate is the share of the slice's events"),
    (_edit("slice_report", ("if e[name]) / len(group)", "if e[name] is True) / len(group)"), label="_slices_true_only"),
     "each rate is the share of the slice's events whose flag is true (truthy and falsy flags)"),
    (_edit("slice_report", ("rates[name] > thresholds[name]", "rates[name] >= thresholds[name]"),
           label="_slices_alert_at_threshold"), "alerts: strictly above the threshold"),
    (_edit("slice_report", ("if enough and rates[name]", "if rates[name]"), label="_slices_alert_when_too_few"),
     "alerts: strictly above the threshold, only when enough"),
    (_edit("slice_report", ("enough = len(group) >= min_count", "enough = len(group) > min_count"),
           label="_slices_enough_strict"), "enough is count >= min_count"),
    (_edit("slice_report", ("for name in thresholds if enough", "for name in sorted(thresholds) if enough"),
           label="_slices_alerts_sorted"), "in the thresholds' order"),
    (_edit("slice_report", ("/ len(group) for name in thresholds}",
                            "/ len(group) for name in group[0] if name != by}"), label="_slices_rates_every_field"),
     "rates has exactly the thresholds' names"),
    (_edit("slice_report", ("or min_count < 1:", "or min_count < 0:"), label="_slices_min_count_zero"), "(min_count 0)"),
    (_edit("slice_report", ("isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1",
                            "min_count < 1"), label="_slices_any_number_min_count"), "(min_count a float)"),
    (_edit("slice_report", ("        if not 0 <= limit <= 1:\n", "        if limit < 0:\n"),
           label="_slices_threshold_above_one"), "(a threshold above 1)"),
    (_edit("slice_report", ("                raise ValueError(f\"an event has no {key!r}: {event}\")\n",
                            "                pass\n"), label="_slices_key_error"), "(an event without the slice field)"),
]

# -- canary ------------------------------------------------------------------------------------------
_HALF = "half = z * math.sqrt(p_s * (1 - p_s) / n_s + p_c * (1 - p_c) / n_c)"
_ROLLBACK = '    if p_c - p_s - half > 0:\n        return "rollback"\n'
_PROMOTE = '    if p_c - p_s + half <= tolerance:\n        return "promote"\n'
CANARY = [
    (_edit("canary_arm", ('.digest()[:8], "big")', '.digest()[:8], "little")'), label="_arm_little_endian"),
     "each user's arm follows the bucket"),
    (_edit("canary_arm", ('f"{salt}:{user_id}"', 'f"{user_id}:{salt}"'), label="_arm_salt_last"),
     "each user's arm follows the bucket"),
    (_edit("canary_arm", (".digest()[:8]", ".digest()"), label="_arm_whole_digest"), "each user's arm follows the bucket"),
    (_edit("canary_arm", ("bucket < canary_percent * 100", "bucket <= canary_percent * 100"), label="_arm_at_or_below"),
     "a bucket equal to percent x 100 is stable"),
    (_edit("canary_arm", ("    if not 0 <= canary_percent <= 100:\n", "    if False:\n"), label="_arm_any_percent"),
     "a canary_percent outside [0, 100] raises ValueError"),
    (_edit("canary_decision", (_HALF, "p = (e_s + e_c) / (n_s + n_c)\n"
                                      "    half = z * math.sqrt(p * (1 - p) * (1 / n_s + 1 / n_c))"),
           label="_decision_pooled"), "the stop rule"),
    (_edit("canary_decision", (_HALF, _HALF.replace("p_s) / n_s", "p_s) / n_c")), label="_decision_one_size"),
     "the stop rule"),
    (_edit("canary_decision", (_ROLLBACK + _PROMOTE, _PROMOTE + _ROLLBACK),
           label="_decision_promote_first"), "the stop rule"),
    (_edit("canary_decision", ("+ half <= tolerance", "+ half < tolerance"), label="_decision_promote_strict"),
     "the stop rule"),
    (_edit("canary_decision", ("if min(n_s, n_c) < max(min_per_arm, 1):", "if n_c < max(min_per_arm, 1):"),
           label="_decision_canary_minimum_only"), "the stop rule"),
    (_edit("canary_decision", ("if min(n_s, n_c) < max(min_per_arm, 1):", "if min(n_s, n_c) < min_per_arm:"),
           label="_decision_divides_by_zero"), "the stop rule"),
    (_edit("canary_decision", ("half = z * math.sqrt", "half = 1.96 * math.sqrt"), label="_decision_z_ignored"),
     "z sets the width"),
    (_edit("canary_decision", ("        if errors > requests:\n", "        if False:\n"),
           label="_decision_more_errors_than_requests"), "more errors than requests"),
    (_edit("canary_decision", ("    if tolerance < 0:\n", "    if False:\n"), label="_decision_negative_tolerance"),
     "a negative tolerance"),
]

# -- filter_stream -----------------------------------------------------------------------------------
_RELEASE = ("        out.append(text[released:cut])\n        released = cut\n"
            "        held_max = max(held_max, len(text) - released)\n")
_BLOCK = '            out.append("")\n            return {"released": out, "blocked": True, "held_max": held_max}\n'
STREAM = [
    (_edit("filter_stream", ("if any(p in lowered for p in phrases):", "if any(p in chunk.lower() for p in phrases):"),
           label="_filter_per_chunk"), "blocked once a phrase appears in the text so far (a phrase split"),
    (_edit("filter_stream", ("for start in range(released, len(text)):", "for start in range(len(text) - 1, released - 1, -1):"),
           label="_filter_shortest_tail"), "what each chunk releases, then the flush (the longest possible start"),
    (_edit("filter_stream", ("lowered = text.lower()", "lowered = text"), label="_filter_case_sensitive"),
     "blocked once a phrase appears in the text so far (case is ignored)"),
    (_edit("filter_stream", ('    out.append(text[released:])\n    return {"released": out, "blocked": False',
                             '    return {"released": out, "blocked": False'), label="_filter_no_flush"),
     "what each chunk releases, then the flush"),
    (_edit("filter_stream", (_BLOCK, '            out.append("")\n            continue\n'), label="_filter_reads_on"),
     "what each chunk releases, then the flush (a phrase split"),
    (_edit("filter_stream", (_RELEASE, "        held_max = max(held_max, len(text) - released)\n"
                                       "        out.append(text[released:cut])\n        released = cut\n"),
           label="_filter_held_before_release"), "held_max is the most characters held back"),
    (_edit("filter_stream", ("    if not phrases or not all(phrases):\n", "    if False:\n"), label="_filter_no_validation"),
     "invalid phrases raise ValueError"),
    (_edit("filter_stream", ("phrases = [p.lower() for p in banned]", "phrases = [p.lower() for p in banned[:1]]"),
           label="_filter_first_phrase_only"), "blocked once a phrase appears in the text so far (later phrases"),
]

WRONG_ANSWERS = [(exercise, names, fragment) for exercise, entries in (
    ("paired_comparison", PAIRED), ("serve_with_fallback", FALLBACK), ("slice_report", SLICES), ("canary", CANARY),
    ("filter_stream", STREAM)) for names, fragment in entries]
