"""Spot placement scores as AWS means them: one request per group of interchangeable instance types,
within the account's daily allowance of configurations, each answer kept with its age.

What AWS says (EC2 User Guide, "Spot placement score"; the botocore model of
``GetSpotPlacementScores``):

- a score (1-10) is how likely a Spot request of ``TargetCapacity`` instances, spread over the
  instance types given (capacity-optimized), is to succeed in a Region or, with
  ``SingleAvailabilityZone``, in one AZ, at the time of the request; 10 "highly likely";
- "We recommend that you specify at least three instance types. If you specify one or two instance
  types, or specify variations of a single instance type …, the returned placement score will always be
  low." So geotrain asks once per *group*: the accelerated types of one accelerator model (the
  V100 group is p3.2xlarge, p3.8xlarge, p3.16xlarge, p3dn.24xlarge), the types a gang of that GPU
  can be bought as; a group of fewer than three types says so in each row's ``source``;
- at most 10 Regions a request (the model's limit), so a group over more Regions is asked in chunks;
- an account may ask only a limited number of *new* configurations (types, capacity, Regions, AZ or
  not) in 24 hours and may repeat one it already asked. AWS publishes no number; its sample tracker
  (aws-samples "spot-placement-score-tracker") says about 10 and names the error
  ``MaxConfigLimitExceeded``. ``daily_configurations`` (default 10) is that allowance here.

The cache (:class:`ScoreCache`, a JSON file under GEOTRAIN_HOME) keeps every configuration asked with
when: one asked less than 24 hours ago is answered from it (the row says when it was asked); new ones
stop at the allowance, and what is left unscored is reported.

In the capacity model a score is read as ``availability = score / 10`` of the AZ's spot rows of every
type in the group (the chance that a request of that size goes through), and ``capacity_hint`` =
``TargetCapacity`` where the score is at least ``likely_score`` (AWS calls 7-10 likely).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from geotrain.files import atomic_write_text

WINDOW = timedelta(hours=24)  # AWS counts new configurations over 24 hours
REGIONS_PER_REQUEST = 10  # GetSpotPlacementScores: RegionNames, at most 10
RECOMMENDED_TYPES = 3  # fewer and AWS's score "will always be low"
QUOTA_CODE = "MaxConfigLimitExceeded"  # the allowance is used (aws-samples' tracker; not in the API reference)


@dataclass(frozen=True, slots=True)
class Configuration:
    """One GetSpotPlacementScores request: what AWS counts against the daily allowance."""

    instance_types: tuple[str, ...]  # sorted
    target_capacity: int  # instances
    regions: tuple[str, ...]  # sorted
    single_az: bool = True

    @property
    def key(self) -> str:
        return json.dumps([list(self.instance_types), self.target_capacity, list(self.regions), self.single_az])


@dataclass(frozen=True, slots=True)
class Answer:
    asked_at: datetime
    scores: tuple[tuple[str, str, int], ...]  # (Region, AZ id, score)


def groups(types_of_accelerator: Mapping[str, set[str]], regions_of_type: Mapping[str, set[str]],
           capacity: int) -> list[Configuration]:
    """One configuration per accelerator model (its types together) and chunk of 10 of their regions; the
    models offered in the most (type, region) pairs first, as the allowance may not reach them all."""
    out = []
    reach = {a: sum(len(regions_of_type[t]) for t in types) for a, types in types_of_accelerator.items()}
    for accelerator in sorted(types_of_accelerator, key=lambda a: (-reach[a], a)):
        types = tuple(sorted(types_of_accelerator[accelerator]))
        regions = sorted(set().union(*(regions_of_type[t] for t in types)))
        for i in range(0, len(regions), REGIONS_PER_REQUEST):
            out.append(Configuration(types, capacity, tuple(regions[i:i + REGIONS_PER_REQUEST])))
    return out


class ScoreCache:
    """Configurations asked, with their answers and when (a JSON file; none: kept in memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._entries: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            try:
                self._entries = dict(json.loads(path.read_text()))
            except (OSError, ValueError):
                self._entries = {}  # unreadable: asked again, within the allowance

    def fresh(self, config: Configuration, now: datetime) -> Answer | None:
        """The answer to ``config`` if it was asked less than 24 hours before ``now``."""
        entry = self._entries.get(config.key)
        if entry is None:
            return None
        asked = datetime.fromisoformat(entry["asked_at"])
        if now - asked >= WINDOW:
            return None
        return Answer(asked, tuple((r, z, int(s)) for r, z, s in entry["scores"]))

    def asked_since(self, now: datetime) -> int:
        """New configurations asked in the 24 hours before ``now``."""
        return sum(1 for e in self._entries.values() if now - datetime.fromisoformat(e["asked_at"]) < WINDOW)

    def put(self, config: Configuration, answer: Answer) -> None:
        self._entries[config.key] = {"asked_at": answer.asked_at.astimezone(timezone.utc).isoformat(),
                                     "scores": [list(s) for s in answer.scores]}

    def save(self, now: datetime) -> None:
        """Write the cache (entries older than 24 hours are dropped: they neither answer nor count)."""
        self._entries = {k: e for k, e in self._entries.items()
                         if now - datetime.fromisoformat(e["asked_at"]) < WINDOW}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self._entries, indent=1, sort_keys=True))
