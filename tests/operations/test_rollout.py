"""Sticky canary arms by a salted hash, the stop rule worked by hand, and the rollback pointer."""
from __future__ import annotations

import hashlib
import math

import pytest

from course_lib.operations.rollout import BUCKETS, DECISIONS, Rollout, canary_arm, canary_decision

USERS = [f"user-{i}" for i in range(20_000)]


def _bucket(salt: str, user: str) -> int:
    """The first 16 hex digits of sha256("salt:user") as a number, mod 10,000."""
    return int(hashlib.sha256(f"{salt}:{user}".encode()).hexdigest()[:16], 16) % BUCKETS


def test_the_canary_share_is_close_to_the_percent_over_20000_users():
    for percent in (1.0, 5.0, 25.0):
        share = sum(canary_arm(user, "release-7", percent) == "canary" for user in USERS) / len(USERS)
        assert abs(share * 100 - percent) < 1.0, (percent, share)
    assert {canary_arm(user, "s", 0.0) for user in USERS[:2000]} == {"stable"}
    assert {canary_arm(user, "s", 100.0) for user in USERS[:2000]} == {"canary"}


def test_arms_are_sticky_and_a_new_salt_reshuffles_them():
    first = [canary_arm(user, "release-7", 10.0) for user in USERS[:5000]]
    assert first == [canary_arm(user, "release-7", 10.0) for user in USERS[:5000]]
    other = [canary_arm(user, "release-8", 10.0) for user in USERS[:5000]]
    canaries, new_canaries = {u for u, a in zip(USERS, first) if a == "canary"}, \
        {u for u, a in zip(USERS, other) if a == "canary"}
    assert canaries != new_canaries and len(canaries & new_canaries) < len(canaries) / 2


def test_a_larger_percent_only_adds_users_to_the_canary():
    at5 = {u for u in USERS[:5000] if canary_arm(u, "s", 5.0) == "canary"}
    at20 = {u for u in USERS[:5000] if canary_arm(u, "s", 20.0) == "canary"}
    assert at5 < at20


def test_the_bucket_boundary_matches_an_independent_hash():
    for user in USERS[:3000]:
        expected = "canary" if _bucket("edge", user) < 1234 else "stable"
        assert canary_arm(user, "edge", 12.34) == expected
    user = next(u for u in (f"probe-{i}" for i in range(200_000)) if _bucket("edge", u) == 500)
    assert canary_arm(user, "edge", 5.0) == "stable"      # bucket 500 is not below 500
    assert canary_arm(user, "edge", 5.01) == "canary"     # ... and is below 501
    below = next(u for u in (f"probe-{i}" for i in range(200_000)) if _bucket("edge", u) == 499)
    assert canary_arm(below, "edge", 5.0) == "canary"


def test_canary_percent_out_of_range_raises():
    for percent in (-0.01, 100.01, math.nan):
        with pytest.raises(ValueError, match="canary_percent must be in"):
            canary_arm("ann", "s", percent)


# --- the stop rule ----------------------------------------------------------------------------

def test_canary_decision_by_hand():
    # stable 10/1000 = 1%, canary 60/1000 = 6%: half = 1.96 sqrt(.01*.99/1000 + .06*.94/1000) = 0.01596
    # delta 0.05 - 0.016 > 0: the canary is worse beyond doubt
    assert canary_decision((10, 1000), (60, 1000), tolerance=0.01, min_per_arm=100) == "rollback"
    # canary 10/1000 too: delta 0, half = 1.96 sqrt(2 * .0099 / 1000) = 0.00872 <= 0.01: promote
    assert canary_decision((10, 1000), (10, 1000), tolerance=0.01, min_per_arm=100) == "promote"
    # ... but not within a 0.005 tolerance: wait for more traffic
    assert canary_decision((10, 1000), (10, 1000), tolerance=0.005, min_per_arm=100) == "wait"
    # fewer than min_per_arm on either arm: wait, whatever the rates
    assert canary_decision((10, 1000), (60, 99), tolerance=0.01, min_per_arm=100) == "wait"
    assert canary_decision((0, 0), (5, 5), tolerance=0.01, min_per_arm=0) == "wait"


def test_canary_decision_with_unequal_arms_by_hand():
    # stable 100/10000 = 1%, canary 6/200 = 3%: half = 1.96 sqrt(.01*.99/10000 + .03*.97/200) = 0.02374
    # delta 0.02: low = -0.0037 (not worse beyond doubt), high = 0.0437 > 0.02 -> wait
    assert canary_decision((100, 10_000), (6, 200), tolerance=0.02, min_per_arm=100) == "wait"
    # canary 12/200 = 6%: delta 0.05, half = 1.96 sqrt(.00000099 + .06*.94/200) = 0.03297 -> low 0.017 > 0
    assert canary_decision((100, 10_000), (12, 200), tolerance=0.02, min_per_arm=100) == "rollback"
    # canary 0/2000: delta -0.01, half = 1.96 sqrt(.00000099) = 0.00195 -> high -0.008 <= 0: promote
    assert canary_decision((100, 10_000), (0, 2000), tolerance=0.0, min_per_arm=100) == "promote"
    # a wider z turns the 12/200 rollback into a wait (half at z=3: 0.05047 > 0.05)
    assert canary_decision((100, 10_000), (12, 200), tolerance=0.02, min_per_arm=100, z=3.0) == "wait"


def test_canary_decision_raises_on_bad_counts():
    for arm in ((5, 3), (-1, 10), (1.0, 10), (True, 10), (1, "10")):
        with pytest.raises(ValueError, match="canary"):
            canary_decision((1, 10), arm, tolerance=0.01, min_per_arm=1)
    with pytest.raises(ValueError, match="stable has more errors than requests"):
        canary_decision((11, 10), (1, 10), tolerance=0.01, min_per_arm=1)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        canary_decision((1, 10), (1, 10), tolerance=-0.01, min_per_arm=1)
    assert set(DECISIONS) == {"rollback", "promote", "wait"}


# --- the pointer ------------------------------------------------------------------------------

def test_rollback_sends_every_new_request_to_stable_and_in_flight_ones_keep_their_arm():
    rollout = Rollout(stable="v1", canary="v2", canary_percent=30.0, salt="release-7")
    users = USERS[:500]
    in_flight = {user: rollout.deployment_for(user) for user in users}   # admitted before the rollback
    assert set(in_flight.values()) == {"v1", "v2"}
    snapshot = dict(in_flight)
    rollout.rollback()
    assert {rollout.deployment_for(user) for user in users} == {"v1"}
    assert {rollout.arm_for(user) for user in users} == {"stable"}
    assert in_flight == snapshot and rollout.canary == "v2" and rollout.canary_percent == 0.0


def test_promote_makes_the_canary_stable_for_everyone():
    v1, v2 = {"weights": "a"}, {"weights": "b"}
    rollout = Rollout(stable=v1, canary=v2, canary_percent=10.0, salt="s")
    before = [rollout.deployment_for(user) for user in USERS[:300]]
    rollout.promote()
    assert all(rollout.deployment_for(user) is v2 for user in USERS[:300])
    assert rollout.stable is v2 and v1 == {"weights": "a"} and any(d is v1 for d in before)
