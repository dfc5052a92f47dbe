"""Tool calling: definitions, the OpenAI wire format, validated dispatch and the tool loop.

    >>> from course_lib.tools import Dispatcher, parse_tinychat_tool_call, tinychat_registry
    >>> call = parse_tinychat_tool_call('<|tool_call|>{"name": "get_time", "arguments": {"city": "Oslo"}}')
    >>> result = Dispatcher(tinychat_registry()).dispatch(call)
    >>> result.ok, result.as_message()["role"]
    (True, 'tool')

The model proposes (``parse_tinychat_tool_call``), code disposes (``Dispatcher``), and
``run_tool_loop`` repeats that until the model answers in plain text or a cap stops it.
"""
from course_lib.tools.dispatch import ERROR_KINDS, Dispatcher, IdempotencyEntry, ToolResult, check_permissions
from course_lib.tools.loop import (STOP_REASONS, ToolStep, ToolTranscript, model_proposer, run_tool_loop,
                                   tool_loop)
from course_lib.tools.refund import (REFUND_PERMISSION, Order, OrderBook, RefundRequest, demo_book,
                                     lookup_order_tool, refund_registry, refund_tool)
from course_lib.tools.registry import ToolRegistry, UnknownToolError
from course_lib.tools.tinychat_tools import tinychat_registry
from course_lib.tools.tool import Tool
from course_lib.tools.wire import (ToolCall, call_fingerprint, from_openai_messages, openai_tool_call,
                                   parse_tinychat_tool_call, tinychat_tool_call, to_openai_messages)

__all__ = [
    "ERROR_KINDS",
    "REFUND_PERMISSION",
    "STOP_REASONS",
    "Dispatcher",
    "IdempotencyEntry",
    "Order",
    "OrderBook",
    "RefundRequest",
    "Tool",
    "ToolCall",
    "ToolRegistry",
    "ToolResult",
    "ToolStep",
    "ToolTranscript",
    "UnknownToolError",
    "call_fingerprint",
    "check_permissions",
    "demo_book",
    "from_openai_messages",
    "lookup_order_tool",
    "model_proposer",
    "openai_tool_call",
    "parse_tinychat_tool_call",
    "refund_registry",
    "refund_tool",
    "run_tool_loop",
    "tinychat_registry",
    "tinychat_tool_call",
    "to_openai_messages",
    "tool_loop",
]
