r"""Local search over mixes, scored by the referee: the search's primal heuristic.

The MIP (``geotrain.solver.model``) is a relaxation of the referee; its bound is what certifies a
plan, but the mix it proposes is only as good as the relaxation is tight. This search works on the
referee's own figures: from a start mix ``x`` (counts per candidate) it tries

* *add*: one node of a listed candidate ``j``;      ``x + e_j``
* *remove*: one node of a candidate in use;           ``x − e_i``
* *swap*: a node of ``i`` in use for one of ``j``;    ``x − e_i + e_j``
* the same three with a *chunk* of ``⌈n/8⌉`` nodes (``n = Σx``), so that 1,000-node mixes move too,
* *reshape*: a node of ``i`` for one of any other candidate of its place (another machine size where
  the zone's node limit binds),
* *relocate*: every node of ``i`` for as many of the same shape (accelerators and rate) in another
  region, the cheapest there (a whole group moved, where one node at a time cannot leave a region),
* *exchange*: one node of ``i`` for ``⌈s_i g_i/s_j g_j⌉`` of a slower ``j``, or ``⌊s_j g_j/s_i g_i⌋``
  of ``i`` for one of a faster ``j`` (rate kept: a fast dear node for several cheap ones),

and, once the mix keeps the goal, takes the first move that improves the score, until none does (a
local optimum) or the evaluation budget (or the time given) is spent. A mix that misses the goal is repaired first: the
cheapest neighbour that keeps it, else the neighbour that buys the most of the shortfall per unit of
the objective. From the best local optimum it then kicks (takes out one to three nodes,
puts in one to four of listed candidates, seeded) and climbs again, keeping what is better
(iterated local search), until ``KICKS`` kicks in a row find nothing better. The listed candidates are those in use and, for every place, the
``PER_PLACE`` best by price per good sample, ``(p_j + d_j)/(s_j·g_j)``, and the fastest; every
candidate with a minimum stays listed. Starts: the mixes the caller knows, :meth:`LocalSearch.fills`
(candidate by candidate) and :meth:`LocalSearch.region_fills` (region by region, one node shape at a
time: :mod:`geotrain.solver.regions`; the many-region mixes of local-sgd and ma, where a region's own
all-reduce caps what it trains).

A mix's score is lexicographic: ``(violation, objective)``. ``violation`` is the relative shortfall
from the target or the throughput floor plus the relative excess over the budget (0 for a mix that
keeps the goal); mixes the structural limits rule out (``semantics.structurally_feasible``) are never
visited. ``objective``: ``$/h`` (min_cost), ``−samples/s`` then ``$/h`` (max_throughput), or
``$/h / samples/s`` (the per-sample objectives). A mix with violation 0 keeps every limit by the
referee (``semantics.admissible``).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from geotrain.solver import semantics
from geotrain.solver.problem import Evaluation, Problem
from geotrain.solver.regions import RegionFills, Score, node_shape

PER_PLACE = 2  # candidates listed per place, by price per good sample (and the fastest of the place)
CHUNK_SHARE = 8  # chunk moves move ⌈n / CHUNK_SHARE⌉ nodes
DEFAULT_EVALUATIONS = 2000  # evaluations one search may spend
KICKS = 20  # iterated local search: kicks in a row without a better mix before it stops
KICK_SEED = 0


@dataclass(frozen=True, slots=True)
class Goal:
    """What the search optimises: ``min_cost`` (``target`` samples/s), ``max_throughput`` or
    ``min_cost_per_sample``; the problem's limits (budget, floor) always hold."""

    objective: str
    target_samples_per_s: float = 0.0



def score(problem: Problem, goal: Goal, evaluation: Evaluation) -> Score:
    """Smaller is better: (violation, objective, tie-break)."""
    limits = problem.limits
    rate, usd = evaluation.samples_per_s, evaluation.usd_per_hour
    floor = max(limits.min_samples_per_s or 0.0, goal.target_samples_per_s if goal.objective == "min_cost" else 0.0)
    violation = 0.0 if rate > 0 else 1.0
    if floor > 0 and rate < floor * (1 - 1e-9):
        violation += (floor - rate) / floor
    budget = limits.budget_usd_per_hour
    if budget is not None and usd > budget * (1 + 1e-9):
        violation += (usd - budget) / max(budget, 1e-9)
    if goal.objective == "min_cost":
        return violation, usd, -rate
    if goal.objective == "max_throughput":
        return violation, -rate, usd
    return violation, (usd / rate if rate > 0 else math.inf), usd


@dataclass
class LocalSearch:
    """Hill-climbs from start mixes; ``evaluate`` is the referee (cached by the caller)."""

    problem: Problem
    evaluate: Callable[[tuple[int, ...]], Evaluation]
    goal: Goal
    max_evaluations: int = DEFAULT_EVALUATIONS
    deadline: float | None = None  # ``time.perf_counter()`` past which it stops too (None: evaluations only)

    def __post_init__(self) -> None:
        cands = self.problem.candidates
        by_place: dict[str, list[int]] = {}
        for i, c in enumerate(cands):
            by_place.setdefault(c.zone, []).append(i)
        listed: set[int] = {i for i, c in enumerate(cands) if c.minimum}
        for members in by_place.values():
            members.sort(key=lambda i: (self._per_good_sample(i), cands[i].key))
            listed |= set(members[:PER_PLACE])
            listed.add(max(members, key=lambda i: (cands[i].rate * cands[i].goodput, -self._per_good_sample(i))))
        self.listed = sorted(listed, key=lambda i: (self._per_good_sample(i), cands[i].key))
        self.evaluations = 0
        self._shapes: dict[tuple[int, float], list[int]] | None = None
        self._places: dict[str, list[int]] | None = None

    def spent(self) -> bool:
        """The evaluation budget, or the time, is used up."""
        if self.evaluations >= self.max_evaluations:
            return True
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _per_good_sample(self, i: int) -> float:
        return self.problem.candidates[i].usd_per_good_sample_s

    def fills(self) -> list[tuple[int, ...]]:
        """Two starts per region, and two over all regions: the listed candidates, cheapest per good
        sample first (and fastest first, for where a per-zone limit binds before the goal is reached),
        each taking as many nodes as the structural limits allow until their rates at full speed reach
        the goal's rate (the target or floor, with a tenth to spare; hivemind keeps each node's step
        efficiency ``q`` of it) or
        their prices the budget."""
        cands, limits = self.problem.candidates, self.problem.limits
        floor = max(limits.min_samples_per_s or 0.0,
                    self.goal.target_samples_per_s if self.goal.objective == "min_cost" else 0.0)
        budget = limits.budget_usd_per_hour
        base = [c.minimum for c in cands]
        cap = self.problem.node_cap
        hivemind = self.problem.oracle.strategy == "hivemind"
        kept = [c.rate * c.goodput * (c.step_efficiency if hivemind else 1.0) for c in cands]
        by_region: dict[str, list[int]] = {}
        for i in self.listed:
            by_region.setdefault(cands[i].region, []).append(i)
        out = []
        fastest_first = lambda i: (-cands[i].rate * cands[i].goodput, self._per_good_sample(i))  # noqa: E731
        by_region["*"] = list(self.listed)  # and one over every region: a mix that spans them
        orders = [(region, members) for region, members in sorted(by_region.items())]
        orders += [(region, sorted(members, key=fastest_first)) for region, members in sorted(by_region.items())]
        for _, members in orders:
            x = list(base)
            rate = sum(k * n for k, n in zip(kept, x, strict=True))
            usd = sum((c.price_usd_per_hour + c.data_usd_per_hour) * n for c, n in zip(cands, x, strict=True))
            for i in members:
                c = cands[i]
                gain, price = kept[i], c.price_usd_per_hour + c.data_usd_per_hour
                room = min(c.capacity - x[i], cap - sum(x))
                if self.goal.objective == "max_throughput":
                    if budget is not None and price > 0:
                        room = min(room, int((budget - usd) / price))
                elif sum(x) > 0:
                    room = min(room, max(0, math.ceil((floor * 1.1 - rate) / gain)))
                take = self._most(x, i, room)
                x[i] += take
                rate += take * gain
                usd += take * price
            if sum(x) and tuple(x) not in out:
                out.append(tuple(x))
        return out

    def region_fills(self, greedy: bool = False) -> list[tuple[int, ...]]:
        """Mixes that span regions, one node shape at a time (:class:`geotrain.solver.regions.RegionFills`)."""
        return RegionFills(self).mixes(greedy)

    def most(self, x: list[int], i: int, room: int) -> int:
        return self._most(x, i, room)

    def per_good_sample(self, i: int) -> float:
        return self._per_good_sample(i)

    def _most(self, x: list[int], i: int, room: int) -> int:
        """The most nodes of ``i``, up to ``room``, that keep ``x`` within the structural limits
        (bisection: a limit that a count breaks, a larger count breaks too)."""
        def fits(n: int) -> bool:
            y = list(x)
            y[i] += n
            return semantics.structurally_feasible(self.problem, tuple(y)) or sum(y) <= 1

        if room <= 0:
            return 0
        if fits(room):
            return room
        low, high = 0, room  # fits(low), not fits(high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if fits(mid) else (low, mid)
        return low

    def score_of(self, counts: tuple[int, ...]) -> Score | None:
        """The mix's score, or None where the structural limits rule it out."""
        if not semantics.structurally_feasible(self.problem, counts):
            return None
        self.evaluations += 1
        return score(self.problem, self.goal, self.evaluate(counts))

    def run(self, starts: Iterable[tuple[int, ...]]) -> tuple[tuple[int, ...], Score] | None:
        """The best local optimum reached from ``starts`` (None if no start is structurally feasible).
        The starts climb best-scoring first; under a deadline, each within its share of the time left
        (the kicks after them keep a share too), so that one long climb cannot starve the other starts."""
        best: tuple[tuple[int, ...], Score] | None = None
        scored = [(s, x) for x in dict.fromkeys(starts) if (s := self.score_of(x)) is not None]
        unique = [x for _, x in sorted(scored)]  # the best start first: it climbs even if time runs short
        deadline = self.deadline
        try:
            for j, start in enumerate(unique):
                self.deadline = deadline  # the whole search's deadline, not the last start's share
                if self.spent():
                    break
                if deadline is not None:
                    self.deadline = time.perf_counter() + (deadline - time.perf_counter()) / (len(unique) - j + 1)
                found = self.climb(start)
                if found is not None and (best is None or found[1] < best[1]):
                    best = found
        finally:
            self.deadline = deadline
        return self.kicked(best)

    def kicked(self, best: tuple[tuple[int, ...], Score] | None) -> tuple[tuple[int, ...], Score] | None:
        """Iterated local search: from the best local optimum, take out up to three nodes and put in up
        to four of listed candidates (seeded, so a plan is reproducible), climb again, keep what is
        better; ``KICKS`` kicks in a row that find nothing better end it."""
        if best is None:
            return None
        rng = random.Random(KICK_SEED)
        cands = self.problem.candidates
        idle = 0
        while idle < KICKS and not self.spent():
            x = list(best[0])
            for _ in range(rng.randint(1, 3)):
                used = [i for i, n in enumerate(x) if n > cands[i].minimum]
                if used:
                    x[rng.choice(used)] -= 1
            for _ in range(rng.randint(1, 4)):
                j = rng.choice(self.listed)
                if x[j] < cands[j].capacity:
                    x[j] += 1
            found = self.climb(tuple(x)) if sum(x) else None
            if found is not None and found[1] < best[1]:
                best, idle = found, 0
            else:
                idle += 1
        return best

    def climb(self, start: tuple[int, ...]) -> tuple[tuple[int, ...], Score] | None:
        """Hill-climbing. While the mix misses the goal, every move is scored and the climb takes the
        best-scoring mix that keeps the goal, if any, else the move that buys the most of the
        shortfall per dollar (``Δviolation / Δobjective``; one that lowers both, first); once the
        goal is kept, the first move that improves the score."""
        current = self.score_of(start)
        if current is None:
            return None
        x = start
        while not self.spent():
            if current[0] > 0:
                step = self._repair(x, current)
                if step is None:
                    break
                x, current = step
                continue
            for y in self.moves(x):
                s = self.score_of(y)
                if s is not None and s < current:
                    x, current = y, s
                    break
                if self.spent():
                    break
            else:
                break  # no move improves: a local optimum
        return x, current

    def _repair(self, x: tuple[int, ...], current: Score) -> tuple[tuple[int, ...], Score] | None:
        scored: list[tuple[Score, tuple[int, ...]]] = []
        for y in self.moves(x):  # every move, unless the budget runs out first (a deadline holds)
            if (s := self.score_of(y)) is not None:
                scored.append((s, y))
            if self.spent():
                break
        keeping = [(s, y) for s, y in scored if s[0] == 0]
        if keeping:
            s, y = min(keeping)
            return y, s
        best, value = None, -math.inf
        for s, y in scored:
            gain, spend = current[0] - s[0], s[1] - current[1]
            if gain <= 0:
                continue
            worth = math.inf if spend <= 0 else gain / spend
            if worth > value or (worth == value and best is not None and s < best[1]):
                best, value = (y, s), worth
        return best

    def moves(self, x: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        cands = self.problem.candidates
        used = [i for i, n in enumerate(x) if n]
        n = sum(x)
        steps = sorted({1, max(1, math.ceil(n / CHUNK_SHARE))}, reverse=True)
        listed = sorted(set(self.listed) | set(used), key=lambda i: (self._per_good_sample(i), cands[i].key))
        for step in steps:
            for i in used:  # fewer nodes first: the cheapest way to keep the goal
                if x[i] - step >= cands[i].minimum:
                    yield _moved(x, i, -step)
            for i in used:
                if x[i] - step < cands[i].minimum:
                    continue
                for j in listed:
                    if j != i and x[j] + step <= cands[j].capacity:
                        yield _moved(_moved(x, i, -step), j, step)
            for j in listed:
                if x[j] + step <= cands[j].capacity:
                    yield _moved(x, j, step)
        yield from self._reshapes(x, used)
        yield from self._relocations(x, used)
        yield from self._exchanges(x, used, listed)

    def _reshapes(self, x: tuple[int, ...], used: list[int]) -> Iterator[tuple[int, ...]]:
        """A node of ``i`` for one of any other candidate of its place (a smaller or larger machine where
        the zone's node limit binds; the listed candidates hold only a few shapes per place)."""
        cands = self.problem.candidates
        if self._places is None:
            self._places = {}
            for j, c in enumerate(cands):
                self._places.setdefault(c.zone, []).append(j)
        for i in used:
            if x[i] - 1 < cands[i].minimum:
                continue
            for j in self._places[cands[i].zone]:
                if j != i and x[j] + 1 <= cands[j].capacity:
                    yield _moved(_moved(x, i, -1), j, 1)

    def _relocations(self, x: tuple[int, ...], used: list[int]) -> Iterator[tuple[int, ...]]:
        """A whole group moved: every node of ``i`` for as many of the same shape in another region
        (cheapest there first), where one node at a time cannot leave a region behind."""
        cands = self.problem.candidates
        for i in used:
            n = x[i] - cands[i].minimum
            if n <= 0:
                continue
            for j in self._same_shape(i):
                if cands[j].region != cands[i].region and x[j] + n <= cands[j].capacity:
                    yield _moved(_moved(x, i, -n), j, n)

    def _same_shape(self, i: int) -> list[int]:
        """The cheapest candidate of ``i``'s shape (accelerators and rate) in each region."""
        if self._shapes is None:
            cands = self.problem.candidates
            by: dict[tuple[int, float], dict[str, int]] = {}
            for j in sorted(range(len(cands)), key=lambda j: (self._per_good_sample(j), cands[j].key)):
                by.setdefault(node_shape(cands[j]), {}).setdefault(cands[j].region, j)
            self._shapes = {shape: list(per.values()) for shape, per in by.items()}
        return self._shapes[node_shape(self.problem.candidates[i])]

    def _exchanges(self, x: tuple[int, ...], used: list[int], listed: list[int]) -> Iterator[tuple[int, ...]]:
        """Rate-keeping exchanges: one node of ``i`` for ``⌈s_i g_i / s_j g_j⌉`` of a slower ``j``, and
        ``⌊s_j g_j / s_i g_i⌋`` nodes of ``i`` for one of a faster ``j`` (a swap of one for one cannot
        trade a fast dear node for several cheap ones)."""
        cands = self.problem.candidates
        good = [c.rate * c.goodput for c in cands]
        for i in used:
            if x[i] - 1 < cands[i].minimum:
                continue
            for j in listed:
                if j == i:
                    continue
                many = math.ceil(good[i] / good[j] - 1e-9)
                if many > 1 and x[j] + many <= cands[j].capacity:
                    yield _moved(_moved(x, i, -1), j, many)
                few = min(x[i] - cands[i].minimum, math.floor(good[j] / good[i] + 1e-9))
                if few > 1 and x[j] + 1 <= cands[j].capacity:
                    yield _moved(_moved(x, i, -few), j, 1)


def _moved(x: tuple[int, ...], i: int, by: int) -> tuple[int, ...]:
    y = list(x)
    y[i] += by
    return tuple(y)
