"""Capacity pools: spot candidates of one zone and GPU draw from one pool of the capacity model."""

from __future__ import annotations

from dataclasses import replace

from geotrain.planning.candidates import CandidateSet
from geotrain.pricing.capacity import CapacityModel
from geotrain.solver.problem import Limits


def with_pools(cands: CandidateSet, limits: Limits, model: CapacityModel,
               confidence: float) -> tuple[CandidateSet, Limits]:
    """Spot candidates of one zone and GPU draw from one pool: at most the units the capacity model
    gives at once with ``confidence`` (kept nodes raise the cap to what they already hold)."""
    pooled, caps = [], {}
    for c in cands.candidates:
        pool = model.pool_of(cands.offers[c.key])
        if pool is None:
            pooled.append(c)
            continue
        caps[pool] = max(caps.get(pool, 0), model.pool_cap_units(cands.offers[c.key], confidence))
        pooled.append(replace(c, pool=pool))
    held: dict[str, int] = {}
    for c in pooled:
        if c.pool:
            held[c.pool] = held.get(c.pool, 0) + c.minimum * c.accelerators
    alternates, extra = [], {}  # pools that only dominated candidates draw from (the MIP's caps unchanged)
    for c, offer in cands.alternates:
        pool = model.pool_of(offer)
        if pool is not None:
            if pool not in caps:
                extra[pool] = max(extra.get(pool, 0), model.pool_cap_units(offer, confidence))
            c = replace(c, pool=pool)
        alternates.append((c, offer))
    caps.update(extra)
    pool_caps = tuple(sorted((pool, max(units, held.get(pool, 0))) for pool, units in caps.items()))
    return (replace(cands, candidates=tuple(pooled), alternates=tuple(alternates)),
            replace(limits, pool_caps=pool_caps))
