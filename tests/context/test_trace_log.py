"""The trace log: hash chain round trip and tamper detection, redaction on seeded random personal data,
exit codes through ``main`` and through the ``course`` CLI."""
from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.context.trace_log import (CARD_RUN_RE, EMAIL_RE, GENESIS, Head, TraceLog, TraceLogError, TraceRecord,
                                          entry_hash, luhn_valid, main, redact, redact_record, verify)
from course_lib.request_trace import RequestTrace, StageTiming

REPO = Path(__file__).resolve().parents[2]


def _record(i: int = 0, **overrides) -> TraceRecord:
    fields = dict(request_id=f"req-{i}", timestamp="2024-05-01T12:00:00Z", app_version="1.2.0", model="tinychat",
                  weights_sha256=hashlib.sha256(b"weights").hexdigest(), template="chatml-v1",
                  decoding={"temperature": 0.0, "max_new_tokens": 32},
                  retrieval={"index_version": 7, "passage_ids": ["doc-1", "doc-2"]}, tools_version="tools-3",
                  policy_version="policy-2", validation={"json": True, "grounded": False},
                  tokens={"prompt": 120, "completion": 18}, latency_ms={"prefill": 3.5, "decode": 40.0},
                  cost_usd=0.0004, final_state="answered", metadata={"note": f"request {i}"})
    fields.update(overrides)
    return TraceRecord(**fields)


def _write_log(path: Path, n: int) -> list[str]:
    log = TraceLog(path)
    return [log.append(_record(i)) for i in range(n)]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _rewrite(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


# --- the chain -------------------------------------------------------------------------------

def test_round_trip_and_chain_by_hand(tmp_path):
    path = tmp_path / "t.jsonl"
    hashes = _write_log(path, 3)
    assert TraceLog(path).records() == [_record(i) for i in range(3)]
    prev = GENESIS
    for line, expected in zip(_lines(path), hashes):
        entry = json.loads(line)
        body = json.dumps({"record": entry["record"], "prev": prev}, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")
        assert entry["prev"] == prev and entry["hash"] == expected == hashlib.sha256(body).hexdigest()
        prev = expected
    assert verify(path).ok and verify(path).records == 3


def test_chain_continues_across_reopening(tmp_path):
    path = tmp_path / "t.jsonl"
    first = _write_log(path, 2)
    third = TraceLog(path).append(_record(2))  # a fresh TraceLog reads the last hash from the file
    assert json.loads(_lines(path)[2])["prev"] == first[1]
    assert verify(path) == verify(path).__class__(True, 3, None, None)
    assert third != first[1]


def test_edited_field_is_caught_on_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 4)
    lines = _lines(path)
    entry = json.loads(lines[2])
    entry["record"]["final_state"] = "refused"
    lines[2] = json.dumps(entry)
    _rewrite(path, lines)
    result = verify(path)
    assert (result.ok, result.bad_line, result.records) == (False, 3, 2)
    assert "hash mismatch" in result.reason


def test_reordered_pair_is_caught(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 4)
    lines = _lines(path)
    lines[1], lines[2] = lines[2], lines[1]
    _rewrite(path, lines)
    result = verify(path)
    assert (result.ok, result.bad_line) == (False, 2) and "prev mismatch" in result.reason


def test_deleted_middle_line_is_caught(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 4)
    lines = _lines(path)
    del lines[1]
    _rewrite(path, lines)
    result = verify(path)
    assert (result.ok, result.bad_line) == (False, 2) and "prev mismatch" in result.reason


def test_truncated_last_line_is_caught_and_blocks_append(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 3)
    text = path.read_text(encoding="utf-8")
    path.write_text(text[:-40], encoding="utf-8")  # a crash mid-write
    result = verify(path)
    assert (result.ok, result.bad_line, result.records) == (False, 3, 2) and "truncated" in result.reason
    with pytest.raises(TraceLogError, match="course trace verify"):
        TraceLog(path).append(_record(9))


def test_rehashed_edit_still_breaks_the_next_link(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 3)
    lines = _lines(path)
    entry = json.loads(lines[0])
    entry["record"]["cost_usd"] = 0.0
    body = json.dumps({"record": entry["record"], "prev": entry["prev"]}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")
    entry["hash"] = hashlib.sha256(body).hexdigest()  # the forger fixes this line's hash, not the chain after it
    lines[0] = json.dumps(entry)
    _rewrite(path, lines)
    assert verify(path).bad_line == 2


# --- the head: what catches a cut tail -------------------------------------------------------

def test_truncated_tail_passes_without_the_head_and_fails_with_it(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 4)
    head = TraceLog(path).head()
    assert head == Head(4, json.loads(_lines(path)[-1])["hash"])
    for kept in (3, 1):  # the last line removed, then all but the first
        _rewrite(path, _lines(path)[:kept])
        assert verify(path).ok  # nothing follows the cut: the chain alone cannot show it
        result = verify(path, head)
        assert (result.ok, result.is_trace, result.records, result.bad_line) == (False, True, kept, kept + 1)
        assert f"ends after {kept} records but the head says 4" in result.reason


def test_the_head_allows_later_appends_and_catches_a_rewritten_chain(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_log(path, 3)
    head = TraceLog(path).head()
    TraceLog(path).append(_record(3))  # the log grew after the head was taken: still fine
    assert verify(path, head).ok and verify(path, str(head)).records == 4
    lines, prev = _lines(path), GENESIS
    for i, line in enumerate(lines):  # a forger edits line 2 and recomputes every hash after it
        entry = json.loads(line)
        if i == 1:
            entry["record"]["final_state"] = "refused"
        entry["prev"], entry["hash"] = prev, entry_hash(entry["record"], prev)
        prev = entry["hash"]
        lines[i] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    _rewrite(path, lines)
    assert verify(path).ok
    result = verify(path, head)
    assert (result.ok, result.bad_line) == (False, 3) and "not the head's hash" in result.reason


def test_head_format_and_validation(tmp_path):
    assert TraceLog(tmp_path / "none.jsonl").head() == Head(0, GENESIS)
    head = Head(2, "ab" * 32)
    assert Head.parse(str(head)) == head and str(head) == "2:" + "ab" * 32
    for bad in ("2", "x:" + "ab" * 32, "2:abc", "-1:" + "ab" * 32):
        with pytest.raises(ValueError, match="COUNT:HASH|64 lowercase hex|int >= 0"):
            Head.parse(bad)


def test_main_head_and_verify_with_head(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _write_log(path, 3)
    assert main(["head", str(path)]) == 0
    head = capsys.readouterr().out.strip()
    assert head == str(TraceLog(path).head())
    assert main(["verify", str(path)]) == 0
    assert "Not checked without --head: lines cut from the end" in capsys.readouterr().out  # says plainly what it could not see
    assert main(["verify", str(path), "--head", head]) == 0
    assert "reaching the head" in capsys.readouterr().out
    _rewrite(path, _lines(path)[:2])
    assert main(["verify", str(path)]) == 0
    assert main(["verify", str(path), "--head", head]) == 1
    assert "truncated: the log ends after 2 records but the head says 3" in capsys.readouterr().out
    assert main(["head", str(tmp_path / "nope.jsonl")]) == 2
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(path), "--head", "three"])
    assert exit_.value.code == 2 and "COUNT:HASH" in capsys.readouterr().err


# --- exit codes ------------------------------------------------------------------------------

def _cases(tmp_path) -> dict[str, tuple[Path, int]]:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    _write_log(good, 3)
    _write_log(bad, 3)
    lines = _lines(bad)
    del lines[1]
    _rewrite(bad, lines)
    empty, other = tmp_path / "empty.jsonl", tmp_path / "other.jsonl"
    empty.write_text("")
    other.write_text('{"role": "user", "content": "hi"}\n')
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes\n")
    return {"good": (good, 0), "bad": (bad, 1), "missing": (tmp_path / "nope.jsonl", 2), "empty": (empty, 2),
            "other": (other, 2), "notes": (notes, 2)}


def test_main_exit_codes(tmp_path, capsys):
    for name, (path, code) in _cases(tmp_path).items():
        assert main(["verify", str(path)]) == code, name
    out = capsys.readouterr()
    assert "ok: 3 records, chain intact" in out.out and "line 2" in out.out and "no such file" in out.err


def test_course_cli_exit_codes(tmp_path):
    cases = _cases(tmp_path)
    names = ("good", "bad", "other")  # started together: each pays the CLI's import time
    running = {name: subprocess.Popen([sys.executable, "-m", "course_lib.cli", "trace", "verify", str(cases[name][0])],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
               for name in names}
    outputs = {}
    for name, process in running.items():
        outputs[name] = process.communicate(timeout=60)
        assert process.returncode == cases[name][1], (name, outputs[name])
    assert outputs["good"][0].startswith("ok: 3 records, chain intact")
    assert "line 2" in outputs["bad"][0] and "not a trace log" in outputs["other"][1]


# --- redaction -------------------------------------------------------------------------------

def _luhn_card(rng: random.Random) -> str:
    body = [rng.choice("3456")] + [str(rng.randrange(10)) for _ in range(rng.choice([12, 14, 15, 17]))]
    check = next(d for d in "0123456789" if luhn_valid("".join(body) + d))
    digits = "".join(body) + check
    sep = rng.choice(["", " ", "-"])
    return sep.join(digits[i:i + 4] for i in range(0, len(digits), 4))


def _email(rng: random.Random) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    local = "".join(rng.choices(letters + "0123456789._+", k=rng.randint(1, 12)))
    local = rng.choice(letters) + local
    domain = ".".join("".join(rng.choices(letters, k=rng.randint(2, 8))) for _ in range(rng.randint(1, 3)))
    return f"{local}@{domain}.{rng.choice(['com', 'org', 'co.uk', 'io'])}"


def _phone(rng: random.Random) -> str:
    d = lambda n: "".join(str(rng.randrange(10)) for _ in range(n))  # noqa: E731
    return rng.choice([
        f"+{rng.randint(1, 99)} {d(3)} {d(3)} {d(4)}",       # international, grouped
        f"+{rng.randint(1, 99)}{d(10)}",                      # E.164
        f"({d(3)}) {d(3)}-{d(4)}",                            # US
        f"{d(3)}-{d(3)}-{d(4)}", f"{d(3)}.{d(3)}.{d(4)}",     # US, dashes or dots
        f"0{d(2)} {d(4)} {d(4)}",                             # UK
        f"0{d(1)} {d(2)} {d(2)} {d(2)} {d(2)}",               # FR
    ])


FILLER = ["please", "contact", "me", "at", "or", "about", "order", "thanks", "the", "invoice", "—", "été"]


def test_redaction_removes_generated_personal_data():
    rng = random.Random(0)
    for _ in range(300):
        secrets = {"[EMAIL]": _email(rng), "[CARD]": _luhn_card(rng), "[PHONE]": _phone(rng)}
        kinds = rng.sample(list(secrets), k=rng.randint(1, 3))
        words = rng.choices(FILLER, k=6)
        for kind in kinds:
            words.insert(rng.randint(0, len(words)), secrets[kind] + rng.choice(["", ",", ".", ")"]))
        text = " ".join(words)
        clean = redact(text)
        for kind in kinds:
            assert secrets[kind] not in clean, (text, clean)
            assert kind in clean, (text, clean)
        assert EMAIL_RE.search(clean) is None
        for m in CARD_RUN_RE.finditer(clean):
            groups = re.split(r"[ -]", m.group())
            spans = ["".join(groups[i:j]) for i in range(len(groups)) for j in range(i + 1, len(groups) + 1)]
            assert not any(13 <= len(span) <= 19 and luhn_valid(span) for span in spans), clean
        assert redact(clean) == clean


def test_redaction_leaves_ordinary_numbers():
    rng = random.Random(1)
    for _ in range(100):
        not_card = "".join(str(rng.randrange(10)) for _ in range(16))
        if luhn_valid(not_card):
            continue
        order = str(rng.randint(100000, 999999))
        year = str(rng.randint(1990, 2030))
        text = f"In {year} order {order} had reference {not_card}, total 12.50 EUR, sha a1234567890b."
        assert redact(text) == text


def test_redact_record_and_custom_patterns():
    record = _record(metadata={"user": "ann@example.com", "cards": ["4111-1111-1111-1111"],
                               "ann@example.com": {"phone": "+1 415 555 2671"}})
    clean = redact_record(record)
    assert clean.metadata == {"user": "[EMAIL]", "cards": ["[CARD]"], "[EMAIL]": {"phone": "[PHONE]"}}
    assert clean.weights_sha256 == record.weights_sha256 and clean.timestamp == record.timestamp
    custom = {"ID": re.compile(r"\bEMP-\d+\b"), "UPPER": str.upper}
    assert redact("emp EMP-42 here", custom) == "EMP [ID] HERE"
    with pytest.raises(TypeError, match="compiled regex or a callable"):
        redact("x", {"BAD": "not a pattern"})


def test_written_file_never_contains_raw_email(tmp_path):
    path = tmp_path / "t.jsonl"
    TraceLog(path).append(_record(metadata={"question": "write to bob.smith@corp.example.org, card 4111 1111 1111 1111"}))
    raw = path.read_bytes()
    assert b"bob.smith" not in raw and b"4111 1111" not in raw and b"[EMAIL]" in raw
    assert verify(path).ok


# --- the record ------------------------------------------------------------------------------

def test_record_validation_and_from_request_trace():
    with pytest.raises(TypeError, match="cost_usd"):
        _record(cost_usd="free")
    with pytest.raises(ValueError, match="UTC"):
        _record(timestamp="2024-05-01T12:00:00+02:00")
    with pytest.raises(ValueError, match="final_state"):
        _record(final_state="done")
    with pytest.raises(TypeError, match="plain JSON"):
        _record(metadata={"when": object()})
    with pytest.raises(TypeError, match="validation"):
        _record(validation={"json": "yes"})
    trace = RequestTrace(text="4", prompt_tokens=10, completion_tokens=2, finish_reason="stop", valid=True,
                         stages=[StageTiming("prefill", 0.002, ""), StageTiming("decode", 0.010, "")])
    base = {k: v for k, v in _record().to_dict().items() if k not in ("tokens", "latency_ms", "validation")}
    record = TraceRecord.from_request_trace(trace, **base)
    assert record.tokens == {"prompt": 10, "completion": 2} and record.validation == {"validate": True}
    assert record.latency_ms == pytest.approx({"prefill": 2.0, "decode": 10.0})
