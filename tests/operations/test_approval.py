"""The approval gate over the refund tool: bound to the user and the call, run at most once."""
from __future__ import annotations

from decimal import Decimal

from course_lib.operations.approval import ApprovalGate
from course_lib.tools import Dispatcher, demo_book, refund_registry
from course_lib.tools.wire import ToolCall, call_fingerprint

REFUND = {"order_id": "A1234", "amount": 20, "currency": "USD", "reason": "late"}


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def _gate(book, user="alice", **options):
    return ApprovalGate(Dispatcher(refund_registry(book, user=user)), user=user, permissions={"refunds:write"},
                        **options)


def test_proposing_runs_nothing_and_binds_the_user_and_the_exact_call():
    book = demo_book()
    clock = Clock(50.0)
    gate = _gate(book, ttl_s=30.0, clock=clock)
    pending = gate.propose(ToolCall("c1", "refund_order", dict(REFUND)))
    assert book.refunds == ()
    assert pending.user == "alice" and pending.expires_at == 80.0
    assert pending.fingerprint == call_fingerprint("refund_order", dict(reversed(list(REFUND.items()))))
    assert pending.summary == "refund_order: amount=20, currency=USD, order_id=A1234, reason=late"


def test_confirmed_once_the_money_moves_once_and_a_retry_replays():
    book = demo_book()
    gate = _gate(book)
    pending = gate.propose(ToolCall("c1", "refund_order", dict(REFUND)))
    first = gate.confirm(pending.confirmation_id, user="alice")
    again = gate.confirm(pending.confirmation_id, user="alice")
    assert (first.outcome, again.outcome) == ("done", "replayed")
    assert first.result.ok and again.result.replayed and again.result.content == first.result.content
    assert book.refunds == (("A1234", Decimal("20.00")),)
    assert book.get("A1234").refunded == Decimal("20.00")


def test_another_user_or_an_unknown_id_cannot_confirm():
    book = demo_book()
    gate = _gate(book)
    pending = gate.propose(ToolCall("c1", "refund_order", dict(REFUND)))
    wrong = gate.confirm(pending.confirmation_id, user="mallory")
    unknown = gate.confirm("not-an-id", user="alice")
    assert (wrong.outcome, wrong.result, unknown.outcome, unknown.result) == ("wrong_user", None, "unknown", None)
    assert book.refunds == ()
    assert gate.confirm(pending.confirmation_id, user="alice").outcome == "done"  # still pending for alice


def test_an_expired_confirmation_runs_nothing():
    book = demo_book()
    clock = Clock(0.0)
    gate = _gate(book, ttl_s=60.0, clock=clock)
    pending = gate.propose(ToolCall("c1", "refund_order", dict(REFUND)))
    clock.now = 60.0
    at_deadline = gate.propose(ToolCall("c2", "refund_order", {**REFUND, "amount": 1}))  # expires at 120
    clock.now = 60.5
    assert gate.confirm(pending.confirmation_id, user="alice").outcome == "expired"
    assert book.refunds == ()
    clock.now = 120.0
    assert gate.confirm(at_deadline.confirmation_id, user="alice").outcome == "done"
    assert book.refunds == (("A1234", Decimal("1.00")),)


def test_two_proposals_of_the_same_call_are_two_confirmations_and_each_pays():
    book = demo_book()
    gate = _gate(book)
    one = gate.propose(ToolCall("c1", "refund_order", dict(REFUND)))
    two = gate.propose(ToolCall("c1", "refund_order", dict(REFUND)))
    assert one.confirmation_id != two.confirmation_id and one.fingerprint == two.fingerprint
    outcomes = [gate.confirm(p.confirmation_id, user="alice").outcome for p in (one, two, one, two)]
    assert outcomes == ["done", "done", "replayed", "replayed"]
    assert book.refunds == (("A1234", Decimal("20.00")),) * 2


def test_a_proposal_for_another_users_order_fails_in_the_dispatcher_and_moves_no_money():
    book = demo_book()
    gate = _gate(book)
    pending = gate.propose(ToolCall("c1", "refund_order", {**REFUND, "order_id": "B7777"}))  # mallory's
    decision = gate.confirm(pending.confirmation_id, user="alice")
    assert decision.outcome == "failed" and not decision.result.ok
    assert decision.result.error_kind == "tool_error" and "does not belong" in decision.result.content
    assert book.refunds == () and book.get("B7777").refunded == Decimal("0.00")
    assert gate.confirm(pending.confirmation_id, user="alice").outcome == "replayed"  # the failure is stored too
    assert book.refunds == ()


def test_without_the_permission_the_confirmed_call_is_refused():
    book = demo_book()
    gate = ApprovalGate(Dispatcher(refund_registry(book, user="alice")), user="alice", permissions=set())
    decision = gate.confirm(gate.propose(ToolCall("c1", "refund_order", dict(REFUND))).confirmation_id, user="alice")
    assert decision.outcome == "failed" and decision.result.error_kind == "permission_denied"
    assert book.refunds == ()


def test_changing_the_callers_arguments_after_proposing_changes_nothing():
    book = demo_book()
    gate = _gate(book)
    arguments = {"order_id": "A1234", "amount": 20, "currency": "USD", "reason": "late"}
    pending = gate.propose(ToolCall("c1", "refund_order", arguments))
    arguments["amount"] = 100  # the caller's dict, mutated after the user was shown amount=20
    assert gate.confirm(pending.confirmation_id, user="alice").outcome == "done"
    assert book.refunds == (("A1234", Decimal("20.00")),)


def test_arguments_given_as_a_json_string_are_parsed_for_the_summary_and_the_run():
    book = demo_book()
    gate = _gate(book)
    pending = gate.propose(ToolCall("c1", "refund_order",
                                    '{"order_id": "A1234", "amount": 5, "currency": "USD", "reason": "late"}'))
    assert "amount=5" in pending.summary
    assert gate.confirm(pending.confirmation_id, user="alice").outcome == "done"
    assert book.refunds == (("A1234", Decimal("5.00")),)
