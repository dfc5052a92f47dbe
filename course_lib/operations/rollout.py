"""Shadow, canary and rollback: releasing a new deployment a slice of users at a time.

- **Sticky arms.** ``canary_arm`` puts a user in the canary by a salted hash of the user id, so
  the same user always gets the same arm (a user who flips between two models sees neither
  properly, and their complaints cannot be attributed), and a new salt reshuffles who is first.
- **A stop rule.** ``canary_decision`` compares error rates with unequal arms: roll back as soon
  as the canary is worse beyond doubt (the lower confidence bound of canary minus stable is above
  0), promote once it is no worse than a tolerance (the upper bound is within it), and wait until
  both arms have ``min_per_arm`` requests before deciding anything.
- **Atomic rollback.** ``Rollout`` holds the live deployments behind one pointer. A request takes
  its deployment when it is admitted and keeps it to the end, so ``rollback()`` is one assignment:
  new requests go to stable at once and in-flight ones finish on the arm they started on.

    >>> rollout = Rollout(stable="v1", canary="v2", canary_percent=50.0, salt="release-7")
    >>> arms = {user: rollout.arm_for(user) for user in ("ann", "bob", "cyd", "dee")}
    >>> arms == {user: rollout.arm_for(user) for user in arms}     # sticky
    True
    >>> rollout.rollback(); sorted({rollout.deployment_for(user) for user in arms})
    ['v1']
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["BUCKETS", "DECISIONS", "Rollout", "canary_arm", "canary_decision"]

BUCKETS = 10_000  # canary shares in steps of 0.01%
DECISIONS = ("rollback", "promote", "wait")


def canary_arm(user_id: str, salt: str, canary_percent: float) -> str:
    """ "canary" when the user's bucket (first 8 bytes of sha256(salt:user_id), mod 10,000) is below
    canary_percent x 100, else "stable"."""
    if not 0 <= canary_percent <= 100:
        raise ValueError(f"canary_percent must be in [0, 100], got {canary_percent!r}")
    digest = hashlib.sha256(f"{salt}:{user_id}".encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % BUCKETS
    return "canary" if bucket < canary_percent * BUCKETS / 100 else "stable"


def _arm_rates(name: str, arm: Any) -> tuple[int, int]:
    errors, requests = arm
    for value in arm:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be (errors, requests) with ints >= 0, got {arm!r}")
    if errors > requests:
        raise ValueError(f"{name} has more errors than requests: {arm!r}")
    return errors, requests


def canary_decision(stable: tuple[int, int], canary: tuple[int, int], tolerance: float, min_per_arm: int,
                    z: float = 1.96) -> str:
    """ "rollback", "promote" or "wait" from each arm's (errors, requests)."""
    (e_s, n_s), (e_c, n_c) = _arm_rates("stable", stable), _arm_rates("canary", canary)
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    if n_s < min_per_arm or n_c < min_per_arm or n_s == 0 or n_c == 0:
        return "wait"
    p_s, p_c = e_s / n_s, e_c / n_c
    half = z * math.sqrt(p_s * (1 - p_s) / n_s + p_c * (1 - p_c) / n_c)
    if p_c - p_s - half > 0:
        return "rollback"
    if p_c - p_s + half <= tolerance:
        return "promote"
    return "wait"


@dataclass
class Rollout:
    """Two deployments behind one pointer: ``canary_percent`` of users (sticky) on the canary."""

    stable: Any
    canary: Any
    canary_percent: float
    salt: str

    def arm_for(self, user_id: str) -> str:
        return canary_arm(user_id, self.salt, self.canary_percent)

    def deployment_for(self, user_id: str) -> Any:
        """What a new request from ``user_id`` runs on; the request keeps it until it ends."""
        return self.canary if self.arm_for(user_id) == "canary" else self.stable

    def rollback(self) -> None:
        """Every new request goes to stable from now on: one assignment, nothing to drain first."""
        self.canary_percent = 0.0

    def promote(self) -> None:
        """The canary becomes stable for everyone, again in one assignment."""
        self.stable, self.canary_percent = self.canary, 0.0
