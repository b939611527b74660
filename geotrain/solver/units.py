"""Scaling between the world's units and the model's, in one place.

Rates enter the MIP in thousands of samples/s and money in US dollars per hour, so that the
coefficients of a model stay within a few orders of magnitude of 1 (rates range from 10 to 10^5
samples/s, prices from 0.01 to 100 $/h); every conversion goes through these functions.
"""

from __future__ import annotations

RATE_PER_UNIT = 1000.0  # samples/s in one model rate unit
USD_PER_UNIT = 1.0  # $/h in one model money unit


def to_model_rate(samples_per_s: float) -> float:
    return samples_per_s / RATE_PER_UNIT


def to_model_usd(usd_per_hour: float) -> float:
    return usd_per_hour / USD_PER_UNIT


def from_model_usd(value: float) -> float:
    return value * USD_PER_UNIT
