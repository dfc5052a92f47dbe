"""Known-wrong answers to notebook 05, each with the rule it breaks (run by test_wrong_answers.py).

Every one is an edit of the notebook's own solution (tests/hidden/mutants.py), so the file
holds no second copy of a rule: the edit is the bug, and its label names it.
"""
from __future__ import annotations

from tests.hidden.mutants import moved, mutant

A = "05_structured_output"


def _edit(name, label, *edits):
    return {name: mutant(A, name, *edits, label=label)}


# -- pieces of the solutions that several edits move or delete ---------------------------------
_EOS_RULE = "    if emitted in encoded:\n        allowed.append(eos_id)\n"
_DEAD_EXIT = "        if state < 0:\n            return None\n"
_EMPTY_CHECK = ('    if not bool(allowed.any()):\n        raise ValueError("no token is allowed in this state: '
                'the grammar has nowhere to go")\n')
_ADVANCE = "        state = guide.next_state(state, token)\n"
_REPLY = '            conversation.append({"role": "assistant", "content": text})\n'
_FEEDBACK = ('            conversation.append({"role": "user", "content": "Your reply was rejected: " + '
             'str(error)[:MAX_ERROR_CHARS]})\n')
_CAP_CHECK = '    if max_retries < 0:\n        raise ValueError(f"max_retries must be >= 0, got {max_retries}")\n'
_ALLOW_LIST = ('    if name not in tools:\n        return refuse("unknown_tool", f"there is no tool {name!r}; '
               'the tools are {sorted(tools)}")\n    tool = tools[name]\n')
_NOT_AN_OBJECT = '    if not isinstance(arguments, dict):\n        return refuse("invalid_arguments", "the arguments must be a JSON object")\n'
_SCHEMA = ('    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(tool["parameters"])'
           '.iter_errors(arguments))\n    if problem is not None:\n        return refuse("invalid_arguments", '
           'f"at {problem.json_path}: {problem.message}")\n')
_PERMISSION = ('    if tool["permission"] is not None and tool["permission"] not in permissions:\n        return refuse('
               '"permission_denied", f"{name} needs the permission {tool[\'permission\']!r}")\n')
_ARGUMENTS = '    try:\n        arguments = json.loads(call["arguments"])\n'
_REPLAY = ('        if (caller, key) in store:  # keys are per caller: another caller\'s record never answers\n'
           '            first_name, first_arguments, first_result = store[(caller, key)]\n'
           '            if (first_name, first_arguments) != (name, arguments):\n'
           '                return refuse("idempotency_conflict", f"key {key!r} was used for another request")\n'
           '            return first_result\n')
_CONFLICT = ('            if (first_name, first_arguments) != (name, arguments):\n'
             '                return refuse("idempotency_conflict", f"key {key!r} was used for another request")\n')
_RUN = ('    try:\n        result = {"ok": True, "content": json.dumps(tool["fn"](**arguments)), "error": None}\n'
        '    except Exception as error:  # the failure goes back to the model as a message\n'
        '        result = refuse("tool_error", f"{name} failed: {type(error).__name__}: {error}")\n')
_STORE = '    if tool["side_effects"]:\n        store[(caller, key)] = (name, arguments, result)\n'

# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    # -- enum_allowed_tokens ----------------------------------------------------------------
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_no_eos", (_EOS_RULE, "")),
     "emitted equals an option: the end token is added"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_eos_always",
                                  (_EOS_RULE, "    allowed.append(eos_id)\n")),
     "no option starts with what was emitted: the empty list"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_eos_on_a_prefix",
                                  ("    if emitted in encoded:", "    if any(target.startswith(emitted) for target in encoded):")),
     "the end token only when emitted equals an option exactly"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_specials", ('if piece != b"" and any(', "if any(")),
     "a special token (b'') is never allowed as text"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_decodes",  # half a character decodes to U+FFFD
                                  ("any(target.startswith(emitted + piece) for target in encoded)",
                                   'any(option.startswith((emitted + piece).decode("utf-8", "replace")) for option in options)')),
     "a token that ends inside a UTF-8 character is allowed when its bytes fit"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_ignores_emitted",
                                  ("target.startswith(emitted + piece)", "target.startswith(piece)")),
     "emitted + token must be a prefix of an option's bytes"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_strict_prefix",
                                  ("target.startswith(emitted + piece)",
                                   "target.startswith(emitted + piece) and target != emitted + piece")),
     "a token that completes an option exactly is allowed"),
    ("enum_allowed_tokens", _edit("enum_allowed_tokens", "_enum_unsorted", ("return sorted(allowed)", "return allowed")),
     "the result is a sorted list, the end token in its place"),
    # -- walk_token -------------------------------------------------------------------------
    ("walk_token", _edit("walk_token", "_walk_keeps_going", (_DEAD_EXIT, ""),
                         ("    return state", "    return None if state < 0 else state")),
     "a byte that leads to -1 ends the walk with None, whatever bytes follow"),
    ("walk_token", _edit("walk_token", "_walk_minus_one", ("            return None", "            return -1")),
     "a byte that leads to -1 gives None (not -1)"),
    ("walk_token", _edit("walk_token", "_walk_zero_is_dead", ("if state < 0:", "if not state or state < 0:")),
     "state 0 is a real state (the start), not 'dead'"),
    ("walk_token", _edit("walk_token", "_walk_first_byte", ("for byte in token:", "for byte in token[:1]:")),
     "the state after every byte of the token"),
    ("walk_token", _edit("walk_token", "_walk_empty_is_none",
                         ("    for byte in token:", "    if not token:\n        return None\n    for byte in token:")),
     "an empty token leaves the state unchanged"),
    ("walk_token", _edit("walk_token", "_walk_numpy_indexing", ("int(table[state][byte])", "int(table[state, byte])")),
     "(list of lists"),
    # -- constrained_sample -----------------------------------------------------------------
    ("constrained_sample", _edit("constrained_sample", "_sample_mask_last",  # the filters see the banned tokens
                                 ("apply_temperature(z, params.temperature)", "apply_temperature(logits, params.temperature)"),
                                 ("torch.softmax(z.double(), dim=-1)", 'torch.softmax(z.masked_fill(~allowed, float("-inf")).double(), dim=-1)')),
     "the mask comes before top-p: the nucleus is taken over allowed tokens"),
    ("constrained_sample", _edit("constrained_sample", "_sample_mask_last",
                                 ("apply_temperature(z, params.temperature)", "apply_temperature(logits, params.temperature)"),
                                 ("torch.softmax(z.double(), dim=-1)", 'torch.softmax(z.masked_fill(~allowed, float("-inf")).double(), dim=-1)')),
     "the mask comes before min-p"),
    ("constrained_sample", _edit("constrained_sample", "_sample_greedy_unmasked",
                                 ("        return int(z.argmax())", "        return int(logits.argmax())")),
     "greedy (T = 0) returns the best allowed token"),
    ("constrained_sample", _edit("constrained_sample", "_sample_multiplies",
                                 ('logits.masked_fill(~allowed, float("-inf"))', "logits * allowed")),
     "a banned token gets -inf, not 0"),
    ("constrained_sample", _edit("constrained_sample", "_sample_multinomial",
                                 ("int(sample_from_probs(probs, generator))", "int(torch.multinomial(probs, 1, generator=generator))")),
     "one float64 uniform per call by inverse CDF"),
    ("constrained_sample", _edit("constrained_sample", "_sample_checks_empty_only_when_sampling",
                                 moved("    if not bool(allowed.any()):", "    z = logits.masked_fill", "    z = apply_temperature")),
     "no allowed token at all raises ValueError (greedy too)"),
    ("constrained_sample", _edit("constrained_sample", "_sample_never_checks_empty", (_EMPTY_CHECK, "")),
     "no allowed token at all raises ValueError (greedy too)"),
    ("constrained_sample", _edit("constrained_sample", "_sample_greedy_draws_one_hot",
                                 ("        return int(z.argmax())",
                                  "        return int(sample_from_probs(torch.nn.functional.one_hot(z.argmax(), z.numel())"
                                  ".double(), generator))")),
     "greedy (T = 0) draws nothing from the generator"),
    ("constrained_sample", _edit("constrained_sample", "_sample_temperature_after_the_filters",
                                 moved("    z = apply_temperature", "    z = apply_top_k", "    z = apply_min_p")),
     "temperature comes before top-p"),
    ("constrained_sample", _edit("constrained_sample", "_sample_forgets_min_p", ("    z = apply_min_p(z, params.min_p)\n", "")),
     "min_p="),
    ("constrained_sample", _edit("constrained_sample", "_sample_returns_a_tensor",
                                 ("return int(sample_from_probs(probs, generator))", "return sample_from_probs(probs, generator)")),
     "each draw is returned as a Python int"),
    # -- constrained_decode (the example first) -------------------------------------
    ("constrained_decode", _edit("constrained_decode", "_decode_parses_a_cut_reply",
                                 ('    return {"text": tokenizer.decode(new), "value": None,',
                                  '    text = tokenizer.decode(new)\n'
                                  '    try:\n        value = json.loads(text)\n    except ValueError:\n        value = None\n'
                                  '    return {"text": text, "value": value,')),
     "ends exactly on a complete object"),
    ("constrained_decode", _edit("constrained_decode", "_decode_no_mask",  # and so no state to follow
                                 ("guide.mask(state)", "torch.ones(logits.shape[-1], dtype=torch.bool)"), (_ADVANCE, "")),
     "the text parses and validates against the schema (jsonschema)"),
    ("constrained_decode", _edit("constrained_decode", "_decode_frozen_state", (_ADVANCE, "")),
     "the token_ids equal the grader's greedy constrained loop"),
    ("constrained_decode", _edit("constrained_decode", "_decode_without_the_generation_prompt",
                                 ("encode_chat(tokenizer, messages)", "encode_chat(tokenizer, messages, add_generation_prompt=False)")),
     "from the prompt encode_chat(tokenizer, messages) gives"),
    ("constrained_decode", _edit("constrained_decode", "_decode_never_extends_the_prompt", ("        ids.append(token)\n", "")),
     "the token_ids equal the grader's greedy constrained loop"),
    ("constrained_decode", _edit("constrained_decode", "_decode_end_in_text",
                                 ("text = tokenizer.decode(new[:-1])", "text = tokenizer.decode(new)"),
                                 ('"value": json.loads(text)', '"value": json.loads(text.replace("<|end|>", ""))')),
     "the end token is the last token id and is left out of the text"),
    ("constrained_decode", _edit("constrained_decode", "_decode_reseeds",
                                 ("        token = constrained_sample(",
                                  "        generator = torch.Generator().manual_seed(0)  # a fresh one each step\n"
                                  "        token = constrained_sample(")),
     "one generator, one draw per step"),
    ("constrained_decode", _edit("constrained_decode", "_decode_stop_at_length",
                                 ('"finish_reason": "length"', '"finish_reason": "stop"')),
     "runs out first: finish reason 'length'"),
    ("constrained_decode", _edit("constrained_decode", "_decode_one_token_over_budget",
                                 ("range(params.max_new_tokens)", "range(params.max_new_tokens + 1)")),
     "runs out first: the 6 token ids and their text"),
    ("constrained_decode", _edit("constrained_decode", "_decode_drops_the_end_token",
                                 ('"token_ids": new, "finish_reason": "stop"', '"token_ids": new[:-1], "finish_reason": "stop"')),
     "the end token is the last token id"),
    ("constrained_decode", _edit("constrained_decode", "_decode_returns_its_state",
                                 ('"finish_reason": "stop"}', '"finish_reason": "stop", "state": state}')),
     "a finished reply too: a dict with exactly the keys"),
    ("constrained_decode", _edit("constrained_decode", "_decode_cut_text_drops_the_last_token",
                                 ('"text": tokenizer.decode(new), "value": None', '"text": tokenizer.decode(new[:-1]), "value": None')),
     "runs out first: the 6 token ids and their text"),
    # -- retry_until_valid ------------------------------------------------------------------
    ("retry_until_valid", _edit("retry_until_valid", "_retry_no_feedback", (_REPLY, ""), (_FEEDBACK, "")),
     "each attempt sees the rejected replies (assistant) and their bounded errors (user)"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_no_bad_text", (_REPLY, "")),
     "each attempt sees the rejected replies (assistant)"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_one_extra", ("range(1, max_retries + 2)", "range(1, max_retries + 3)")),
     "at most max_retries + 1 calls to propose"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_one_short", ("range(1, max_retries + 2)", "range(1, max_retries + 1)")),
     "max_retries=0: a single attempt, (None, 1)"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_until_ten", ("range(1, max_retries + 2)", "range(1, 11)")),
     "always rejected, max_retries=2: (None, 3)"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_unbounded", ("str(error)[:MAX_ERROR_CHARS]", "str(error)")),
     "a long error is cut to its first 200 characters"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_catches_all", ("except ValueError as error:", "except Exception as error:")),
     "an error other than ValueError propagates"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_mutates",
                                ("conversation = [dict(message) for message in messages]", "conversation = messages")),
     "the caller's messages are left unchanged"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_no_cap_check", (_CAP_CHECK, "")),
     "a negative max_retries raises ValueError"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_counts_from_zero",
                                ("for attempt in range(1, max_retries + 2):", "for attempt in range(max_retries + 1):")),
     "a valid first reply returns (value, 1)"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_error_before_reply", (_REPLY, ""), (_FEEDBACK, _FEEDBACK + _REPLY)),
     "each attempt sees the rejected replies (assistant) and their bounded errors (user)"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_cuts_the_whole_message",
                                ('"Your reply was rejected: " + str(error)[:MAX_ERROR_CHARS]',
                                 '("Your reply was rejected: " + str(error))[:MAX_ERROR_CHARS]')),
     "a long error is cut to its first 200 characters"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_reparses_the_reply",
                                ("            return validate(text), attempt",
                                 "            validate(text)\n            return json.loads(text), attempt")),
     "the result is the value validate returns, not the parsed reply"),
    ("retry_until_valid", _edit("retry_until_valid", "_retry_refuses_zero_retries", ("if max_retries < 0:", "if max_retries <= 0:")),
     "max_retries=0: a single attempt, (None, 1)"),
    # -- dispatch ---------------------------------------------------------------------------
    ("dispatch", _edit("dispatch", "_dispatch_permission_after_run", (_PERMISSION, ""), (_STORE, _STORE + _PERMISSION)),
     "a permission the caller lacks: permission_denied, nothing runs"),
    ("dispatch", _edit("dispatch", "_dispatch_ignores_key", (_REPLAY, "")),
     "a repeated key returns the stored result without running again"),
    ("dispatch", _edit("dispatch", "_dispatch_no_schema", (_SCHEMA, "")),
     "a fabricated argument fails the schema: invalid_arguments"),
    ("dispatch", _edit("dispatch", "_dispatch_permission_first", (_PERMISSION, ""), (_ARGUMENTS, _PERMISSION + _ARGUMENTS)),
     "order: bad arguments and no permission is invalid_arguments"),
    ("dispatch", _edit("dispatch", "_dispatch_no_conflict", (_CONFLICT, "")),
     "the same key with other arguments: idempotency_conflict"),
    ("dispatch", _edit("dispatch", "_dispatch_forgets_failures",
                       ('    if tool["side_effects"]:\n        store[', '    if tool["side_effects"] and result["ok"]:\n        store[')),
     "retrying a failed side-effecting call with its key returns the stored tool_error"),
    ("dispatch", _edit("dispatch", "_dispatch_crashes",
                       (_RUN, '    result = {"ok": True, "content": json.dumps(tool["fn"](**arguments)), "error": None}\n')),
     "a tool that raises gives tool_error"),
    ("dispatch", _edit("dispatch", "_dispatch_runs_without_a_key",
                       ('        if key is None:\n            return refuse("missing_idempotency_key", f"{name} changes state; '
                        'send an idempotency key")\n', "")),
     "a side-effecting call without a key: missing_idempotency_key, nothing runs"),
    ("dispatch", _edit("dispatch", "_dispatch_silent_refusals",
                       ('"content": f"error ({kind}): {message}"', '"content": ""')),
     "a name not in tools: unknown_tool, nothing runs"),
    ("dispatch", _edit("dispatch", "_dispatch_global_keys",
                       ("if (caller, key) in store:", "if key in store:"), ("= store[(caller, key)]", "= store[key]"),
                       ("store[(caller, key)] = (name", "store[key] = (name")),
     "another caller sending the same key starts its own request"),
    ("dispatch", _edit("dispatch", "_dispatch_parses_before_the_allow_list",
                       (_ALLOW_LIST, ""), ("    problem = jsonschema", _ALLOW_LIST + "    problem = jsonschema")),
     "order: an unknown tool with bad arguments is unknown_tool"),
    ("dispatch", _edit("dispatch", "_dispatch_trusts_the_schema_for_objects", (_NOT_AN_OBJECT, "")),
     "even where the schema allows any value"),
    ("dispatch", _edit("dispatch", "_dispatch_refuses_tools_without_a_permission",
                       ('if tool["permission"] is not None and tool["permission"] not in permissions:',
                        'if tool["permission"] not in permissions:')),
     "a valid call runs: ok, content = json.dumps"),
    ("dispatch", _edit("dispatch", "_dispatch_conflicts_on_arguments_only",
                       ("if (first_name, first_arguments) != (name, arguments):", "if first_arguments != arguments:")),
     "the same key and the same arguments for another tool: idempotency_conflict"),
    ("dispatch", _edit("dispatch", "_dispatch_compares_json_strings",
                       ("!= (name, arguments):", '!= (name, call["arguments"]):'),
                       ("store[(caller, key)] = (name, arguments, result)", 'store[(caller, key)] = (name, call["arguments"], result)')),
     "the same arguments in another key order are the same request"),
    ("dispatch", _edit("dispatch", "_dispatch_str_content", ('json.dumps(tool["fn"](**arguments))', 'str(tool["fn"](**arguments))')),
     "a valid call runs: ok, content = json.dumps"),
    ("dispatch", _edit("dispatch", "_dispatch_replays_any_tool_with_a_key",
                       ("        if (caller, key) in store:", "    if key is not None and (caller, key) in store:"),
                       ('    if tool["side_effects"]:\n        store[(caller, key)]', '    if key is not None:\n        store[(caller, key)]')),
     "a tool without side effects runs every time, key or not"),
]
