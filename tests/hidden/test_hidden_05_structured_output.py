"""Known-wrong answers to notebook 05, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import json

import jsonschema
import torch

from course_lib.sampling import apply_min_p, apply_temperature, apply_top_k, apply_top_p, sample_from_probs
from course_lib.tokenization.chat_template import encode_chat

NEG_INF = float("-inf")


# -- enum_allowed_tokens -----------------------------------------------------------------------
def _enum_with(*, eos="exact", specials=False, decode=False, use_emitted=True, strict=False):
    def enum_allowed_tokens(options, token_bytes, emitted, eos_id):
        targets = [o.encode("utf-8") for o in options]
        allowed = []
        for token, piece in enumerate(token_bytes):
            if piece == b"" and not specials:
                continue
            candidate = (emitted + piece) if use_emitted else piece
            if decode:  # compares text: a token ending inside a character never decodes
                try:
                    text = candidate.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                fits = any(o.startswith(text) for o in options)
            elif strict:  # a token that completes an option is not "a prefix"
                fits = any(t.startswith(candidate) and len(t) > len(candidate) for t in targets)
            else:
                fits = any(t.startswith(candidate) for t in targets)
            if fits:
                allowed.append(token)
        if eos == "always" or (eos == "exact" and emitted in targets):
            allowed.append(eos_id)
        return sorted(set(allowed))
    enum_allowed_tokens.__name__ = "_enum_" + "_".join(
        k for k, on in (("no_eos", eos == "never"), ("eos_always", eos == "always"), ("specials", specials),
                        ("decodes", decode), ("ignores_emitted", not use_emitted), ("strict", strict)) if on)
    return enum_allowed_tokens


# -- walk_token --------------------------------------------------------------------------------
def _walk_keeps_going(table, state, token):  # no early exit: a dead -1 indexes the last row
    for byte in token:
        state = int(table[state][byte])
    return None if state < 0 else state


def _walk_minus_one(table, state, token):
    for byte in token:
        state = int(table[state][byte])
        if state < 0:
            return -1
    return state


def _walk_zero_is_dead(table, state, token):
    for byte in token:
        state = int(table[state][byte])
        if not state or state < 0:  # state 0 is the start state, not dead
            return None
    return state


def _walk_first_byte(table, state, token):
    if not token:
        return state
    target = int(table[state][token[0]])
    return None if target < 0 else target


def _walk_empty_is_none(table, state, token):
    if not token:
        return None
    for byte in token:
        state = int(table[state][byte])
        if state < 0:
            return None
    return state


# -- constrained_sample ------------------------------------------------------------------------
def _filters(z, params):
    return apply_min_p(apply_top_p(apply_top_k(apply_temperature(z, params.temperature), params.top_k),
                                   params.top_p), params.min_p)


def _sample_mask_last(logits, allowed, params, generator):  # filters over the full vocabulary, then the mask
    if not bool(allowed.any()):
        raise ValueError("nothing allowed")
    if params.temperature == 0:
        return int(logits.masked_fill(~allowed, NEG_INF).argmax())
    z = _filters(logits, params).masked_fill(~allowed, NEG_INF)
    return int(sample_from_probs(torch.softmax(z.double(), -1), generator))


def _sample_greedy_unmasked(logits, allowed, params, generator):  # greedy forgets the mask
    if not bool(allowed.any()):
        raise ValueError("nothing allowed")
    if params.temperature == 0:
        return int(logits.argmax())
    z = _filters(logits.masked_fill(~allowed, NEG_INF), params)
    return int(sample_from_probs(torch.softmax(z.double(), -1), generator))


def _sample_multiplies(logits, allowed, params, generator):  # "masks" with logits * allowed: a banned logit is 0
    if not bool(allowed.any()):
        raise ValueError("nothing allowed")
    z = logits * allowed
    if params.temperature == 0:
        return int(z.argmax())
    return int(sample_from_probs(torch.softmax(_filters(z, params).double(), -1), generator))


def _sample_multinomial(logits, allowed, params, generator):
    if not bool(allowed.any()):
        raise ValueError("nothing allowed")
    z = logits.masked_fill(~allowed, NEG_INF)
    if params.temperature == 0:
        return int(z.argmax())
    return int(torch.multinomial(torch.softmax(_filters(z, params).double(), -1), 1, generator=generator))


# -- constrained_decode ------------------------------------------------------------------------
def _sample(logits, allowed, params, generator):
    z = logits.masked_fill(~allowed, NEG_INF)
    if params.temperature == 0:
        return int(z.argmax())
    return int(sample_from_probs(torch.softmax(_filters(z, params).double(), -1), generator))


def _decode_with(*, mask=True, advance=True, end_in_text=False, reseed=False, length_reason="length"):
    def constrained_decode(model, tokenizer, messages, guide, params, generator=None):
        ids = encode_chat(tokenizer, messages)
        state, new = guide.initial_state, []
        for _ in range(params.max_new_tokens):
            with torch.no_grad():
                logits = model(torch.tensor([ids]))[0, -1].float()
            allowed = guide.mask(state) if mask else torch.ones(logits.shape[-1], dtype=torch.bool)
            if reseed:  # a fresh generator every step instead of the one given
                generator = torch.Generator().manual_seed(0)
            token = _sample(logits, allowed, params, generator)
            ids.append(token)
            new.append(token)
            if token == guide.eos_id:
                text = tokenizer.decode(new if end_in_text else new[:-1])
                try:
                    value = json.loads(text)
                except ValueError:
                    value = None
                return {"text": text, "value": value, "token_ids": new, "finish_reason": "stop"}
            if advance and mask:
                state = guide.next_state(state, token)
            elif mask:
                pass  # the state never moves: every step gets the first step's mask
        return {"text": tokenizer.decode(new), "value": None, "token_ids": new, "finish_reason": length_reason}
    constrained_decode.__name__ = "_decode_" + "_".join(
        k for k, on in (("no_mask", not mask), ("frozen_state", not advance), ("end_in_text", end_in_text),
                        ("reseeds", reseed), ("stop_at_length", length_reason != "length")) if on)
    return constrained_decode


# -- retry_until_valid -------------------------------------------------------------------------
def _retry_with(*, feedback=True, bad_text=True, extra=0, bound=200, catch=ValueError, copy=True, check_cap=True):
    def retry_until_valid(propose, validate, messages, max_retries=2):
        if check_cap and max_retries < 0:
            raise ValueError("negative")
        conversation = [dict(m) for m in messages] if copy else messages
        attempts = max(0, max_retries + 1 + extra)
        for attempt in range(1, attempts + 1):
            text = propose(list(conversation))
            try:
                return validate(text), attempt
            except catch as error:
                if feedback:
                    if bad_text:
                        conversation.append({"role": "assistant", "content": text})
                    message = str(error) if bound is None else str(error)[:bound]
                    conversation.append({"role": "user", "content": "Your reply was rejected: " + message})
        return None, attempts
    retry_until_valid.__name__ = "_retry_" + "_".join(
        k for k, on in (("no_feedback", not feedback), ("no_bad_text", not bad_text), (f"extra{extra}", extra),
                        ("unbounded", bound is None), ("catches_all", catch is Exception),
                        ("mutates", not copy), ("no_cap_check", not check_cap)) if on)
    return retry_until_valid


# -- dispatch ----------------------------------------------------------------------------------
def _dispatch_with(*, order=("name", "arguments", "permission"), validate_schema=True, permission_after_run=False,
                   store_keys=True, conflicts=True, store_failures=True, catch=True):
    def dispatch(call, tools, permissions, store):
        def refuse(kind):
            return {"ok": False, "content": f"error: {kind}", "error": kind}

        name = call["name"]
        tool = tools.get(name)
        arguments = None
        for check in order:
            if check == "name" and tool is None:
                return refuse("unknown_tool")
            if check == "arguments":
                try:
                    arguments = json.loads(call["arguments"])
                except ValueError:
                    return refuse("invalid_arguments")
                if not isinstance(arguments, dict):
                    return refuse("invalid_arguments")
                if validate_schema and not jsonschema.Draft202012Validator(tool["parameters"]).is_valid(arguments):
                    return refuse("invalid_arguments")
            if check == "permission" and not permission_after_run and tool is not None \
                    and tool["permission"] is not None and tool["permission"] not in permissions:
                return refuse("permission_denied")
        key = call.get("idempotency_key")
        if tool["side_effects"]:
            if key is None:
                return refuse("missing_idempotency_key")
            if store_keys and key in store:
                first_name, first_arguments, first_result = store[key]
                if conflicts and (first_name, first_arguments) != (name, arguments):
                    return refuse("idempotency_conflict")
                return first_result
        try:
            result = {"ok": True, "content": json.dumps(tool["fn"](**arguments)), "error": None}
        except Exception:
            if not catch:
                raise
            result = refuse("tool_error")
        if permission_after_run and tool["permission"] is not None and tool["permission"] not in permissions:
            return refuse("permission_denied")  # too late: the tool already ran
        if tool["side_effects"] and store_keys and (result["ok"] or store_failures):
            store[key] = (name, arguments, result)
        return result
    dispatch.__name__ = "_dispatch_" + "_".join(
        k for k, on in (("permission_first", order[1] == "permission"), ("no_schema", not validate_schema),
                        ("permission_after_run", permission_after_run), ("ignores_key", not store_keys),
                        ("no_conflict", not conflicts), ("forgets_failures", not store_failures),
                        ("crashes", not catch)) if on)
    return dispatch


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("enum_allowed_tokens", {"enum_allowed_tokens": _enum_with(eos="never")}, "emitted equals an option: the end token is added"),
    ("enum_allowed_tokens", {"enum_allowed_tokens": _enum_with(eos="always")},
     "no option starts with what was emitted: the empty list"),
    ("enum_allowed_tokens", {"enum_allowed_tokens": _enum_with(specials=True)},
     "a special token (b'') is never allowed as text"),
    ("enum_allowed_tokens", {"enum_allowed_tokens": _enum_with(decode=True)},
     "a token that ends inside a UTF-8 character is allowed when its bytes fit"),
    ("enum_allowed_tokens", {"enum_allowed_tokens": _enum_with(use_emitted=False)},
     "emitted + token must be a prefix of an option's bytes"),
    ("enum_allowed_tokens", {"enum_allowed_tokens": _enum_with(strict=True)},
     "a token that completes an option exactly is allowed"),
    ("walk_token", {"walk_token": _walk_keeps_going}, "a byte that leads to -1 ends the walk with None, whatever bytes follow"),
    ("walk_token", {"walk_token": _walk_minus_one}, "a byte that leads to -1 gives None (not -1)"),
    ("walk_token", {"walk_token": _walk_zero_is_dead}, "state 0 is a real state (the start), not 'dead'"),
    ("walk_token", {"walk_token": _walk_first_byte}, "the state after every byte of the token"),
    ("walk_token", {"walk_token": _walk_empty_is_none}, "an empty token leaves the state unchanged"),
    ("constrained_sample", {"constrained_sample": _sample_mask_last},
     "the mask comes before top-p: the nucleus is taken over allowed tokens"),
    ("constrained_sample", {"constrained_sample": _sample_mask_last}, "the mask comes before min-p"),
    ("constrained_sample", {"constrained_sample": _sample_greedy_unmasked}, "greedy (T = 0) returns the best allowed token"),
    ("constrained_sample", {"constrained_sample": _sample_multiplies}, "a banned token gets -inf, not 0"),
    ("constrained_sample", {"constrained_sample": _sample_multinomial}, "one float64 uniform per call by inverse CDF"),
    ("constrained_decode", {"constrained_decode": _decode_with(mask=False)},
     "the text parses and validates against the schema (jsonschema)"),
    ("constrained_decode", {"constrained_decode": _decode_with(advance=False)},
     "the token_ids equal the grader's greedy constrained loop"),
    ("constrained_decode", {"constrained_decode": _decode_with(end_in_text=True)},
     "the end token is the last token id and is left out of the text"),
    ("constrained_decode", {"constrained_decode": _decode_with(reseed=True)},
     "the same tokens as the grader's seeded loop (one generator, one draw per step)"),
    ("constrained_decode", {"constrained_decode": _decode_with(length_reason="stop")},
     "runs out first: finish reason 'length'"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(feedback=False)},
     "each attempt sees the rejected replies (assistant) and their bounded errors (user)"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(bad_text=False)},
     "each attempt sees the rejected replies (assistant)"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(extra=1)}, "at most max_retries + 1 calls to propose"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(extra=-1)}, "max_retries=0: a single attempt, (None, 1)"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(extra=8)}, "always rejected, max_retries=2: (None, 3)"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(bound=None)}, "a long error is cut to its first 200 characters"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(catch=Exception)},
     "an error other than ValueError propagates"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(copy=False)}, "the caller's messages are left unchanged"),
    ("retry_until_valid", {"retry_until_valid": _retry_with(check_cap=False)}, "a negative max_retries raises ValueError"),
    ("dispatch", {"dispatch": _dispatch_with(permission_after_run=True)},
     "a permission the caller lacks: permission_denied, nothing runs"),
    ("dispatch", {"dispatch": _dispatch_with(store_keys=False)},
     "a repeated key returns the stored result without running again"),
    ("dispatch", {"dispatch": _dispatch_with(validate_schema=False)},
     "a fabricated argument fails the schema: invalid_arguments"),
    ("dispatch", {"dispatch": _dispatch_with(order=("name", "permission", "arguments"))},
     "order: bad arguments and no permission is invalid_arguments"),
    ("dispatch", {"dispatch": _dispatch_with(conflicts=False)},
     "the same key with other arguments: idempotency_conflict"),
    ("dispatch", {"dispatch": _dispatch_with(store_failures=False)},
     "retrying a failed side-effecting call with its key returns the stored tool_error"),
    ("dispatch", {"dispatch": _dispatch_with(catch=False)}, "a tool that raises gives tool_error"),
]
