"""Interruption signals: AWS Spot Advisor bands and availability traces, as rates per node-hour.

Standard library only; pure functions over plain values.

AWS Spot Advisor bands
----------------------
The Spot Instance Advisor publishes, per region and instance type (not per zone), a *frequency of
interruption* band: the share ``p`` of spot instances of that type that AWS reclaimed in the
trailing month. The feed's band indices 0..4 carry the labels ``<5%``, ``5-10%``, ``10-15%``,
``15-20%`` and ``>20%``. (The feed also has a ``max`` field of 5, 11, 16, 22, 100 per band; we follow
the labels, which are what AWS shows to users.)

Each band gets one *representative* monthly share ``p``:

- closed bands: the midpoint, i.e. 2.5 %, 7.5 %, 12.5 %, 17.5 % (``<5%`` is read as 0-5 %);
- ``>20%`` is open upwards. We take 25 %: the midpoint of 20-30 %, i.e. the open band is given the
  same 5-point half-width as the closed ones. It is a deliberately modest choice: the true share can
  be far higher (AWS does not say how high), so rates derived from this band are a lower estimate.

That share is turned into a rate with a constant hazard (memoryless interruptions): if a node
survives an hour with probability ``exp(-λ)``, it survives a month of ``H = 730`` hours
(8760 h / 12) with probability ``exp(-λH) = 1 - p``, so

    λ = -ln(1 - p) / 730   interruptions per node-hour.

E.g. ``<5%`` → λ ≈ 3.47e-5 /h (one interruption per ~3.3 years of node-time); ``>20%`` → λ ≈ 3.94e-4 /h
(one per ~105 days). The band says nothing about capacity or how long a relaunch waits.

Availability traces
-------------------
A trace is a time series of samples ``(time, available)``; each sample holds until the next one, so
the last sample only closes the observed window. From it :func:`stats_from_availability` computes

- ``observed_h``: last time − first time, in hours;
- ``available_h``: the time spent in samples marked available;
- ``availability`` = available_h / observed_h (time-weighted share, 0..1);
- ``preemptions``: the number of available → unavailable transitions;
- ``mean_time_between_preemptions_h`` = available_h / preemptions (``None`` without preemptions);
- ``interruptions_per_hour`` = preemptions / available_h (per hour of node time actually held).

Counting transitions as preemptions is right only for traces that *keep an instance running* and
record when it is lost (e.g. the Training-on-a-Dime logs: a VM is pinged until it is gone, then
relaunched). *Launch probes* (request, record success, release) observe only whether a request
succeeded: use :func:`stats_from_probes`, which reports availability and no preemption figure, and
:func:`capacity_from_probes` for how many of N requested instances were typically obtained.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

HOURS_PER_MONTH = 730.0  # 8760 h / 12: the Spot Advisor's "trailing month"


@dataclass(frozen=True, slots=True)
class SpotAdvisorBand:
    """One AWS Spot Advisor interruption-frequency band; shares are fractions (0.05 = 5 %)."""

    index: int
    label: str
    low: float
    high: float | None  # None: open upwards (">20%")
    representative: float  # the monthly share used to derive a rate


SPOT_ADVISOR_BANDS: tuple[SpotAdvisorBand, ...] = (
    SpotAdvisorBand(0, "<5%", 0.00, 0.05, 0.025),
    SpotAdvisorBand(1, "5-10%", 0.05, 0.10, 0.075),
    SpotAdvisorBand(2, "10-15%", 0.10, 0.15, 0.125),
    SpotAdvisorBand(3, "15-20%", 0.15, 0.20, 0.175),
    SpotAdvisorBand(4, ">20%", 0.20, None, 0.25),
)

_BY_LABEL = {band.label: band for band in SPOT_ADVISOR_BANDS}


def band_label(index: int) -> str:
    """The label of the Spot Advisor band with feed index ``index`` (0..4)."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(SPOT_ADVISOR_BANDS):
        raise ValueError(
            f"Spot Advisor band index {index!r} is not one of 0..{len(SPOT_ADVISOR_BANDS) - 1}"
        )
    return SPOT_ADVISOR_BANDS[index].label


def rate_from_monthly_share(share: float, hours_per_month: float = HOURS_PER_MONTH) -> float:
    """Constant-hazard rate (1/h) at which a share ``share`` of nodes is lost within a month."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"monthly interruption share {share!r} must be in [0, 1)")
    if hours_per_month <= 0:
        raise ValueError(f"hours per month {hours_per_month!r} must be positive")
    return -math.log1p(-share) / hours_per_month


def interruptions_per_hour_for_band(label: str) -> float:
    """Interruptions per node-hour for a Spot Advisor band label (``"<5%"`` … ``">20%"``).

    λ = −ln(1 − p) / 730 with p the band's representative monthly share (see the module docstring).
    """
    band = _BY_LABEL.get(label)
    if band is None:
        raise ValueError(
            f"{label!r} is not a Spot Advisor band; expected one of "
            f"{', '.join(b.label for b in SPOT_ADVISOR_BANDS)}"
        )
    return rate_from_monthly_share(band.representative)


@dataclass(frozen=True, slots=True)
class TraceStats:
    """What an availability trace of a running instance says (see the module docstring)."""

    availability: float  # time-weighted share of observed time available, 0..1
    preemptions: int  # available → unavailable transitions
    observed_h: float
    available_h: float
    mean_time_between_preemptions_h: float | None  # available_h / preemptions; None if none
    interruptions_per_hour: float  # preemptions / available_h (0 if never available)


@dataclass(frozen=True, slots=True)
class ProbeStats:
    """What launch probes say: availability only, since no instance is kept running."""

    availability: float  # time-weighted share of observed time in which a probe succeeded
    observed_h: float
    available_h: float
    probes: int
    successes: int


def _durations_h(times: Sequence[datetime], flags: Sequence[bool]) -> list[float]:
    """Hours each sample holds (until the next one); the last sample holds 0 h."""
    if len(times) != len(flags):
        raise ValueError(f"{len(times)} times but {len(flags)} availability values")
    if not times:
        raise ValueError("the trace is empty; give at least one (time, available) sample")
    aware = {t.tzinfo is not None and t.utcoffset() is not None for t in times}
    if len(aware) > 1:
        raise ValueError("the trace mixes time-zone-aware and naive datetimes")
    durations = []
    for i in range(len(times) - 1):
        step = (times[i + 1] - times[i]).total_seconds() / 3600.0
        if step < 0:
            raise ValueError(
                f"the trace is not sorted by time: sample {i + 1} ({times[i + 1].isoformat()}) "
                f"comes before sample {i} ({times[i].isoformat()})"
            )
        durations.append(step)
    durations.append(0.0)
    return durations


def stats_from_availability(times: Sequence[datetime], available: Sequence[bool]) -> TraceStats:
    """Availability and preemption rate of a trace that follows one running instance.

    ``times`` must be sorted (equal neighbours are allowed); each sample holds until the next one.
    Raises ValueError on empty, unsorted or mismatched input.
    """
    flags = [bool(a) for a in available]
    durations = _durations_h(times, flags)
    observed_h = sum(durations)
    available_h = sum(d for d, up in zip(durations, flags, strict=True) if up)
    preemptions = sum(1 for prev, cur in zip(flags, flags[1:]) if prev and not cur)
    if observed_h > 0:
        availability = available_h / observed_h
    else:  # a single instant: the share is what that instant shows
        availability = 1.0 if all(flags) else 0.0
    return TraceStats(
        availability=availability,
        preemptions=preemptions,
        observed_h=observed_h,
        available_h=available_h,
        mean_time_between_preemptions_h=(available_h / preemptions) if preemptions else None,
        interruptions_per_hour=(preemptions / available_h) if available_h > 0 else 0.0,
    )


def stats_from_probes(times: Sequence[datetime], succeeded: Sequence[bool]) -> ProbeStats:
    """Time-weighted share of time in which a launch probe succeeded; no preemption figure.

    Same sampling rule as :func:`stats_from_availability` (each probe result holds until the next
    probe). Raises ValueError on empty, unsorted or mismatched input.
    """
    flags = [bool(s) for s in succeeded]
    durations = _durations_h(times, flags)
    observed_h = sum(durations)
    available_h = sum(d for d, up in zip(durations, flags, strict=True) if up)
    if observed_h > 0:
        availability = available_h / observed_h
    else:
        availability = 1.0 if all(flags) else 0.0
    return ProbeStats(
        availability=availability,
        observed_h=observed_h,
        available_h=available_h,
        probes=len(flags),
        successes=sum(flags),
    )


def capacity_from_probes(created: Sequence[int]) -> int:
    """Typical number of instances obtained per probe: the lower median of the counts created.

    The lower median is always a count that was really observed. When every probe asked for the
    same N, the result is capped by N, so it is a lower bound of what the zone could give.
    """
    counts = list(created)
    if not counts:
        raise ValueError("no probes; give at least one count of instances created")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
        raise ValueError("instances created must be whole numbers ≥ 0")
    return int(statistics.median_low(counts))
