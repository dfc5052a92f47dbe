"""The capstone's menus: what notebook 08's exercises choose from.

The notebook's setup cell imports these (they must exist while grading, when the visible
checks are not importable), and its visible checks read the same tuples, so the text a learner
reads and the checks cannot drift apart:

    >>> "engine" in COMPONENTS and "block_unsupported" in FIXES
    True
"""
from __future__ import annotations

# -- exercise 1: who owns each guarantee ------------------------------------------------------------
COMPONENTS = ("model", "tokenizer", "context packer", "engine", "sampler", "grammar guide", "dispatcher",
              "grounding check", "trace log", "nobody")
GUARANTEES = {
    "prompt_fits": "the prompt, with room kept for the reply, fits the context window",
    "template_billed": "the token count that is billed includes the chat template's markers",
    "kv_fits": "a request is admitted only when its KV cache can have room in the memory pool",
    "length_capped": "a reply never runs past max_new_tokens",
    "seed_repeats": "the same prompt, parameters and seed give the same reply",
    "reply_parses": "the reply matches its grammar (the JSON schema, or the cited-answer format)",
    "arguments_valid": "a tool runs only with arguments that fit the tool's schema",
    "tool_permitted": "a tool runs only when the session holds the tool's permission",
    "claim_supported": "the reply's statement is checked against the text of the passage it cites",
    "log_untampered": "an edited or deleted line of the trace log is detected",
    "no_pii_logged": "no email address or card number is written to the trace log",
    "answer_true": "the answer is true",
}

# -- exercise 3: diagnosing a failing trace -------------------------------------------------------
STAGES = ("none", "packing", "sampling", "decoding", "tool", "grounding")
FIXES = ("none", "shrink_context", "lower_temperature", "raise_max_tokens", "constrain_output", "block_unsupported",
         "constrain_tool_call")
FINAL_STATES = ("answered", "abstained", "refused", "error")
