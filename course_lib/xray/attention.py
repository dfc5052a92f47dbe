"""Attention for one generated token: where each head of each layer looked from the position
that produced it.

The engine's fused paged attention never forms the weights, so they come from a second pass
of the reference transformer (``Transformer.attention_maps``, the unfused attention of
notebook 02) over exactly the sequence the engine had when it sampled that token: the prompt
and the tokens generated before it. Its query is the last position of that sequence, whose
logits the token was drawn from.

>>> from course_lib.model import load_model, load_tokenizer
>>> from course_lib.serving.xray import RequestXray, TokenRecord
>>> model, tok = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
>>> xray = RequestXray(prompt_ids=(1, 2, 3))
>>> xray.tokens.append(TokenRecord(7, 1, 0.0, 1.0, (), (), (), (), None))
>>> maps = token_attention(model, tok, xray, 0)
>>> maps["position"], len(maps["keys"]), len(maps["layers"]) == model.config.n_layers
(2, 3, True)
>>> [round(sum(row), 4) for row in maps["layers"][0]][:2]     # each head's weights sum to 1
[1.0, 1.0]
"""
from __future__ import annotations

import torch

from course_lib.serving.xray import RequestXray
from course_lib.xray.document import TokenNames

__all__ = ["token_attention"]

NOTE = ("computed by a second pass of the reference transformer over this exact sequence (the engine's fused "
        "attention never forms the weights)")


def token_attention(model, tokenizer, xray: RequestXray, index: int) -> dict:
    """{"position", "keys": [token text], "layers": [[head weights over the keys]]} for generated
    token ``index`` of the X-ray."""
    if not 0 <= index < len(xray.tokens):
        raise ValueError(f"token index {index} is outside the reply, which has {len(xray.tokens)} tokens so far; "
                         f"use 0..{len(xray.tokens) - 1}")
    sequence = list(xray.prompt_ids) + [t.token_id for t in xray.tokens[:index]]
    ids = torch.tensor([sequence], device=model.device)
    maps = model.attention_maps(ids)  # per layer (1, H, T, T)
    query = len(sequence) - 1
    layers = [[[round(w, 5) for w in head] for head in layer[0, :, query, :query + 1].tolist()] for layer in maps]
    names = TokenNames(tokenizer)
    keys = [names.shown(t) for t in sequence]
    return {"token_index": index, "position": query, "keys": keys, "layers": layers, "note": NOTE}
