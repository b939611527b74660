r"""The four objectives, on top of ``min $/h s.t. throughput ≥ t`` (``TargetModel``).

Let ``f(t)`` be the optimal $/h of the MIP at target ``t`` (``+∞`` if infeasible). ``f`` does not
decrease with ``t``: a higher target shrinks the feasible set and raises the egress term.

(a) ``min_cost(t)``: one MIP solve, ``f(t)``.

(b) ``max_throughput(B)``: ``max { X(x) : f(X(x)) ≤ B }`` by bisection on ``t``. Each solve at ``t``
    returns a mix whose throughput ``X(x) ≥ t`` becomes the new lower end; a ``t`` proven infeasible
    (or over budget) the upper end. The bracket is closed to ``tolerance`` (relative). A solve cut
    short without a mix proves nothing: the search stops there, and the upper end it had is the bound.

(c) ``min_cost_per_sample``: ``min_x $/h(x) / (3600·X(x))`` with the referee's figures. Branch and
    bound on intervals ``[a, b]`` of ``t``: every admissible mix with throughput in ``[a, b]`` costs
    at least ``f̲(a)`` (the certified lower bound of the solve at ``a``), so ``f̲(a)/(3600·b)`` bounds
    the interval from below; solving at the interval's geometric middle gives a mix (an upper bound)
    and splits it (a solve cut short without a mix leaves ``[mid, b]`` unsplit, its bound kept).
    Stops when no interval's bound is below the best ratio by more than ``tolerance``.
    The first interval runs from the floor (or a thousandth of the slowest node's rate, below which
    no mix is worth training on) to the upper bound on the rate: a mix can train slower than any of
    its nodes alone.

(d) ``min_cost_by_deadline(N, D)``: the same as (c) with the floor ``t ≥ N / (3600·D)``; the total
    is ``N`` times the cost per sample.

Every objective also runs the referee's own search (``geotrain.solver.local``, :meth:`Searcher.polish`):
a local search on the referee's figures from the best mixes known (the baselines), a fill of every
region and the region-by-region fills, before the MIP (a short one, ``PRE_MIP_EVALUATIONS`` mixes: its
best mix is the MIP's cutoff, so the MIP looks only below it) and after it where the MIP did not prove
its mix optimal (the time left, up to ``POLISH_EVALUATIONS`` mixes). min_cost gives its MIP
``MIP_SHARE`` of the time left, so that a mix the MIP cannot prove is still improved by the local
search. A solve cut short without a mix proves nothing: a search that ends without a mix and without
a proof returns ``TIME_LIMIT`` (the planner says "not found within N s", never "out of reach"). The MIP, a relaxation of the referee, gives the bound; the
plan reports the best mix either found, with ``gap = (best − bound) / best`` (min_cost, per-sample) or
``(bound − best) / bound`` (max_throughput), and ``optimal`` only when that gap is within twice the
tolerance and no solve ran out of time.

A ``progress`` callback (:data:`Progress`) hears of every MIP solve and every improvement: the search
running, the solves so far, the best mix and the bound proven so far (:class:`SearchProgress`).

Every objective honours the problem's limits (budget, throughput floor) through the MIP, and every
figure is the referee's (``TargetModel`` certifies each solve against it): a mix's samples/s and
$/h are what the plan reports.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from geotrain.solver import semantics
from geotrain.solver.local import Goal, LocalSearch, score
from geotrain.solver.model import DEFAULT_TOLERANCE, TargetModel
from geotrain.solver.problem import Evaluation, Problem
from geotrain.solver.result import SearchResult, Solution, SolveStatus

POLISH_STARTS = 3  # local search starts: the best known mixes and the best region fills, this many of each
PRE_MIP_EVALUATIONS = 600  # the local search before the MIP: its best mix is the MIP's cutoff
POLISH_EVALUATIONS = 200_000  # the local search's budget: this many mixes, or its share of the time limit
MIP_SHARE = 0.5  # min_cost: the MIP's share of the time left; a mix it does not prove gets the rest polished
FRONTIER_EVALUATIONS = 600  # the frontier's local search for the fastest mixes
FRONTIER_TOLERANCE = 0.05  # the frontier's top point: the fastest mix to within this share
FRONTIER_NODES = 64  # the frontier's solves consider at most this many nodes (or twice the largest mix seen)
# a mix that trains slower than this share of its slowest candidate's rate is not worth planning
NEGLIGIBLE_RATE_SHARE = 1e-3


@dataclass(frozen=True, slots=True)
class SearchProgress:
    """Where a search stands. ``bound``: what is proven so far, in ``bound_unit`` — ``usd_per_hour``
    (min_cost: no mix meeting the target costs less), ``samples_per_s`` (max_throughput: no mix within
    the budget trains faster), ``usd_per_million_samples`` (the per-sample objectives); None: none yet."""

    phase: str  # the search running: min_cost, max_throughput, min_cost_per_sample, frontier, or what precedes them
    candidates: int
    solves: int  # MIP solves so far
    best: tuple[tuple[str, int], ...] = ()  # the best mix so far: (candidate key, nodes)
    best_samples_per_s: float | None = None
    best_usd_per_hour: float | None = None
    bound: float | None = None
    bound_unit: str = ""
    elapsed_s: float = 0.0


Progress = Callable[[SearchProgress], None]


@dataclass
class Searcher:
    problem: Problem
    backend: str = "CBC"
    tolerance: float = DEFAULT_TOLERANCE
    time_limit_s: float = 60.0  # for the whole search; each MIP gets what is left
    progress: Progress | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.model = TargetModel(self.problem, self.backend, self.time_limit_s, self.tolerance)
        self.started = time.perf_counter()
        self.solves = 0
        self.statuses: set[SolveStatus] = set()
        self._cache: dict[float, Solution] = {}
        self._lone: tuple[int, ...] | None = None
        self._phase = ""
        self._best: Solution | None = None
        self._bound: tuple[float | None, str] = (None, "")
        self._begun = time.perf_counter()
        self.polished = 0  # mixes the local search scored

    # -- progress ---------------------------------------------------------------------------

    def announce(self, phase: str) -> None:
        """A new stage of the search: what it is called; the best and bound start afresh."""
        self._phase, self._best, self._bound = phase, None, (None, "")
        self._notify()

    def _track(self, best: Solution | None, bound: float | None, unit: str) -> None:
        if best is not None and best.found:
            self._best = best
        self._bound = (bound, unit) if bound is not None and math.isfinite(bound) else self._bound
        self._notify()

    def _notify(self) -> None:
        if self.progress is None:
            return
        best = self._best
        mix = () if best is None else tuple((c.key, n) for c, n in zip(self.problem.candidates, best.counts,
                                                                       strict=True) if n)
        self.progress(SearchProgress(
            phase=self._phase, candidates=len(self.problem.candidates), solves=self.solves, best=mix,
            best_samples_per_s=None if best is None else best.samples_per_s,
            best_usd_per_hour=None if best is None else best.usd_per_hour,
            bound=self._bound[0], bound_unit=self._bound[1], elapsed_s=time.perf_counter() - self._begun))

    # -- primitives -------------------------------------------------------------------------

    def solve_at(self, target: float, share: float = 1.0) -> Solution:
        """The MIP at ``target``, within ``share`` of the time left."""
        floor = self.problem.limits.min_samples_per_s or 0.0
        target = max(target, floor)
        if target not in self._cache:
            left = self.time_limit_s - (time.perf_counter() - self.started)
            self.model.time_limit_s = max(0.25, left * share)
            solution = self.model.solve(target)
            self.solves += solution.iterations
            self.statuses.add(solution.status)
            self._cache[target] = solution
            self._notify()
        return self._cache[target]

    def throughput(self, solution: Solution) -> float:
        return solution.samples_per_s

    def evaluate(self, counts: tuple[int, ...]):  # noqa: ANN201
        """The referee's figures for a mix; once evaluated, a mix is where later solves start from."""
        return self.model.evaluate(counts)

    def upper_rate(self) -> float:
        """No mix trains faster than its nodes alone at full speed, nor than the budget can buy.

        hivemind: one node alone keeps all of its rate; k ≥ 2 nodes keep their step efficiency q of it,
        ``R_k`` at most (the k largest kept rates), and every round of S samples also pays the protocol's
        overhead ``A_k`` (``Tables.overhead``, the least any k-node mix pays), so ``t ≤ S·R_k/(S + R_k·A_k)``:
        the rows' own ``R ≥ S·t/(S − t·A_k)`` solved for t."""
        cap = self.problem.node_cap
        rates = sorted((c.rate * c.goodput for c in self.problem.candidates for _ in range(min(c.capacity, cap))),
                       reverse=True)
        bound = sum(rates[:cap])
        if self.problem.oracle.strategy == "hivemind" and rates:
            kept = sorted((c.rate * c.goodput * c.step_efficiency for c in self.problem.candidates
                           for _ in range(min(c.capacity, cap))), reverse=True)
            per_round, overhead = self.problem.oracle.samples_per_round, self.model.tables.overhead
            bound, total = rates[0], 0.0
            for k, rate in enumerate(kept[:cap], 1):
                total += rate
                if k >= 2:
                    bound = max(bound, total * per_round / (per_round + total * overhead.get(k, 0.0)))
        budget = self.problem.limits.budget_usd_per_hour
        if budget is not None:
            free = sum(c.rate * c.goodput * min(c.capacity, cap) for c in self.problem.candidates
                       if c.price_usd_per_hour + c.data_usd_per_hour == 0)
            per_dollar = max((c.rate * c.goodput / (c.price_usd_per_hour + c.data_usd_per_hour)
                              for c in self.problem.candidates if c.price_usd_per_hour + c.data_usd_per_hour > 0),
                             default=0.0)
            bound = min(bound, free + budget * per_dollar)
        return bound

    def ratio_floor(self, at_least: float = 0.0) -> float:
        """A lower bound on $/sample of any mix training at least ``at_least`` samples/s: it is one
        node fast enough alone, or two or more nodes — each at best its candidate's cost per sample
        at full speed, and with hivemind keeping only its step efficiency ``q`` of it."""
        cands = self.problem.candidates
        ratio = [c.usd_per_good_sample_s / 3600 for c in cands]
        single = min((ratio[i] for i in self._lone_nodes() if cands[i].rate * cands[i].goodput >= at_least),
                     default=math.inf)
        several = min(ratio)
        if self.problem.oracle.strategy == "hivemind":
            several = min(r / c.step_efficiency for r, c in zip(ratio, cands, strict=True))
        return min(single, several)

    def _lone_nodes(self) -> tuple[int, ...]:
        """The candidates that the limits allow to train alone (one node, nothing else)."""
        if self._lone is None:
            n = len(self.problem.candidates)
            self._lone = tuple(i for i in range(n)
                               if semantics.structurally_feasible(self.problem, tuple(int(j == i) for j in range(n))))
        return self._lone

    def lower_rate(self) -> float:
        """Where searches start: half the slowest single node (or the floor)."""
        return max(self.problem.limits.min_samples_per_s or 0.0,
                   min(c.rate * c.goodput for c in self.problem.candidates) * 0.5)

    def first_feasible(self) -> Solution:
        """The cheapest mix at :meth:`lower_rate`; where no mix reaches it (single nodes ruled out by
        the limits, and slow links), the cheapest at the floor, or without one at a thousandth of the
        slowest node's rate: below that no mix is worth training on."""
        first = self.solve_at(self.lower_rate())
        if first.found:
            return first
        slowest = min(c.rate * c.goodput for c in self.problem.candidates)
        return self.solve_at(max(self.problem.limits.min_samples_per_s or 0.0, slowest * NEGLIGIBLE_RATE_SHARE))

    def restart_clock(self, time_limit_s: float) -> None:
        """A fresh time budget for the next search on the same model (its cache and pairs stay)."""
        self.started = time.perf_counter()
        self.time_limit_s = time_limit_s

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.started > self.time_limit_s

    def _status(self, gap: float) -> SolveStatus:
        if SolveStatus.ERROR in self.statuses:
            return SolveStatus.ERROR
        if SolveStatus.FEASIBLE in self.statuses or SolveStatus.TIME_LIMIT in self.statuses or gap > 2 * self.tolerance:
            return SolveStatus.FEASIBLE
        return SolveStatus.OPTIMAL

    def _result(self, objective: str, solution: Solution | None, gap: float, start: float,
                bound: float | None = None, unit: str = "") -> SearchResult:
        if solution is None or not solution.found:
            status = SolveStatus.INFEASIBLE if SolveStatus.ERROR not in self.statuses else SolveStatus.ERROR
            if SolveStatus.TIME_LIMIT in self.statuses and status is SolveStatus.INFEASIBLE:
                status = SolveStatus.TIME_LIMIT
            return SearchResult(objective, None, None, None, status, gap, time.perf_counter() - start, self.solves)
        rate = self.throughput(solution)
        return SearchResult(objective, solution, rate, solution.usd_per_hour, self._status(gap), gap,
                            time.perf_counter() - start, self.solves, bound=bound, bound_unit=unit)

    # -- the referee's own search -------------------------------------------------------------

    def polish(self, goal: Goal, best: Solution | None) -> Solution | None:
        """The best of ``best`` and a local search on the referee's figures (``solver.local``) from the
        best mixes evaluated so far (baselines, solves) and the best region fills; a mix it finds that
        keeps the goal and beats ``best`` is returned with ``best``'s bound (the bound covers every
        mix)."""
        if self.out_of_time() or not self.problem.candidates:
            return best
        # before the MIP (no ``best`` yet) a short search: where the MIP proves its mix at once, no more is
        # needed; after it, the time left, up to a large budget
        left = self.time_limit_s - (time.perf_counter() - self.started)
        search = LocalSearch(self.problem, self.evaluate, goal,
                             max_evaluations=PRE_MIP_EVALUATIONS if best is None else POLISH_EVALUATIONS,
                             deadline=time.perf_counter() + left)
        ranked = lambda mixes: sorted((s, x) for x in mixes if (s := search.score_of(x)) is not None)  # noqa: E731
        known = [x for x in self.model.evaluated() if semantics.structurally_feasible(self.problem, x)]
        starts = [x for _, x in ranked(known)[:POLISH_STARTS]] + [x for _, x in ranked(search.fills())[:POLISH_STARTS]]
        starts += [x for _, x in ranked(search.region_fills(greedy=best is not None))[:POLISH_STARTS]]
        found = search.run(starts)
        self.polished += search.evaluations
        if found is None or found[1][0] > 0:
            return best
        counts, _ = found
        evaluation = self.evaluate(counts)
        if best is not None and best.found:
            mine = score(self.problem, goal, Evaluation(best.samples_per_s, best.usd_per_hour))
            if mine <= found[1]:
                return best
        bound = best.bound_usd_per_hour if best is not None else None
        target = goal.target_samples_per_s if goal.objective == "min_cost" else evaluation.samples_per_s
        solution = Solution(SolveStatus.FEASIBLE, counts, evaluation.usd_per_hour,
                            None if bound is None else min(bound, evaluation.usd_per_hour), 0.0, 0, target,
                            samples_per_s=evaluation.samples_per_s)
        self._track(solution, None, "")
        return solution

    # -- objectives -------------------------------------------------------------------------

    def min_cost(self, target: float) -> SearchResult:
        start = time.perf_counter()
        self.announce("min_cost")
        if target > self.upper_rate() * (1 + 1e-9):  # out of reach whatever the mix: no MIP needed
            return self._result("min_cost", None, 0.0, start)
        goal = Goal("min_cost", target)
        self.polish(goal, None)  # the mixes it scores start the MIP: it looks only below the best of them
        solution = self.solve_at(target, MIP_SHARE)
        if solution.found and solution.status is not SolveStatus.OPTIMAL:  # proven: nothing to polish
            solution = self.polish(goal, solution)
        gap = 0.0
        if solution.found and solution.bound_usd_per_hour is not None and solution.usd_per_hour:
            gap = max(0.0, (solution.usd_per_hour - solution.bound_usd_per_hour) / solution.usd_per_hour)
        bound = solution.bound_usd_per_hour if solution.found else None
        self._track(solution, bound, "usd_per_hour")
        return self._result("min_cost", solution, gap, start, bound, "usd_per_hour")

    def max_throughput(self, phase: str = "max_throughput") -> SearchResult:
        start = time.perf_counter()
        self.announce(phase)
        high = self.upper_rate() * (1 + 1e-9)
        self._track(None, high, "samples_per_s")
        first = self.first_feasible()
        if not first.found:
            return self._result("max_throughput", None, 0.0, start)
        reach = lambda sol, t: max(t, sol.samples_per_s)  # noqa: E731
        best, low = self._fastest_known(first), reach(first, first.target_samples_per_s)
        low = max(low, best.samples_per_s)  # the bisection starts above every mix evaluated so far
        self._track(best, high, "samples_per_s")
        while high - low > self.tolerance * low and not self.out_of_time():
            t = math.sqrt(low * high)
            solution = self.solve_at(t)
            if solution.found:
                best, low = solution, reach(solution, t)
            elif solution.status is SolveStatus.INFEASIBLE:  # proven: no mix reaches t
                high = t
            else:  # cut short without a mix: t is neither reached nor ruled out, and the bound stays
                break
            self._track(best, high, "samples_per_s")
        if phase == "max_throughput":
            best = self.polish(Goal("max_throughput"), best)
            low = max(low, best.samples_per_s)
            best = self._cheapest_tied(best)
            low = min(low, best.samples_per_s)  # the gap is the chosen mix's
        return self._result("max_throughput", best, max(0.0, (high - low) / high), start, high, "samples_per_s")

    def _fastest_known(self, first: Solution) -> Solution:
        """``first``, or the fastest admissible mix evaluated so far (a local search's, a baseline) where
        that trains faster: a mix the bisection need not solve for again."""
        known = max(self.model.known_mixes(), key=lambda ce: (ce[1].samples_per_s, -ce[1].usd_per_hour),
                    default=None)
        if known is None or known[1].samples_per_s <= first.samples_per_s:
            return first
        counts, evaluation = known
        return Solution(SolveStatus.FEASIBLE, counts, evaluation.usd_per_hour, None, 0.0, 0,
                        evaluation.samples_per_s, samples_per_s=evaluation.samples_per_s)

    def _cheapest_tied(self, best: Solution) -> Solution:
        """Ties on throughput go to the cheaper mix: of the admissible mixes evaluated so far that train
        within the tolerance of ``best`` (the search certifies no finer), the cheapest."""
        tied = [(e.usd_per_hour, counts, e) for counts, e in self.model.known_mixes()
                if e.samples_per_s >= best.samples_per_s * (1 - self.tolerance)
                and e.usd_per_hour < best.usd_per_hour * (1 - 1e-9)]
        if not tied:
            return best
        usd, counts, evaluation = min(tied)
        return replace(best, counts=counts, usd_per_hour=usd, samples_per_s=evaluation.samples_per_s,
                       status=SolveStatus.FEASIBLE if best.status is SolveStatus.OPTIMAL else best.status)

    def min_cost_per_sample(self) -> SearchResult:
        start = time.perf_counter()
        self.announce("min_cost_per_sample")
        low, high = self.lower_rate(), self.upper_rate()
        best: Solution | None = None
        best_ratio = math.inf

        def consider(solution: Solution) -> None:
            nonlocal best, best_ratio
            if solution.found:
                ratio = solution.usd_per_hour / (3600 * solution.samples_per_s)
                if ratio < best_ratio:
                    best, best_ratio = solution, ratio
                    self._track(best, None, "")

        first = self.first_feasible()
        if not first.found:
            return self._result("min_cost_per_sample", None, 0.0, start)
        consider(first)
        self._try_best_single(consider)
        # a mix may train slower than half its slowest node (a slow WAN link): the intervals start at the
        # floor, or where no mix is worth training on
        slowest = min(c.rate * c.goodput for c in self.problem.candidates)
        bottom = max(self.problem.limits.min_samples_per_s or 0.0, slowest * NEGLIGIBLE_RATE_SHARE)
        base = first if first.target_samples_per_s <= bottom else self.solve_at(bottom)
        if not base.found:  # cut short: the search covers what it could
            base = first
        low = base.target_samples_per_s
        consider(base)
        goal = Goal("min_cost_per_sample")
        consider(self.polish(goal, best))  # a good mix first: the intervals above its ratio are never split
        floor = self.ratio_floor
        heap = [(max(floor(low), base.bound_usd_per_hour / (3600 * high)), low, high, base.bound_usd_per_hour)]
        settled = math.inf  # lower bound of intervals too narrow to split
        while heap and heap[0][0] < best_ratio * (1 - self.tolerance) and not self.out_of_time():
            bound, a, b, f_a = heapq.heappop(heap)
            if b <= a * (1 + self.tolerance):
                settled = min(settled, bound)
                continue
            mid = math.sqrt(a * b)
            solution = self.solve_at(mid)
            consider(solution)
            heapq.heappush(heap, (max(floor(a), f_a / (3600 * mid)), a, mid, f_a))
            if solution.found:  # nothing is feasible above an infeasible target
                heapq.heappush(heap, (max(floor(mid), solution.bound_usd_per_hour / (3600 * b)), mid, b,
                                      solution.bound_usd_per_hour))
            elif solution.status is not SolveStatus.INFEASIBLE:
                # cut short at mid: [mid, b] is neither searched nor ruled out; its bound (that of
                # [a, b]) stays in the certificate
                settled = min(settled, bound)
            self._track(best, 1e6 * min([settled, best_ratio] + ([heap[0][0]] if heap else [])),
                        "usd_per_million_samples")
        consider(self.polish(goal, best))
        lower = min([settled, best_ratio] + ([heap[0][0]] if heap else []))
        gap = (best_ratio - lower) / best_ratio if best_ratio > 0 else 0.0
        return self._result("min_cost_per_sample", best, gap, start, 1e6 * lower, "usd_per_million_samples")

    def _try_best_single(self, consider) -> None:  # noqa: ANN001
        """The single node with the lowest cost per sample that meets the floor often is the optimum
        (it reaches ``ratio_floor``): try it first, solved at its own rate for a certified mix."""
        cands = self.problem.candidates
        floor = self.problem.limits.min_samples_per_s or 0.0
        fast = [i for i, c in enumerate(cands) if c.rate * c.goodput >= floor]
        if not fast:
            return
        best = min(fast, key=lambda i: (cands[i].price_usd_per_hour + cands[i].data_usd_per_hour)
                   / (cands[i].rate * cands[i].goodput))
        x = tuple(1 if i == best else 0 for i in range(len(cands)))
        if semantics.structurally_feasible(self.problem, x):
            consider(self.solve_at(self.evaluate(x).samples_per_s))

    def frontier(self, points: int = 6) -> tuple[tuple[float, float], ...]:
        """A few (samples/s, $/h) points of the cost/throughput trade-off, within the time left. A
        sketch: its solves consider at most ``FRONTIER_NODES`` nodes, or twice the largest mix evaluated
        so far (building the rows of 1,000 node counts alone takes seconds)."""
        largest = max((sum(counts) for counts in self.model.evaluated()), default=0)
        self.model.sketch_node_cap = max(FRONTIER_NODES, 2 * largest)
        self.announce("frontier")
        try:
            return self._frontier(points)
        finally:
            self.model.sketch_node_cap = None

    def _frontier(self, points: int) -> tuple[tuple[float, float], ...]:
        # the fastest mixes first, by a short local search on the referee; then every mix evaluated on the
        # way (baselines, the searches' mixes) gives the points nothing else beats; MIP solves only
        # where those are fewer than asked for
        search = LocalSearch(self.problem, self.evaluate, Goal("max_throughput"), max_evaluations=FRONTIER_EVALUATIONS,
                             deadline=self.started + self.time_limit_s / 2)
        fills = sorted((s, x) for x in search.fills() if (s := search.score_of(x)) is not None)
        search.run([x for _, x in fills[:POLISH_STARTS]])
        known = _pareto([(e.samples_per_s, e.usd_per_hour) for e in self.model.known()])
        if len(known) >= points:
            return _thin(known, 2 * points)
        low, high = self.lower_rate(), self.upper_rate()
        best_high = None
        solution = self.solve_at(high)
        if not solution.found:
            # the fastest mix, to within 5 %: the frontier's top point needs no more (bounded work)
            tolerance, self.tolerance = self.tolerance, max(self.tolerance, FRONTIER_TOLERANCE)
            try:
                top = self.max_throughput(phase="frontier")
            finally:
                self.tolerance = tolerance
            best_high = top.samples_per_s
        else:
            best_high = self.throughput(solution)
        if not best_high:
            return ()
        out = []
        for j in range(points):
            if self.out_of_time():  # bounded work: the points found so far
                break
            t = low * (best_high / low) ** (j / max(1, points - 1))
            found = self.solve_at(t)
            if found.found:
                out.append((self.throughput(found), found.usd_per_hour))
        # with every mix evaluated on the way (baselines, the plan, mixes the solves cut off): the points
        # that nothing else beats on both samples/s and $/h
        out += [(e.samples_per_s, e.usd_per_hour) for e in self.model.known()]
        return _thin(_pareto(out), 2 * points)


def _pareto(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The (samples/s, $/h) points that no other beats on both, by rate."""
    out: list[tuple[float, float]] = []
    for rate, usd in sorted(set(points), key=lambda p: (-p[0], p[1])):  # fastest first: keep the ever cheaper
        if not out or usd < out[-1][1]:
            out.append((rate, usd))
    return tuple(sorted(out))


def _thin(points: tuple[tuple[float, float], ...], most: int) -> tuple[tuple[float, float], ...]:
    """At most ``most`` of the points, spread evenly over them by rank (the slowest and fastest kept)."""
    if len(points) <= most:
        return points
    picks = sorted({round(j * (len(points) - 1) / (most - 1)) for j in range(most)})
    return tuple(points[j] for j in picks)
