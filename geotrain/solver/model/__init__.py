r"""The mixed-integer model: the cheapest mix of nodes that trains at least ``t`` samples/s.

Sets and data
-------------
``i ∈ I`` candidates (offers) with price ``p_i`` ($/h), data egress ``d_i`` ($/h), rate ``s_i``
(samples/s alone), goodput ``g_i``, micro-batch ``m_i``, capacity ``U_i``, minimum ``L_i``;
``p ∈ P`` places (a zone; a region for region-wide offers; an on-prem site), in ring order, each in
one region ``r(p)``; ``k ∈ {1..N}`` node counts (``N`` = max nodes). The oracle gives the round's
overhead ``A_k`` and communication terms: ``ρ_p(k)`` inside place p, ``π_{pp'}(k)`` between two
places, ``σ_{s,m}(k)`` for an on-prem site holding m nodes, ``β_p`` a broadcast inside p; and prices
``c_{pp'}`` ($/byte, both sides of a transfer). ``S`` = samples per round (hivemind), ``W`` = payload
bytes, ``H``/``A`` = local / accumulation steps, ``m̄ = max_i m_i``, ``τ_min = min_i m_i/s_i``, ``v(k) = 2(k−1)/k``; ``C_p = Σ_{i∈p} x_i``, ``n = Σ_i x_i``.

Variables
---------
``x_i ∈ {L_i..U_i}``; ``w_k ∈ {0,1}``: exactly k nodes; ``y_p ∈ {0,1}``: place p used (``Y_r`` for a
region); ``E_p ≥ 0``: sync egress $/h leaving p; strategy auxiliaries below.

Constraints (all strategies)
----------------------------
::

    Σ_k w_k = 1,   n = Σ_k k·w_k,   n_pin ≤ n ≤ N                         node count (n_pin: a pinned count)
    w_k = 0 for k < n_min   n_min: the fewest nodes whose full rates s_i·g_i sum to t (every strategy's
                            throughput rows below imply Σ_i s_i g_i x_i ≥ t)
    y_p ≤ C_p ≤ U_p·y_p;   Y_r ≥ y_p (p ∈ r), Y_r ≤ Σ_{p∈r} y_p;   Σ_r Y_r ≤ max_regions
    C_p ≤ max_per_zone,   C_p ≤ share_z·n                               correlated-preemption hedge
    Σ_{spot} x_i ≤ share_spot·n,   Σ_{i∈scope} acc_i·x_i ≤ quota          spot share, quotas
    Σ_{i∈pool} acc_i·x_i ≤ cap_pool,   Σ_{i∈z} acc_i·x_i ≤ max_gpus_per_zone   capacity pools, GPUs
    Σ_i (p_i + d_i)·x_i + Σ_p E_p ≤ budget

Throughput ≥ t
--------------
*hivemind* — with ``R = Σ_i s_i g_i q_i x_i`` (``q_i``: the candidate's step efficiency, the share of
``s_i`` a node keeps inside the protocol) and ``c(k, τ) = S·t / (S − t·(h·A_k + τ))``,
``h = min_i h_i`` the fastest candidate's host factor (the perf model scales the overhead by the
mix's slowest host: ``h·A_k`` is a lower bound on it, and the referee's cuts close the gap)::

    Σ_i s_i g_i x_i ≥ t·w_1;   R ≥ Σ_{k≥2} w_k·c(k, 0)
    R ≥ Σ_{k≥2} w_k·c(k, ρ_p(k))        − M·(1 − y_p)                 each place used
    R ≥ Σ_{k≥2} w_k·c(k, π_{pp'}(k))    − M·(2 − y_p − y_p')            each pair used
    R ≥ Σ_{k≥2} w_k·c(k, σ_{s,m}(k))    − M·(1 − u_{s,m})               on-prem site s holding m
    R ≥ Σ_{k≥2} w_k·c(k, (L − h)·A_k)   − M·(1 − z_L),  Σ_{h_i ≥ L} x_i ≤ N·z_L   each host level L > h

so ``T = max(h·A_k + max(active terms), h_max·A_k)`` (``h_max``: the slowest host in use; the perf
model's ``h_max·A_k + max(terms)`` is at least that) and ``S/(S/R + T) ≥ t``. ``π`` is the single-stream pair term,
``ρ`` a node's egress over its own cap, ``σ`` a site's traffic over its uplink (its aggregate); the perf
model's per-region aggregate term (all streams of a VM or site to another region through one
aggregate cap) has no row, which only under-states T.

*allreduce* — ``G = Σ_i m_i g_i x_i``, ``τ`` the slowest step in use (one-hot levels), ``T ≥`` every
active ``ρ_p(k)`` and ``π_{pp'}(k)``; DDP overlaps the ring with the backward pass (``β`` of a step)
but for its last bucket (``b`` of the gradients), so a step is ``max(τ + b·T, (1 − β)·τ + T)``::

    G ≥ t·(τ + b·T),   G ≥ t·((1 − β)·τ + T),   T ≥ min_p min_{k ≥ n_min} ρ_p(k)

and, for each node, the most it can add to a mix of at least ``n_min`` nodes (its step waits at least
for its own place's least ring ``L_p = min_{k ≥ n_min} ρ_p(k)``; ``n_min`` and ``r_i`` are tightened
together, a larger ``n_min`` giving smaller ``r_i``)::

    Σ_i r_i·x_i ≥ t,   r_i = m_i g_i / max(m_i/s_i + b·L_p, (1 − β)·m_i/s_i + L_p)

(the third row: a valid bound the one-hot ``w`` leaves loose, as its LP relaxation prices n nodes by
a blend of 1 and N nodes; a place in use has its term at the mix's own count, n ≥ n_min). Where
``β·τ ≤ (1 − b)·T`` for every level of ``τ`` and every ``T`` from that least term up (or ``≥`` for every
``τ`` and ``T`` up to its largest term), the first (the second) row says nothing more and is left out.

*local-sgd* — per round: H steps, each the slowest node's step or, in a region of ``n_r ≥ 2`` nodes,
``τ_min`` plus its all-reduce ``ρ_r(n_r)``; then the leaders' ring ``π_{rr'}(R)`` over the R regions
in use; then a broadcast ``β_r`` in each region of two or more nodes::

    H·G ≥ t·(H·T_loc + T_wan + B),   T_loc ≥ τ,   T_loc ≥ τ_min + Σ_m u_{r,m}·ρ_r(m),
    T_wan ≥ Σ_R v_R·π_{rr'}(R) − M(2 − Y_r − Y_r'),   B ≥ β_r·Σ_{m≥2} u_{r,m}

(``u_{r,m}``: region r holds m nodes; ``v_R``: R regions in use).
*ma* — the same rows with ``K`` for ``H``, but the leaders' average overlaps the next K steps::

    K·G ≥ t·(T_c + B),   T_c ≥ K·T_loc,   T_c ≥ T_wan Before a region's ``u`` exist, the
linear under-estimates ``ρ_r(2)·(C_r − 1)/(U_r − 1)`` and ``β_r·(C_r − 1)/(U_r − 1)`` stand in, and
with ``z_r ∈ {0,1}``, ``C_r ≤ 1 + (U_r − 1)·z_r`` (z_r = 1 once r holds two nodes; ρ grows with the
count): ``T_loc ≥ (τ_min + ρ_r(2))·z_r``, ``B ≥ β_r·z_r``.

*asgd-ga* — ``X_r ≥ 0`` per region, home ``h_r`` (``Σ h_r = 1``, ``h_r ≤ Y_r``) the region with the
most raw compute ``Π_r = Σ_{i∈r} s_i x_i`` (``Π* ≥ Π_r``, ``Π_r ≥ Π* − M(1 − h_r)``)::

    X_r ≤ Σ_{i∈r} s_i g_i x_i,   X_r ≤ M·Y_r,   X_r ≤ A·Σ_{i∈r} m_i x_i / π_{rr'} + M(1 − h_{r'}),   Σ_r X_r ≥ t
    X_r ≤ Σ_{i∈r} x_i·m_i / (m_i/(s_i g_i) + ρ_r(2)) + max_{i∈r} s_i g_i·(1 − z_r)   (z_r as for local-sgd:
    with two or more nodes every step waits for r's all-reduce)

Sync egress (the mix trains ``t`` samples/s)
--------------------------------------------
*hivemind*: the nodes of p send ``2W·s(n)`` to every node elsewhere per round (``s(n)``: the oracle's
``pair_share``, ``1/n`` in one group, ``(m − 1)/((n − 1)·m)`` in groups of ``m = min(n, G)``), ``t/S``
rounds per second: ``E_p = α·C_p·D_p·s(n)`` with ``α = 3600·t·2W/S`` and ``D_p = Σ_{p'≠p}
c_{pp'}·C_{p'}``. With ``u_{p,m}`` (p holds m nodes): ``F_p ≥ m·α·D_p − M(1 − u_{p,m})`` and
``E_p ≥ F_p·s(k) − M(1 − w_k)``, exact. Before p's ``u`` exist:
``E_p ≥ ½·ν·α·min_{p'} c_{pp'}·b_p`` with ``b_p ≥ min(C_p, n − C_p)`` (one binary), because
``C(n−C)·s(n) ≥ ν·min(C, n−C)/2`` with ``ν = min_n n·s(n)`` (1 in one group, ``(G − 1)/G`` in groups).
*allreduce*: each place in use sends one ring hop ``v(n)·W`` per step to the next place in use, at
least ``t/(n·m̄)`` steps per second::

    E_p ≥ c_{pp'}·Σ_k w_k·3600·t·v(k)·W/(k·m̄) − M·(2 − y_p − y_p' + Σ_{p'' between p and p'} y_p'')

and, before those rows exist, the cheapest ``c_{pp'}`` once two places are used.
*local-sgd*: the same shape with ``W`` per hop (``v ≥ 1``): hops between zones of one region every
step, hops between the leaders' regions every H steps.
*asgd-ga*: a region pushes W and pulls W at most once per its longest cycle
``Γ_{rh} = max(A·(max_i m_i/s_i + ρ̄_r(N)), π_{rh})`` (``ρ̄``: the ring on the region's slowest NIC,
so ``Γ`` is at least any mix's cycle):
``E_r ≥ 3600·W·(c_{rh} + c_{hr})/Γ_{rh} − M(2 − Y_r − h_h)``.

Objective
---------
``min Σ_i (p_i + d_i)·x_i + Σ_p E_p``  ($/h at the target rate).

The model is a relaxation of the referee's figures (``geotrain.solver.semantics``): every row says
at most what the perf model says of throughput and at least nothing more of cost. Rows that depend
on the places a mix uses (pairs, next-place egress, per-place counts) are added lazily: the model
starts with their valid under-estimates, and after each solve the rows of the places the solution
uses are added, until the solution's own rows are all present. Then the referee evaluates it: if the
best mix the referee accepts costs within ``tolerance`` of the MIP's bound, it is optimal for the
referee (no mix it accepts costs less); otherwise the mix is cut off (a no-good cut on its counts)
and the MIP is solved again. ``geotrain.solver.semantics`` evaluates the converged model for one count vector.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import combinations

from geotrain.errors import InputError
from geotrain.solver import semantics, units
from geotrain.solver.problem import Evaluation, Problem, place_order
from geotrain.solver.result import Solution, SolveStatus
from geotrain.solver.model.rows import Builder, Lazy
from geotrain.solver.tables import Tables

BACKENDS = ("CBC", "SCIP")
DEFAULT_TOLERANCE = 1e-3
MAX_CUTS = 40  # no-good cuts per target before the best mix found is returned uncertified

@dataclass
class TargetModel:
    """Solves ``min $/h s.t. throughput ≥ t`` for one problem, for any number of targets."""

    problem: Problem
    backend: str = "CBC"
    time_limit_s: float = 30.0
    tolerance: float = DEFAULT_TOLERANCE
    lazy: Lazy = field(default_factory=Lazy)

    def __post_init__(self) -> None:
        self.tables = Tables(self.problem)
        self._smaller: dict[int, Tables] = {}  # tables for the node counts a cutoff leaves (see _tables_below)
        self.sketch_node_cap: int | None = None  # set while the frontier (a sketch) solves: at most this many nodes
        self.referee = semantics.referee_of(self.problem)
        self._evaluations: dict[tuple[int, ...], Evaluation] = {}

    def evaluate(self, counts: tuple[int, ...]) -> Evaluation:
        if counts not in self._evaluations:
            self._evaluations[counts] = self.referee.evaluate(counts)
        return self._evaluations[counts]

    def solve(self, target: float) -> Solution:
        """The cheapest mix by the referee that trains ``target`` samples/s and keeps the limits."""
        start = time.perf_counter()
        deadline = start + self.time_limit_s
        backend, iterations = self.backend, 0
        cuts: list[tuple[int, ...]] = []
        best = self._known_best(target)
        bound = 0.0  # a lower bound on the $/h of every admissible mix not cut off yet
        proven = False  # the bound covers every admissible mix
        failure: SolveStatus | None = None
        while True:
            iterations += 1
            left = max(0.25, deadline - time.perf_counter())
            cutoff = best[1].usd_per_hour * (1 - self.tolerance) if best is not None else None
            found, counts, mip_bound = self._solve_once(target, left, backend, cuts, cutoff)
            if found is SolveStatus.INFEASIBLE:  # nothing left: the best mix found is the optimum
                proven = True
                break
            if counts is None:  # time limit or error without a mix
                failure = found
                break
            bound = max(bound, mip_bound if mip_bound is not None else 0.0)
            if self._refine(counts):
                if time.perf_counter() > deadline:  # out of time while the rows were still being made exact
                    break
                continue
            if not self._meets(counts, target):
                # a back end returned a mix that breaks the model (seen with CBC on rare instances):
                # solve this target again with the other back end; if that fails too, report an error
                other = next((b for b in BACKENDS if b != backend), None)
                if backend != self.backend or other is None:
                    return Solution(SolveStatus.ERROR, None, None, None, time.perf_counter() - start, iterations,
                                    target)
                backend = other
                continue
            evaluation = self.evaluate(counts)
            if (semantics.admissible(self.problem, counts, evaluation)
                    and evaluation.samples_per_s >= target * (1 - 1e-6)
                    and (best is None or evaluation.usd_per_hour < best[1].usd_per_hour)):
                best = (counts, evaluation)
            if best is not None and best[1].usd_per_hour <= bound * (1 + self.tolerance) + 1e-12:
                proven = True
                break
            if len(cuts) >= MAX_CUTS or time.perf_counter() > deadline:
                break
            cuts.append(counts)
        wall = time.perf_counter() - start
        if best is None:
            status = SolveStatus.INFEASIBLE if proven else (failure or SolveStatus.TIME_LIMIT)
            return Solution(status, None, None, None, wall, iterations, target)
        counts, evaluation = best
        low = evaluation.usd_per_hour if proven and found is SolveStatus.INFEASIBLE else bound
        low = min(low, evaluation.usd_per_hour)
        status = SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE
        return Solution(status, counts, evaluation.usd_per_hour, low, wall, iterations, target,
                        samples_per_s=evaluation.samples_per_s)

    def evaluated(self) -> list[tuple[int, ...]]:
        """The count vectors evaluated so far."""
        return list(self._evaluations)

    def known(self) -> list[Evaluation]:
        """Every mix evaluated so far that keeps the limits (baselines, solutions, mixes cut off)."""
        return [e for counts, e in self._evaluations.items() if semantics.admissible(self.problem, counts, e)]

    def known_mixes(self) -> list[tuple[tuple[int, ...], Evaluation]]:
        """Every mix evaluated so far that keeps the limits, with its count vector."""
        return [(counts, e) for counts, e in self._evaluations.items() if semantics.admissible(self.problem, counts, e)]

    def _known_best(self, target: float) -> tuple[tuple[int, ...], Evaluation] | None:
        """The cheapest mix evaluated so far (by an earlier solve, or a baseline handed to
        :meth:`evaluate`) that reaches ``target`` and keeps the limits: every solve starts from it, and
        its MIP looks only below it."""
        known = sorted(((counts, e) for counts, e in self._evaluations.items()
                        if e.samples_per_s >= target * (1 - 1e-6)), key=lambda ce: (ce[1].usd_per_hour, ce[0]))
        return next(((counts, e) for counts, e in known if semantics.admissible(self.problem, counts, e)), None)

    def _refine(self, counts: tuple[int, ...]) -> bool:
        """Add the lazy rows of the places ``counts`` uses; True if any was missing."""
        tb, lazy, strategy = self.tables, self.lazy, self.problem.oracle.strategy
        places = list(semantics.used_places(self.problem, counts))
        regions = semantics.used_regions(self.problem, counts)
        leads = sorted((tb.lead_of[q] for q in regions), key=place_order)
        added = False
        # time rows between places (hivemind, allreduce) or the regions' lead places (local-sgd, asgd-ga):
        # a star around each one in use, so that later solutions that keep one find their terms present
        ends = places if strategy in ("hivemind", "allreduce") else leads
        others = tb.places if strategy in ("hivemind", "allreduce") else tb.leads
        missing = {pair for pair in combinations(sorted(ends), 2) if pair not in lazy.pairs}
        if missing:
            lazy.pairs |= missing | {tuple(sorted((q, o))) for q in ends for o in others if o != q}
            added = True
        hops: set[tuple[str, str]] = set()
        if strategy == "allreduce":
            hops |= set(ring_hops(places))
        elif strategy in ("local-sgd", "ma"):
            for ps in regions.values():
                hops |= set(ring_hops(ps))
            hops |= set(ring_hops(leads))
        if hops - lazy.hops:
            lazy.hops |= hops
            added = True
        counted = set()
        if strategy == "hivemind" and len(places) > 1:
            counted = set(places)
        elif strategy in ("local-sgd", "ma"):
            counted = {tb.lead_of[q] for q in regions if tb.region_cap[q] > 1}
        if counted - lazy.counted:
            lazy.counted |= counted
            added = True
        return added

    def _meets(self, counts: tuple[int, ...], target: float) -> bool:
        """Whether ``counts`` keeps the limits and reaches ``target`` by :mod:`semantics`."""
        if not semantics.structurally_feasible(self.problem, counts):
            return False
        return semantics.throughput(self.problem, counts) >= target * (1 - 1e-6)

    def _solve_once(self, target: float, time_limit_s: float, backend: str, cuts: list[tuple[int, ...]],
                    cutoff: float | None = None) -> tuple[SolveStatus, tuple[int, ...] | None, float | None]:
        from ortools.linear_solver import pywraplp

        solver = pywraplp.Solver.CreateSolver(backend)
        if solver is None:
            raise InputError(f"--backend: this OR-Tools build has no {backend} back end; use one of "
                             f"{', '.join(b for b in BACKENDS if b != backend)}")
        clock = time.perf_counter()
        b = Builder(self._tables_below(cutoff), solver, target, self.lazy)
        b.build()
        for cut in cuts:
            b.no_good(cut)
        if cutoff is not None:
            b.cutoff(cutoff)
        # the time limit covers building the rows too (1,000 node counts take a second or more)
        solver.SetTimeLimit(int(max(0.25, time_limit_s - (time.perf_counter() - clock)) * 1000))
        result = solver.Solve()
        status = {
            pywraplp.Solver.OPTIMAL: SolveStatus.OPTIMAL,
            pywraplp.Solver.FEASIBLE: SolveStatus.FEASIBLE,
            pywraplp.Solver.INFEASIBLE: SolveStatus.INFEASIBLE,
        }.get(result, SolveStatus.TIME_LIMIT if result == pywraplp.Solver.NOT_SOLVED else SolveStatus.ERROR)
        if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return status, None, None
        counts = tuple(int(round(v.solution_value())) for v in b.x)
        return status, counts, units.from_model_usd(solver.Objective().BestBound())


    def _tables_below(self, cutoff: float | None) -> Tables:
        """Tables for the node counts a mix cheaper than ``cutoff`` ($/h) can have: every node the user
        does not own costs at least the cheapest price (egress only adds), so such a mix holds at most
        the free nodes plus ``cutoff / cheapest price`` paid ones. The MIP then never builds rows for
        node counts no cheaper mix can reach (1,000 nodes allowed, 3 worth it)."""
        cands, n = self.problem.candidates, self.problem.node_cap
        if self.sketch_node_cap is not None:
            n = min(n, self.sketch_node_cap)
        if cutoff is not None:
            paid = [c.price_usd_per_hour + c.data_usd_per_hour for c in cands
                    if c.price_usd_per_hour + c.data_usd_per_hour > 0]
            free = sum(c.capacity for c in cands if c.price_usd_per_hour + c.data_usd_per_hour <= 0)
            if paid:
                n = min(n, free + int(cutoff / min(paid)) + 1)
            n = max(n, sum(c.minimum for c in cands), 1)
        if n >= self.problem.node_cap:
            return self.tables
        if n not in self._smaller:
            self._smaller[n] = Tables(self.problem, node_cap=n)
        return self._smaller[n]


def ring_hops(places: list[str]) -> list[tuple[str, str]]:
    """The hops of a ring over ``places`` in order (none for fewer than two)."""
    if len(places) < 2:
        return []
    return [(places[j], places[(j + 1) % len(places)]) for j in range(len(places))]
