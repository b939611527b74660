"""Region fills: start mixes for the local search (``geotrain.solver.local``) that span regions.

One node shape at a time (the same accelerators and rate), a region is filled with its offers of the
shape, cheapest per good sample first, as many nodes as the structural limits allow. The regions come
in order of their cheapest offer of the shape, and, after the MIP, greedily from each of the
``REGION_SEEDS`` cheapest regions of the ``GREEDY_SHAPES`` best shapes (the region the referee scores
best with those chosen is added next), so that the links between regions count, not only their
prices. Where the communication inside a region caps what it trains (local-sgd, ma), these reach the
many-region mixes that a candidate-by-candidate fill or single moves do not.
"""

from __future__ import annotations

from typing import Protocol

from geotrain.solver import semantics
from geotrain.solver.problem import Candidate, Problem

REGION_SEEDS = 4  # greedy region fills: one path from each of this many of the cheapest regions of a shape
GREEDY_SHAPES = 2  # greedy region fills: for this many shapes, those whose first fill scored best

Score = tuple[float, float, float]  # the local search's score: (violation, objective, tie-break), smaller is better


def node_shape(c: Candidate) -> tuple[int, float]:
    """A node's shape: its accelerators and its rate."""
    return c.accelerators, round(c.rate, 6)


class Scorer(Protocol):
    """What the fills need of the local search: its scores, limits and time."""

    problem: Problem
    listed: list[int]

    def score_of(self, counts: tuple[int, ...]) -> Score | None: ...

    def most(self, x: list[int], i: int, room: int) -> int: ...

    def per_good_sample(self, i: int) -> float: ...

    def spent(self) -> bool: ...


class RegionFills:
    """The region fills of one search (a region's fill from the base mix is computed once)."""

    def __init__(self, search: Scorer) -> None:
        self.search = search
        self._alone: dict[tuple[int, ...], tuple[tuple[int, ...], list[int]]] = {}

    def mixes(self, greedy: bool = False) -> list[tuple[int, ...]]:
        """Mixes that span regions, one node shape at a time (shape: the same accelerators and rate).
        A region is filled with its offers of the shape, cheapest first, as many nodes as the structural
        limits allow. Two ways to pick the regions: in order of their cheapest offer of the shape per good
        sample, until the mix keeps the goal and adding a region no longer improves it; and, where
        ``greedy``, for the ``GREEDY_SHAPES`` shapes whose first fill scored best, from each of the
        ``REGION_SEEDS`` cheapest regions, adding at each step the region the referee
        scores best with the others (the one that buys the most of the shortfall per dollar while the
        goal is missed; once it is kept, the best score), so that the links between the regions chosen
        count, not only their prices. Each path's best mix has the nodes of its last region trimmed
        while it still keeps the goal. Where the communication inside a region caps what it trains,
        these find the many-region mixes that a candidate-by-candidate fill or single moves do not
        reach."""
        cands = self.search.problem.candidates
        base = tuple(c.minimum for c in cands)
        shapes: dict[tuple[int, float], dict[str, list[int]]] = {}
        for i, c in enumerate(cands):
            shapes.setdefault(node_shape(c), {}).setdefault(c.region, []).append(i)
        ordered = []
        for shape in sorted({node_shape(cands[i]) for i in self.search.listed}):
            regions = shapes[shape]
            for members in regions.values():
                members.sort(key=lambda i: (self.search.per_good_sample(i), cands[i].key))
            order = [regions[r] for r in sorted(regions, key=lambda r: (self.search.per_good_sample(regions[r][0]), r))]
            path = self._fill_regions(base, order)
            if path is not None:
                ordered.append((path, order))
        ordered.sort(key=lambda p: p[0][0])
        paths = [path for path, _ in ordered]
        for _, order in ordered[:GREEDY_SHAPES if greedy else 0]:
            for k in range(min(REGION_SEEDS, len(order))):
                paths.append(self._grow_regions(base, order[k], order[:k] + order[k + 1:]))
        out: list[tuple[int, ...]] = []
        for path in paths:
            found = None if path is None else self._trimmed(*path)
            if found is not None and found not in out:
                out.append(found)
        return out

    def _fill(self, x: tuple[int, ...], members: list[int]) -> tuple[tuple[int, ...], list[int]]:
        """``x`` with a region's ``members`` filled in turn, as many nodes as the structural limits allow;
        the members that took nodes."""
        cap, y, added = self.search.problem.node_cap, list(x), []
        for i in members:
            take = self.search.most(y, i, min(self.search.problem.candidates[i].capacity - y[i], cap - sum(y)))
            if take:
                y[i] += take
                added.append(i)
        return tuple(y), added

    def _added(self, x: tuple[int, ...], base: tuple[int, ...], members: list[int]) -> tuple[tuple[int, ...], list[int]]:
        """As :meth:`_fill`: the region's fill from ``base`` (computed once) added to ``x`` where that
        keeps the structural limits (limits per zone and region do not see the other regions), else
        filled afresh."""
        key = tuple(members)
        if key not in self._alone:
            self._alone[key] = self._fill(base, members)
        alone, more = self._alone[key]
        y = tuple(a + b - c for a, b, c in zip(x, alone, base, strict=True))
        if more and sum(y) <= self.search.problem.node_cap and semantics.structurally_feasible(self.search.problem, y):
            return y, more
        return self._fill(x, members)

    def _fill_regions(self, base: tuple[int, ...],
                      regions: list[list[int]]) -> tuple[Score, tuple[int, ...], list[int]] | None:
        """The regions filled in the order given; the best mix on the way (its score, the mix, its last
        region's members that took nodes)."""
        cap = self.search.problem.node_cap
        x = base
        best: tuple[Score, tuple[int, ...], list[int]] | None = None
        worse = 0
        for members in regions:
            if sum(x) >= cap or self.search.spent():
                break
            y, added = self._fill(x, members)
            if not added:
                continue
            x = y
            scored = self.search.score_of(x)
            if scored is None:
                break
            if best is None or scored < best[0]:
                best, worse = (scored, x, added), 0
            elif best[0][0] == 0:
                worse += 1
                if worse >= 2:  # the goal is kept and more regions only make it worse
                    break
        return best

    def _grow_regions(self, base: tuple[int, ...], seed: list[int],
                      rest: list[list[int]]) -> tuple[Score, tuple[int, ...], list[int]] | None:
        """From ``seed``'s region filled, regions added one at a time, each the best by the referee
        with those already chosen; as :meth:`_fill_regions`, the best mix on the way."""
        x, added = self._fill(base, seed)
        current = self.search.score_of(x) if added else None
        if current is None:
            return None
        best = (current, x, added)
        rest = list(rest)
        while rest and sum(x) < self.search.problem.node_cap and not self.search.spent():
            options = []
            for k, members in enumerate(rest):
                y, more = self._added(x, base, members)
                if more and (s := self.search.score_of(y)) is not None:
                    options.append((s, k, y, more))
                if self.search.spent():
                    break
            keeping = [o for o in options if o[0][0] == 0]
            if current[0] > 0 and not keeping:  # the goal is missed: the most shortfall bought per dollar
                worth = lambda o: (current[0] - o[0][0]) / max(o[0][1] - current[1], 1e-9)  # noqa: E731
                gaining = [o for o in options if o[0][0] < current[0]]
                if not gaining:
                    break
                pick = max(gaining, key=lambda o: (worth(o), -o[1]))
            else:
                pick = min(keeping, default=None)
                if pick is None or pick[0] >= current:
                    break
            current, k, x, added = pick
            rest.pop(k)
            if current < best[0]:
                best = (current, x, added)
        return best

    def _trimmed(self, scored: Score, mix: tuple[int, ...], last: list[int]) -> tuple[int, ...]:
        """``mix`` with the nodes of its last region trimmed while it keeps the goal (bisection on each
        member's count)."""
        if scored[0] > 0:
            return mix
        y = list(mix)
        for i in reversed(last):
            low, high = 0, y[i] - self.search.problem.candidates[i].minimum  # taking off ``low`` nodes keeps the goal
            while low < high:
                mid = (low + high + 1) // 2
                z = list(y)
                z[i] -= mid
                s = self.search.score_of(tuple(z))
                if s is not None and s[0] == 0 and s <= scored:
                    low = mid
                else:
                    high = mid - 1
            y[i] -= low
            scored = self.search.score_of(tuple(y)) or scored
        return tuple(y)
