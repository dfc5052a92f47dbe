"""Approval for material effects: the model proposes, the user confirms, the code pays once.

A call that moves money (or deletes data, or sends mail) does not run because the model wrote it.
``ApprovalGate.propose`` turns the call into a pending confirmation, bound to the session's user
and to the exact call (its fingerprint: tool name and canonical arguments), and returns the words
the user is shown. Only ``confirm``, called from the user's own action with the confirmation id,
runs it: through the dispatcher, with the confirmation id as the idempotency key scoped to that
user, so a retried confirmation returns the first outcome instead of paying twice. A different
user cannot confirm it, an expired one cannot be confirmed, and a changed call needs a new one.

    >>> from decimal import Decimal
    >>> from course_lib.tools import Dispatcher, demo_book, refund_registry
    >>> from course_lib.tools.wire import ToolCall
    >>> book = demo_book()
    >>> gate = ApprovalGate(Dispatcher(refund_registry(book, user="alice")), user="alice",
    ...                     permissions={"refunds:write"})
    >>> pending = gate.propose(ToolCall("c1", "refund_order", {"order_id": "A1234", "amount": 20,
    ...                                                        "currency": "USD", "reason": "late"}))
    >>> pending.summary
    'refund_order: amount=20, currency=USD, order_id=A1234, reason=late'
    >>> gate.confirm(pending.confirmation_id, user="mallory").outcome
    'wrong_user'
    >>> [gate.confirm(pending.confirmation_id, user="alice").outcome for _ in range(2)], book.refunds
    (['done', 'replayed'], (('A1234', Decimal('20.00')),))
"""
from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from course_lib.tools.dispatch import Dispatcher, ToolResult
from course_lib.tools.wire import ToolCall, call_fingerprint

__all__ = ["ApprovalGate", "Decision", "Pending"]


@dataclass(frozen=True)
class Pending:
    confirmation_id: str
    user: str
    call: ToolCall
    fingerprint: str
    expires_at: float
    summary: str  # what the user is asked to confirm, built from the arguments (never from model prose)


@dataclass(frozen=True)
class Decision:
    outcome: str                   # done, replayed, failed, unknown, wrong_user, expired, changed
    result: ToolResult | None = None


class ApprovalGate:
    def __init__(self, dispatcher: Dispatcher, *, user: str, permissions: Collection[str], ttl_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.dispatcher, self.user, self.permissions = dispatcher, user, frozenset(permissions)
        self.ttl_s, self.clock = ttl_s, clock
        self._pending: dict[str, Pending] = {}

    def propose(self, call: ToolCall) -> Pending:
        """Hold ``call`` for the session user's confirmation; nothing runs yet.

        The arguments are copied (a JSON string is parsed first), so changing the caller's dict
        afterwards changes neither what the user was shown nor what runs."""
        arguments = json.loads(call.arguments) if isinstance(call.arguments, str) else copy.deepcopy(call.arguments)
        if not isinstance(arguments, dict):
            raise ValueError(f"a tool call's arguments must be a JSON object, got {type(arguments).__name__}")
        held = ToolCall(call.id, call.name, arguments)
        summary = f"{call.name}: " + ", ".join(f"{k}={v}" for k, v in sorted(arguments.items()))
        pending = Pending(secrets.token_urlsafe(12), self.user, held, call_fingerprint(call.name, arguments),
                          self.clock() + self.ttl_s, summary)
        self._pending[pending.confirmation_id] = pending
        return pending

    def confirm(self, confirmation_id: str, *, user: str) -> Decision:
        """Run a pending call for the user it was proposed to, at most once."""
        pending = self._pending.get(confirmation_id)
        if pending is None:
            return Decision("unknown")
        if user != pending.user:
            return Decision("wrong_user")
        if self.clock() > pending.expires_at:
            return Decision("expired")
        if call_fingerprint(pending.call.name, pending.call.arguments) != pending.fingerprint:
            return Decision("changed")  # defence in depth: the held copy is private, so this never fires
        result = self.dispatcher.dispatch(pending.call, permissions=self.permissions,
                                          idempotency_key=confirmation_id, caller=user)
        return Decision("replayed" if result.replayed else "done" if result.ok else "failed", result)
