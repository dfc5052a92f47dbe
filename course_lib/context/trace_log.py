"""The per-request trace log: one redacted, hash-chained JSON line for every served request.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "trace.jsonl"
    >>> record = TraceRecord(request_id="req-1", timestamp="2024-05-01T12:00:00Z", app_version="1.0",
    ...                      model="tinychat", weights_sha256="ab" * 32, template="chatml",
    ...                      decoding={"temperature": 0}, retrieval={"index_version": 3, "passage_ids": ["doc-1"]},
    ...                      tools_version="t1", policy_version="p1", validation={"json": True},
    ...                      tokens={"prompt": 12, "completion": 4}, latency_ms={"prefill": 2.5},
    ...                      cost_usd=0.0, final_state="answered", metadata={"user": "mail me at ann@example.com"})
    >>> log = TraceLog(path)
    >>> len(log.append(record))                # the new line's hash: sha256 hex
    64
    >>> "ann@example.com" in path.read_text()  # redacted before hashing: the log never holds it
    False
    >>> verify(path)
    VerifyResult(ok=True, records=1, bad_line=None, reason=None, is_trace=True)
    >>> head = log.head()                      # kept somewhere else, it reveals a cut tail
    >>> head.records, head.hash == json.loads(path.read_text())["hash"]
    (1, True)
    >>> verify(path, head).ok
    True
    >>> redact("call +44 20 7946 0958 or pay with 4111 1111 1111 1111 (order 123456, 2024)")
    'call [PHONE] or pay with [CARD] (order 123456, 2024)'

Each line is ``{"hash": h, "prev": p, "record": {...}}`` where ``h = sha256(canonical({"prev": p,
"record": r}))``, ``p`` is the previous line's ``hash`` (64 zeros on the first line) and
``canonical`` is JSON with sorted keys, separators ``(",", ":")``, ``ensure_ascii=False``, UTF-8.
Editing a record breaks its own hash; removing, inserting or reordering lines breaks the next
``prev``. Two things the lines alone cannot show: lines removed from the *end* (what is left is
a shorter chain, intact) and a log rewritten with every later hash recomputed. Both need the
log's ``Head`` (its record count and last hash, ``TraceLog.head()``, ``course trace head FILE``)
kept somewhere else (a second store, a signed daily digest): ``verify(path, head)`` and
``course trace verify FILE --head COUNT:HASH`` then check that the chain still reaches it.

Redaction (``redact``) replaces, in this order: emails -> ``[EMAIL]``; payment card numbers
(13-19 digits, optionally grouped by single spaces or dashes, **Luhn-valid only**;
inside a longer run of digit groups, any group-aligned 13-19 digit span that passes Luhn) -> ``[CARD]``;
phone numbers (9-15 digits, either starting with ``+`` or written with separators or an
area code in parentheses, e.g. ``(555) 123-4567``, ``020 7946 0958``, ``06 12 34 56 78``) ->
``[PHONE]``. A bare run of digits without ``+`` is never taken for a phone (it is an order id,
an amount, a year), and a number glued to letters (``a1234567890b``, a hex digest) is left alone.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

GENESIS = "0" * 64  # the "prev" of the first line
FINAL_STATES = ("answered", "abstained", "refused", "error")
_HEX64 = re.compile(r"[0-9a-f]{64}")

# --- redaction -------------------------------------------------------------------------------

# The lookbehind starts a match only where a local part can begin: without it a long run of
# letters with no "@" is rescanned from every position (quadratic time on hostile input).
EMAIL_RE = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
# optional +country, optional (area), then digit groups with optional single separators
# a maximal run of digit groups joined by single spaces or dashes: where cards are looked for
CARD_RUN_RE = re.compile(r"(?<![\w+])\d+(?:[ -]\d+)*(?![\w])")
PHONE_RE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,5}(?:[ .-]?\d{1,5}){0,5}(?![\w])")

Redactor = Callable[[str], str]


# The digit sum of 2 x d for d = 0..9: what a doubled Luhn digit contributes.
_DOUBLED_DIGIT_SUM = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number passes: ``luhn_valid("4111111111111111") -> True``.

    From the right, every second digit counts doubled (by its digit sum); the total is a multiple of 10."""
    kept, doubled = digits[::-2], digits[-2::-2]
    return (sum(map(int, kept)) + sum(_DOUBLED_DIGIT_SUM[int(d)] for d in doubled)) % 10 == 0


def _is_card(number: str) -> bool:
    digits = re.sub(r"\D", "", number)
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def _is_phone(number: str) -> bool:
    digits = re.sub(r"\D", "", number)
    written_as_phone = number.startswith("+") or "(" in number or re.search(r"\d[ .-]\d", number) is not None
    return 9 <= len(digits) <= 15 and written_as_phone


def checked(pattern: re.Pattern[str], check: Callable[[str], bool], placeholder: str) -> Redactor:
    """A redactor replacing each match of ``pattern`` that passes ``check`` with ``placeholder``."""
    def redactor(text: str) -> str:
        return pattern.sub(lambda m: placeholder if check(m.group()) else m.group(), text)
    return redactor


def _redact_cards(text: str) -> str:
    """``[CARD]`` for each Luhn-valid card inside a run of digit groups. A run may hold more than a
    card ("call 8726 6236 7900 9046 0154"): its group-aligned spans of 13-19 digits are tried,
    leftmost then longest first."""
    def in_run(match: re.Match[str]) -> str:
        pieces = re.split(r"([ -])", match.group())  # group, separator, group, ...
        groups, seps = pieces[0::2], pieces[1::2] + [""]
        out, start = [], 0
        while start < len(groups):
            end = next((e for e in range(len(groups), start, -1) if _is_card("".join(groups[start:e]))), None)
            out.append("[CARD]" if end else groups[start])
            start = end or start + 1
            out.append(seps[start - 1])  # the separator after the last group consumed
        return "".join(out)
    return CARD_RUN_RE.sub(in_run, text)


# applied in order: cards before phones, so a card's digit groups are not half-taken for a phone
DEFAULT_PATTERNS: Mapping[str, re.Pattern[str] | Redactor] = {
    "EMAIL": EMAIL_RE,
    "CARD": _redact_cards,
    "PHONE": checked(PHONE_RE, _is_phone, "[PHONE]"),
}


def redact(text: str, patterns: Mapping[str, re.Pattern[str] | Redactor] = DEFAULT_PATTERNS) -> str:
    """Replace personal data in ``text``: each compiled regex's matches become ``[NAME]``; a callable
    redactor (``str -> str``) is applied as is (use it when a match needs a check, like Luhn)."""
    for name, pattern in patterns.items():
        if isinstance(pattern, re.Pattern):
            text = pattern.sub(f"[{name}]", text)
        elif callable(pattern):
            text = pattern(text)
        else:
            raise TypeError(f"pattern {name!r} must be a compiled regex or a callable str -> str, "
                            f"got {type(pattern).__name__}")
    return text


def _redact_value(value: Any, patterns: Mapping[str, re.Pattern[str] | Redactor]) -> Any:
    if isinstance(value, str):
        return redact(value, patterns)
    if isinstance(value, dict):  # keys are redacted too: a dict keyed by email would leak it
        return {redact(k, patterns): _redact_value(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v, patterns) for v in value]
    return value


def redact_record(record: TraceRecord, patterns: Mapping[str, re.Pattern[str] | Redactor] = DEFAULT_PATTERNS
                  ) -> TraceRecord:
    """The same record with ``redact`` applied to every string in it, recursively in dicts and lists."""
    return TraceRecord.from_dict(_redact_value(record.to_dict(), patterns))


# --- the record ------------------------------------------------------------------------------

def _check_json(value: Any, where: str) -> None:
    """Plain JSON only: str, int, finite float, bool, None, lists, dicts with str keys."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}; JSON has no NaN or infinity, store None or a string")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has key {key!r} of type {type(key).__name__}; JSON keys must be str")
            _check_json(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"{where} is a {type(value).__name__}; only plain JSON types (str, int, float, bool, None, "
                    f"list, dict) can be logged, convert it first")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class TraceRecord:
    request_id: str
    timestamp: str  # ISO 8601 in UTC, e.g. "2024-05-01T12:00:00Z" or "...+00:00"
    app_version: str
    model: str  # the model's name
    weights_sha256: str  # sha256 hex of the weights file that answered
    template: str  # chat template name or hash
    decoding: dict  # sampling params, e.g. {"temperature": 0, "max_new_tokens": 32}
    retrieval: dict  # {"index_version": int (BM25Index.version), "passage_ids": [str, ...]}
    tools_version: str
    policy_version: str
    validation: dict  # check name -> passed
    tokens: dict  # {"prompt": int, "completion": int}
    latency_ms: dict  # stage -> milliseconds
    cost_usd: float
    final_state: str  # one of FINAL_STATES
    metadata: dict = field(default_factory=dict)  # free-form, plain JSON

    def __post_init__(self) -> None:
        for name in ("request_id", "timestamp", "app_version", "model", "weights_sha256", "template",
                     "tools_version", "policy_version", "final_state"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"TraceRecord.{name} must be a str, got {type(value).__name__} {value!r}")
        for name in ("decoding", "retrieval", "validation", "tokens", "latency_ms", "metadata"):
            value = getattr(self, name)
            if not isinstance(value, dict):
                raise TypeError(f"TraceRecord.{name} must be a dict, got {type(value).__name__}")
            _check_json(value, f"TraceRecord.{name}")
            # a private deep copy, so the caller mutating its dict cannot change a frozen record
            object.__setattr__(self, name, json.loads(json.dumps(value)))
        try:
            moment = datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"TraceRecord.timestamp {self.timestamp!r} is not ISO 8601; "
                             f"use datetime.now(timezone.utc).isoformat()") from None
        if moment.utcoffset() != timedelta(0):
            raise ValueError(f"TraceRecord.timestamp {self.timestamp!r} must be in UTC (end with Z or +00:00)")
        if self.final_state not in FINAL_STATES:
            raise ValueError(f"TraceRecord.final_state {self.final_state!r} must be one of {FINAL_STATES}")
        if set(self.retrieval) != {"index_version", "passage_ids"}:
            raise ValueError(f"TraceRecord.retrieval needs exactly the keys index_version and passage_ids, "
                             f"got {sorted(self.retrieval)}")
        version, ids = self.retrieval["index_version"], self.retrieval["passage_ids"]
        if not (isinstance(version, int) and not isinstance(version, bool)) or version < 0:
            raise TypeError(f"TraceRecord.retrieval['index_version'] must be an int >= 0, got {version!r}")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise TypeError(f"TraceRecord.retrieval['passage_ids'] must be a list of str, got {ids!r}")
        for check, passed in self.validation.items():
            if not isinstance(passed, bool):
                raise TypeError(f"TraceRecord.validation[{check!r}] must be a bool, got {passed!r}")
        if set(self.tokens) != {"prompt", "completion"}:
            raise ValueError(f"TraceRecord.tokens needs exactly the keys prompt and completion, got {sorted(self.tokens)}")
        for key, count in self.tokens.items():
            if not (isinstance(count, int) and not isinstance(count, bool)) or count < 0:
                raise TypeError(f"TraceRecord.tokens[{key!r}] must be an int >= 0, got {count!r}")
        for stage, ms in self.latency_ms.items():
            if not _is_number(ms) or ms < 0:
                raise TypeError(f"TraceRecord.latency_ms[{stage!r}] must be a number >= 0, got {ms!r}")
        if not _is_number(self.cost_usd) or not math.isfinite(self.cost_usd) or self.cost_usd < 0:
            raise TypeError(f"TraceRecord.cost_usd must be a finite number >= 0, got {self.cost_usd!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceRecord:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown TraceRecord fields {sorted(unknown)}; expected {sorted(names)}")
        return cls(**data)

    @classmethod
    def from_request_trace(cls, trace, **fields_) -> TraceRecord:
        """A record whose tokens, latency_ms (stage -> ms) and validation come from a course
        ``RequestTrace`` (``course_lib.request_trace``); pass every other field by name."""
        validation = dict(fields_.pop("validation", {}))
        if trace.valid is not None:
            validation.setdefault("validate", trace.valid)
        latency = {s.stage: s.seconds * 1e3 for s in trace.stages}
        return cls(tokens={"prompt": trace.prompt_tokens, "completion": trace.completion_tokens},
                   latency_ms=latency, validation=validation, **fields_)


# --- the log ---------------------------------------------------------------------------------

def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def entry_hash(record: dict, prev: str) -> str:
    return hashlib.sha256(canonical({"prev": prev, "record": record})).hexdigest()


@dataclass(frozen=True)
class Head:
    """Where a log ends: how many records it holds and its last line's hash (``GENESIS`` when empty).

    Written as ``COUNT:HASH`` (``str(head)``, ``Head.parse``). A copy kept outside the log is what
    lets ``verify`` see lines removed from the end, which leave a shorter chain that is intact."""
    records: int
    hash: str

    def __post_init__(self) -> None:
        if not (isinstance(self.records, int) and not isinstance(self.records, bool)) or self.records < 0:
            raise ValueError(f"a head's record count must be an int >= 0, got {self.records!r}")
        if not isinstance(self.hash, str) or not _HEX64.fullmatch(self.hash):
            raise ValueError(f"a head's hash must be 64 lowercase hex digits, got {self.hash!r}")

    def __str__(self) -> str:
        return f"{self.records}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> Head:
        count, sep, digest = text.strip().partition(":")
        if not sep or not count.isdigit():
            raise ValueError(f"a head is COUNT:HASH (as `course trace head FILE` prints it), got {text!r}")
        return cls(int(count), digest)


class TraceLogError(ValueError):
    """The file cannot be appended to: not a trace log, or its last line is damaged."""


class TraceLog:
    """Append-only JSON Lines of redacted ``TraceRecord``s, each line chained to the one before."""

    def __init__(self, path: str | Path, patterns: Mapping[str, re.Pattern[str] | Redactor] = DEFAULT_PATTERNS):
        self.path = Path(path)
        self.patterns = patterns

    def _last_hash(self) -> str:
        if not self.path.exists():
            return GENESIS
        lines = [line for line in self.path.read_text(encoding="utf-8").split("\n") if line.strip()]
        if not lines:
            return GENESIS
        try:
            last = json.loads(lines[-1])
            prev = last["hash"]
        except (json.JSONDecodeError, TypeError, KeyError):
            raise TraceLogError(f"{self.path}: the last line is not a trace entry; run `course trace verify "
                                f"{self.path}` and repair or rotate the file before appending") from None
        if not isinstance(prev, str) or not _HEX64.fullmatch(prev):
            raise TraceLogError(f"{self.path}: the last line's hash {prev!r} is not 64 hex digits")
        return prev

    def head(self) -> Head:
        """The log's head now (its record count and last hash): store it away from the log, then
        ``verify(path, head)`` catches a log cut short after it."""
        text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        return Head(sum(1 for line in text.split("\n") if line.strip()), self._last_hash())

    def append(self, record: TraceRecord) -> str:
        """Redact ``record``, chain it to the last line, append it; return its hash."""
        if not isinstance(record, TraceRecord):
            raise TypeError(f"TraceLog.append takes a TraceRecord, got {type(record).__name__}")
        clean = redact_record(record, self.patterns).to_dict()
        prev = self._last_hash()
        digest = entry_hash(clean, prev)
        line = canonical({"hash": digest, "prev": prev, "record": clean}).decode("utf-8")
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        return digest

    def records(self) -> list[TraceRecord]:
        """Every record in the file, oldest first (call ``verify`` first if the file may be tampered)."""
        text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        return [TraceRecord.from_dict(json.loads(line)["record"]) for line in text.split("\n") if line.strip()]


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    records: int  # lines that verified (all of them when ok)
    bad_line: int | None  # 1-based number of the first bad line
    reason: str | None
    is_trace: bool = True  # False: missing, empty, or not a trace log at all


def _is_entry(entry: Any) -> bool:
    return (isinstance(entry, dict) and set(entry) == {"hash", "prev", "record"}
            and isinstance(entry["record"], dict)
            and all(isinstance(entry[k], str) and _HEX64.fullmatch(entry[k]) for k in ("hash", "prev")))


def verify(path: str | Path, head: Head | str | None = None) -> VerifyResult:
    """Check every line's hash and its link to the line before; report the first bad line.

    Without ``head`` an intact chain is all that is checked, so a log cut after any line passes
    (nothing follows the cut to break). With the head taken earlier (``TraceLog.head()``, or
    ``"COUNT:HASH"``) the log must also still hold that many records, its line COUNT carrying
    that hash: a cut tail, or a chain rewritten with fresh hashes, then fails. Lines appended
    after the head was taken are fine."""
    path = Path(path)
    if isinstance(head, str):
        head = Head.parse(head)
    if not path.is_file():
        return VerifyResult(False, 0, None, f"{path}: no such file", is_trace=False)
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if not lines:
        return VerifyResult(False, 0, None, f"{path}: empty file, no records", is_trace=False)
    prev = GENESIS
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == 1 and not line.startswith('{"hash":"'):  # canonical entries start so
                return VerifyResult(False, 0, 1, "first line is not JSON: not a trace log", is_trace=False)
            why = "truncated last line (not valid JSON)" if number == len(lines) else "line is not valid JSON"
            return VerifyResult(False, number - 1, number, why)
        if not _is_entry(entry):
            if number == 1:
                return VerifyResult(False, 0, 1, 'first line is not a trace entry {"hash","prev","record"}: '
                                    "not a trace log", is_trace=False)
            return VerifyResult(False, number - 1, number, 'not a trace entry {"hash","prev","record"}')
        if entry_hash(entry["record"], entry["prev"]) != entry["hash"]:
            return VerifyResult(False, number - 1, number, "record edited (hash mismatch)")
        if entry["prev"] != prev:
            return VerifyResult(False, number - 1, number,
                                "prev mismatch: a line was removed, inserted or reordered before this one")
        prev = entry["hash"]
        if head is not None and number == head.records and prev != head.hash:
            return VerifyResult(False, number - 1, number, f"not the head's hash: the chain was rewritten up to "
                                f"this line (the head {head} was taken earlier)")
    if head is not None and len(lines) < head.records:
        missing = head.records - len(lines)
        return VerifyResult(False, len(lines), len(lines) + 1,
                            f"truncated: the log ends after {len(lines)} records but the head says {head.records} "
                            f"({missing} line{'s' if missing > 1 else ''} missing at the end)")
    return VerifyResult(True, len(lines), None, None)


def _head_argument(text: str) -> Head:
    try:
        return Head.parse(text)
    except ValueError as exc:  # argparse then says this, not "invalid parse value"
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course trace", description="check a request-trace log")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("verify", help="verify the hash chain: exit 0 ok, 1 tampered, 2 not a trace log")
    check.add_argument("file", type=Path)
    check.add_argument("--head", type=_head_argument, metavar="COUNT:HASH",
                       help="the head taken earlier (`course trace head FILE`): also catches a truncated tail")
    show = sub.add_parser("head", help="print the log's head COUNT:HASH, to keep somewhere else for verify --head")
    show.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.action == "head":
        if not args.file.is_file():
            print(f"error: {args.file}: no such file", file=sys.stderr)
            return 2
        try:
            print(TraceLog(args.file).head())
        except TraceLogError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    result = verify(args.file, args.head)
    if result.ok and args.head is None:
        print(f"ok: {result.records} records, chain intact. Not checked without --head: lines cut from the end, "
              f"or the chain rewritten with every hash recomputed (either leaves an intact chain); keep the head "
              f"(`course trace head FILE`) elsewhere and pass --head COUNT:HASH")
        return 0
    if result.ok:
        print(f"ok: {result.records} records, chain intact and reaching the head {args.head.records}:"
              f"{args.head.hash[:12]}...")
        return 0
    if not result.is_trace:
        print(f"error: {result.reason}", file=sys.stderr)
        return 2
    print(f"tampered: line {result.bad_line}: {result.reason} ({result.records} records verified before it)")
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
