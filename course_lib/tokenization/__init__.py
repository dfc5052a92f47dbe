"""Tokenization: production encodings offline, and byte-level BPE written from scratch."""
from course_lib.tokenization.bpe import BPETokenizer
from course_lib.tokenization.cost import (
    ChatTokenCount,
    TextCost,
    cost_table,
    count_chat_tokens,
    count_tokens,
    format_cost_table,
    text_cost,
)
from course_lib.tokenization.display import token_boundaries_html, token_pieces
from course_lib.tokenization.offline import (
    KNOWN_ENCODINGS,
    RankFileError,
    encoding_spec,
    get_encoding,
    prime_tiktoken_cache,
)
from course_lib.tokenization.pretokenize import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN, split_text
from course_lib.tokenization.samples import CATEGORY_SAMPLES, synthetic_corpus
from course_lib.tokenization.serialize import TokenizerFileError

__all__ = [
    "BPETokenizer",
    "CATEGORY_SAMPLES",
    "ChatTokenCount",
    "TextCost",
    "cost_table",
    "count_chat_tokens",
    "count_tokens",
    "format_cost_table",
    "synthetic_corpus",
    "text_cost",
    "token_boundaries_html",
    "token_pieces",
    "GPT2_PATTERN",
    "GPT4_PATTERN",
    "KNOWN_ENCODINGS",
    "O200K_PATTERN",
    "RankFileError",
    "TokenizerFileError",
    "encoding_spec",
    "get_encoding",
    "prime_tiktoken_cache",
    "split_text",
]
