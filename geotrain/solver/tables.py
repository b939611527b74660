"""What the MIP needs from a problem that does not depend on the target, built once per problem:
node counts, places and regions, per-place and per-pair round terms per node count, step levels."""

from __future__ import annotations

import functools
from itertools import combinations

import numpy as np

from geotrain.solver.problem import Problem, place_order


class Tables:
    """What the model needs from a problem that does not depend on the target: built once."""

    def __init__(self, problem: Problem, node_cap: int | None = None) -> None:
        """``node_cap``: tables for mixes of at most this many nodes (default: the problem's cap)."""
        self.p = problem
        self.o = problem.oracle
        self.N = min(problem.node_cap, node_cap) if node_cap is not None else problem.node_cap
        self.ks = range(1, self.N + 1)
        self._dicts: dict[int, tuple[list[float], dict[int, float]]] = {}
        self.places = problem.places
        self.members: dict[str, list[int]] = {p: [] for p in self.places}
        self.region_of: dict[str, str] = {}
        for i, c in enumerate(problem.candidates):
            self.members[c.zone].append(i)
            self.region_of[c.zone] = c.region
        self.region_places: dict[str, list[str]] = {}
        for p in self.places:
            self.region_places.setdefault(self.region_of[p], []).append(p)
        self.regions = sorted(self.region_places)
        # a region's lead place: where its leader (local-sgd) or parameter server (asgd-ga) is placed in
        # the model; zones of one region share their network figures, and prices between regions do
        # not depend on the zone
        self.lead_of = {r: places[0] for r, places in self.region_places.items()}
        self.leads = sorted(self.lead_of.values(), key=place_order)
        self.place_cap = {p: min(self.N, sum(problem.candidates[i].capacity for i in idx))
                          for p, idx in self.members.items()}
        # places whose count is fixed (every candidate there has minimum = capacity)
        self.fixed_count = {p: sum(problem.candidates[i].minimum for i in idx) for p, idx in self.members.items()
                            if all(problem.candidates[i].minimum == problem.candidates[i].capacity for i in idx)}
        self.region_cap = {r: min(self.N, sum(self.place_cap[p] for p in places))
                           for r, places in self.region_places.items()}
        # hivemind: the slowest host in use scales the overhead; the fastest candidate's is a lower bound
        host = min((c.host_factor for c in problem.candidates), default=1.0)
        self.overhead = {k: host * self.o.overhead_s(k) for k in self.ks}
        # places with equal term tables share one constraint
        groups: dict[tuple, list[str]] = {}
        for p in self.places:
            groups.setdefault(tuple(self.o.place_s(p, k) if k > 1 else 0.0 for k in self.ks), []).append(p)
        self.place_groups = sorted(((members, dict(zip(self.ks, table, strict=True)))
                                    for table, members in groups.items()), key=lambda item: item[0])
        self.steps = sorted({c.samples_per_step / c.rate for c in problem.candidates})
        self.sites = {}
        for r in self.regions:
            cloud, _, site = r.partition("/")
            if cloud == "onprem" and self.o.site_s(site, 1, 2) is not None:
                self.sites[r] = site

    @functools.lru_cache(maxsize=None)  # noqa: B019 - one Tables per problem
    def pair(self, a: str, b: str) -> dict[int, float]:
        table = getattr(self.o, "pair_table", None)
        if table is None:
            return dict(zip(self.ks, [self.o.pair_s(a, b, k) for k in self.ks], strict=True))
        values = table(a, b, self.ks)  # shared between pairs over links with the same figures
        found = self._dicts.get(id(values))
        if found is None or found[0] is not values:
            found = self._dicts[id(values)] = (values, dict(zip(self.ks, values, strict=True)))
        return found[1]

    @functools.lru_cache(maxsize=None)  # noqa: B019
    def ring_region(self, lead: str, m: int) -> float:
        """The all-reduce of m nodes inside the region of ``lead`` (0 for one node)."""
        return self.o.place_s(lead, m) if m > 1 else 0.0

    def _nearest(self, ends: list[str]) -> dict[str, dict[int, float]]:
        # many pairs share one table (zones of a region, regions with the same link figures): take the
        # minimum over the distinct tables only
        tables: dict[str, dict[int, list[float]]] = {q: {} for q in ends}
        for a, b in combinations(ends, 2):
            table = self._pair_values(a, b)
            tables[a][id(table)] = table
            tables[b][id(table)] = table
        out = {}
        for q in ends:
            rows = list(tables[q].values()) or [[float("inf")] * len(self.ks)]
            out[q] = dict(zip(self.ks, np.min(np.array(rows, dtype=np.float64), axis=0).tolist(), strict=True))
        return out

    def _pair_values(self, a: str, b: str) -> list[float]:
        """``pair`` as a list by k (the oracle's shared table where it has one: no dict is built)."""
        table = getattr(self.o, "pair_table", None)
        if table is None:
            return list(self.pair(a, b).values())
        return table(a, b, self.ks)

    @functools.cached_property
    def nearest(self) -> dict[str, dict[int, float]]:
        """Per place: the smallest pair term to any other place, for each k (a valid lower bound on
        the pair terms of any mix that uses the place and another one)."""
        return self._nearest(self.places)

    @functools.cached_property
    def nearest_lead(self) -> dict[str, dict[int, float]]:
        """The same between regions' lead places."""
        return self._nearest(self.leads)

    @functools.cached_property
    def cheapest(self) -> dict[str, float]:
        """Per place: the lowest price per byte to any other place."""
        return {q: min((self.o.usd_per_byte(q, other) for other in self.places if other != q), default=0.0)
                for q in self.places}

    @functools.cached_property
    def cheapest_lead(self) -> dict[str, float]:
        """Per lead place: the lowest price per byte to another region's lead."""
        return {q: min((self.o.usd_per_byte(q, other) for other in self.leads if other != q), default=0.0)
                for q in self.leads}

    def max_price_alpha(self, alpha: float) -> float:
        """α times the dearest price per byte between two places (model money units)."""
        return alpha * max((self.o.usd_per_byte(a, b) for a in self.places for b in self.places if a != b),
                           default=0.0)

    @functools.lru_cache(maxsize=None)  # noqa: B019
    def site(self, q: str, m: int) -> dict[int, float]:
        return {k: (self.o.site_s(self.sites[q], m, k) or 0.0) if k > m else 0.0 for k in self.ks}
