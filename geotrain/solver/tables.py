"""What the MIP needs from a problem that does not depend on the target, built once per problem:
node counts, per-region and per-pair round terms per node count, zones, capacities, step levels."""

from __future__ import annotations

import functools

from geotrain.solver.problem import Problem


class Tables:
    """What the model needs from a problem that does not depend on the target: built once."""

    def __init__(self, problem: Problem) -> None:
        self.p = problem
        self.o = problem.oracle
        self.N = problem.node_cap
        self.ks = range(1, self.N + 1)
        self.regions = problem.regions
        self.members: dict[str, list[int]] = {q: [] for q in self.regions}
        self.zones: dict[str, list[int]] = {}
        for i, c in enumerate(problem.candidates):
            self.members[c.region].append(i)
            self.zones.setdefault(c.zone, []).append(i)
        self.region_cap = {q: min(self.N, sum(problem.candidates[i].capacity for i in idx))
                           for q, idx in self.members.items()}
        self.overhead = {k: self.o.overhead_s(k) for k in self.ks}
        # regions with equal term tables share one constraint
        groups: dict[tuple, list[str]] = {}
        for q in self.regions:
            groups.setdefault(tuple(self.o.region_s(q, k) if k > 1 else 0.0 for k in self.ks), []).append(q)
        self.region_groups = sorted(((members, dict(zip(self.ks, table, strict=True)))
                                     for table, members in groups.items()), key=lambda item: item[0])
        self.steps = sorted({c.samples_per_step / c.rate for c in problem.candidates})
        self.sites = {}
        for q, idx in self.members.items():
            cloud, _, site = q.partition("/")
            if cloud == "onprem" and self.o.site_s(site, 1, 2) is not None:
                self.sites[q] = site

    @functools.lru_cache(maxsize=None)  # noqa: B019 - one Tables per problem
    def pair(self, a: str, b: str) -> dict[int, float]:
        table = getattr(self.o, "pair_table", None)
        values = table(a, b, self.ks) if table else [self.o.pair_s(a, b, k) for k in self.ks]
        return dict(zip(self.ks, values, strict=True))

    @functools.cached_property
    def nearest(self) -> dict[str, dict[int, float]]:
        """Per region: the smallest pair term to any other region, for each k (a valid lower bound on
        the pair terms of any mix that uses the region and another one)."""
        out = {}
        for q in self.regions:
            best = [float("inf")] * len(self.ks)
            for other in self.regions:
                if other != q:
                    best = [min(a, b) for a, b in zip(best, self.pair(*sorted((q, other))).values(), strict=True)]
            out[q] = dict(zip(self.ks, best, strict=True))
        return out

    @functools.cached_property
    def cheapest(self) -> dict[str, float]:
        """Per region: the lowest price per byte to any other region."""
        return {q: min(self.o.usd_per_byte(q, other) for other in self.regions if other != q) for q in self.regions}

    @functools.lru_cache(maxsize=None)  # noqa: B019
    def site(self, q: str, m: int) -> dict[int, float]:
        return {k: (self.o.site_s(self.sites[q], m, k) or 0.0) if k > m else 0.0 for k in self.ks}
