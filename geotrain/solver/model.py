r"""The mixed-integer model: the cheapest mix of nodes that trains at least ``t`` samples/s.

Sets and data
-------------
``i ∈ I`` candidates (offers) with price ``p_i`` ($/h), data egress ``d_i`` ($/h), rate ``s_i``
(samples/s alone), goodput ``g_i``, micro-batch ``m_i``, capacity ``U_i``, minimum ``L_i``;
``q ∈ Q`` regions (an on-prem site is a region), ``I_q`` its candidates; ``z`` zones;
``k ∈ {1..N}`` node counts (``N`` = max nodes). The oracle gives, per strategy, the round's
overhead ``A_k`` and its communication terms: ``ρ_q(k)`` inside region q, ``π_{qq'}(k)`` between
two regions, ``σ_{s,m}(k)`` for an on-prem site s holding m nodes; and prices ``c_{qq'}`` ($/byte).
``S`` = samples per round (hivemind), ``e`` = Hivemind efficiency, ``W`` = payload bytes,
``H``/``A`` = local / accumulation steps, ``m̲`` = min_i m_i, ``v(k) = 2(k−1)/k``.

Variables
---------
``x_i ∈ {L_i..U_i}`` nodes of candidate i; ``w_k ∈ {0,1}``: exactly k nodes; ``y_q ∈ {0,1}``:
region q used; ``E_q ≥ 0``: sync egress $/h leaving q; strategy-specific auxiliaries below.

Constraints (all strategies)
----------------------------
::

    Σ_k w_k = 1,   Σ_i x_i = Σ_k k·w_k                                  node count
    y_q ≤ C_q := Σ_{i∈I_q} x_i ≤ U_q·y_q,   Σ_q y_q ≤ max_regions        regions in use
    Σ_{i∈z} x_i ≤ max_per_zone,   Σ_{i∈z} x_i ≤ share_z·Σ_i x_i          correlated-preemption hedge
    Σ_{spot} x_i ≤ share_spot·Σ_i x_i,   Σ_{i∈scope} acc_i·x_i ≤ quota   spot share, quotas
    Σ_{i∈pool} acc_i·x_i ≤ cap_pool,   Σ_{i∈z} acc_i·x_i ≤ max_gpus_per_zone   capacity pools, GPUs
    Σ_i (p_i + d_i)·x_i + Σ_q E_q ≤ budget

Throughput ≥ t
--------------
*hivemind* — with ``R = Σ_i s_i g_i x_i`` and ``c(k, τ) = S·t / (e·(S − t·(A_k + τ)))`` (the
compute rate that makes ``S/(S/(eR) + A_k + τ) ≥ t``; ``+∞`` when ``t·(A_k + τ) ≥ S``)::

    R ≥ t·w_1                                                           one node: no averaging
    R ≥ Σ_{k≥2} w_k·c(k, 0)
    R ≥ Σ_{k≥2} w_k·c(k, ρ_q(k))       − M·(1 − y_q)                       each region used
    R ≥ Σ_{k≥2} w_k·c(k, π_{qq'}(k))   − M·(2 − y_q − y_q')                each pair used
    R ≥ Σ_{k≥2} w_k·c(k, σ_{s,m}(k))   − M·(1 − u_{s,m}),  C_s = Σ_m m·u_{s,m},  Σ_m u_{s,m} = y_s
    w_k + (indicators) ≤ (their count)  wherever c = +∞

Because ``c`` grows with τ, these say exactly ``T = A_k + max(active terms)`` and
``S/(S/(eR) + T) ≥ t``.

*allreduce* — ``G = Σ_i m_i g_i x_i`` samples per step, ``τ ≥ (m_i/s_i)·u_i`` with
``x_i ≤ U_i·u_i`` the slowest node's step, ``T ≥ Σ_k w_k·ρ_q(k) − M(1 − y_q)`` and
``T ≥ Σ_k w_k·π_{qq'}(k) − M(2 − y_q − y_q')``::

    G ≥ t·(τ + T)

*local-sgd* — as allreduce with ``T_in`` (region terms) and ``T_wan`` (pair terms)::

    H·G ≥ t·(H·τ + H·T_in + T_wan)

*asgd-ga* — ``X_q ≥ 0`` per region, ``h_q ∈ {0,1}`` home (``Σ h_q = 1``, ``h_q ≤ y_q``)::

    X_q ≤ Σ_{i∈I_q} s_i g_i x_i,   X_q ≤ M·y_q,
    X_q ≤ A·Σ_{i∈I_q} m_i x_i / π_{qq'} + M·(1 − h_{q'})   (q ≠ q'),      Σ_q X_q ≥ t

Sync egress (the mix trains ``t`` samples/s)
--------------------------------------------
*hivemind*: ``b_q ≥ min(C_q, Σx − C_q)`` (one binary each) and
``E_q ≥ 3600·t·(2W/S)·c_{qq'}·b_q − M(1 − y_{q'})`` — the nodes of q send ``2W/n`` to each node
outside q per round; ``C_q(n − C_q)/n ≤ min(C_q, n − C_q)`` makes this an upper bound, exact when
one side has one node. *allreduce*: ``E_q ≥ 3600·t·c_{qq'}·Σ_k w_k v(k)W/(k·m̲) − M(2 − y_q − y_{q'})``
(one ring hop leaves each region per step). *local-sgd*: the same with ``2W/(H·k·m̲)``.
*asgd-ga*: ``E_q ≥ (3600/π_{qq'})·2W·c_{qq'}·(y_q + h_{q'} − 1)`` — a region pushes 2W at most once
per push time ``π_{qq'}`` (an upper bound, exact when the link is the limit).

Objective
---------
``min Σ_i (p_i + d_i)·x_i + Σ_q E_q``  ($/h at the target rate).

Pair constraints are added lazily: the model starts without them (a per-region lower bound, the
nearest other region's term, stands in once two regions are used), and after each solve the pairs
between the regions the solution uses and every other region are added, until no pair among the
regions in use is missing. Constraints of pairs that a
solution does not use are inactive by construction, so the final solution is optimal for the full
model. ``geotrain.solver.semantics`` evaluates the same model for one count vector.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations

from geotrain.errors import InputError
from geotrain.solver import semantics, units
from geotrain.solver.problem import Problem, finite, share
from geotrain.solver.result import Solution, SolveStatus
from geotrain.solver.tables import Tables

BACKENDS = ("CBC", "SCIP")

Terms = list[tuple[object, float]]  # (variable, coefficient)


@dataclass
class TargetModel:
    """Solves ``min $/h s.t. throughput ≥ t`` for one problem, for any number of targets."""

    problem: Problem
    backend: str = "CBC"
    time_limit_s: float = 30.0
    pairs: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.tables = Tables(self.problem)

    def solve(self, target: float) -> Solution:
        """Optimal mix for target ``target`` samples/s (lazily adding pair constraints)."""
        start = time.perf_counter()
        iterations = 0
        deadline = start + self.time_limit_s
        backend = self.backend
        while True:
            iterations += 1
            status, counts, bound = self._solve_once(target, max(1.0, deadline - time.perf_counter()), backend)
            if counts is not None and not self._meets(counts, target):
                # a back end returned a mix that breaks the model (seen with CBC on rare instances):
                # solve this target again with the other back end; if that fails too, report an error
                other = next((b for b in BACKENDS if b != backend), None)
                if backend != self.backend or other is None:
                    return Solution(SolveStatus.ERROR, None, None, None, time.perf_counter() - start, iterations,
                                    target)
                backend = other
                continue
            if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
                return Solution(status, None, None, bound, time.perf_counter() - start, iterations, target)
            used = sorted({c.region for c, n in zip(self.problem.candidates, counts, strict=True) if n})
            missing = {p for p in combinations(used, 2) if p not in self.pairs}
            if not missing:
                cost = semantics.hourly_cost(self.problem, counts, target)
                return Solution(status, counts, cost, bound, time.perf_counter() - start, iterations, target)
            # a star around every region in use: later solutions that keep one of them and move the
            # others find their exact pair terms already in the model
            self.pairs |= missing | {tuple(sorted((q, other))) for q in used for other in self.tables.regions
                                     if other != q}

    def _meets(self, counts: tuple[int, ...], target: float) -> bool:
        """Whether ``counts`` keeps the limits and reaches ``target`` by :mod:`semantics` (pairs whose
        terms are not in the model yet are left to the lazy loop)."""
        problem = self.problem
        if not semantics.structurally_feasible(problem, counts):
            return False
        used = sorted({c.region for c, n in zip(problem.candidates, counts, strict=True) if n})
        if any(pair not in self.pairs for pair in combinations(used, 2)):
            return True
        rate = semantics.rate_within_budget(problem, counts)
        return rate >= target * (1 - 1e-6)

    def _solve_once(self, target: float, time_limit_s: float,
                    backend: str) -> tuple[SolveStatus, tuple[int, ...] | None, float | None]:
        from ortools.linear_solver import pywraplp

        solver = pywraplp.Solver.CreateSolver(backend)
        if solver is None:
            raise InputError(f"--backend: this OR-Tools build has no {backend} back end; use one of "
                             f"{', '.join(b for b in BACKENDS if b != backend)}")
        solver.SetTimeLimit(int(time_limit_s * 1000))
        b = _Builder(self.tables, solver, target, self.pairs)
        b.build()
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


class _Builder:
    """Adds the variables and constraints of the docstring's model to one pywraplp solver.

    Rows are written with the solver's low-level API (a constraint and its coefficients), which is
    many times faster than building Python expressions for rows of thousands of terms.
    """

    def __init__(self, tables: Tables, solver, target: float, pairs: set[tuple[str, str]]) -> None:  # noqa: ANN001
        self.tb, self.s, self.t, self.pairs = tables, solver, target, pairs
        self.p = tables.p
        self.o = tables.o
        self.cands = tables.p.candidates
        self.N = tables.N
        self.inf = solver.infinity()
        self.x: list = []

    def row(self, terms: Terms, lb: float = float("-inf"), ub: float = float("inf")) -> None:
        """lb ≤ Σ coef·var ≤ ub (coefficients of a repeated variable add up)."""
        lb = -self.inf if lb == float("-inf") else lb
        ub = self.inf if ub == float("inf") else ub
        c = self.s.Constraint(lb, ub)
        merged: dict = {}
        for var, coef in terms:
            merged[var] = merged.get(var, 0.0) + coef
        for var, coef in merged.items():
            if coef:
                c.SetCoefficient(var, coef)

    def build(self) -> None:
        s, tb, cands, N = self.s, self.tb, self.cands, self.N
        self.x = [s.IntVar(c.minimum, c.capacity, f"x{i}") for i, c in enumerate(cands)]
        self.w = {k: s.BoolVar(f"w{k}") for k in tb.ks}
        self.row([(w, 1.0) for w in self.w.values()], 1, 1)
        self.total = s.NumVar(0, N, "n")
        self.row([(self.total, 1.0)] + [(x, -1.0) for x in self.x], 0, 0)
        self.row([(self.total, 1.0)] + [(w, -k) for k, w in self.w.items()], 0, 0)
        self.y = {q: s.BoolVar(f"y[{q}]") for q in tb.regions}
        for q, idx in tb.members.items():
            members = [(self.x[i], 1.0) for i in idx]
            self.row(members + [(self.y[q], -tb.region_cap[q])], ub=0)
            self.row(members + [(self.y[q], -1.0)], lb=0)
        # multi = 1 when two or more regions are used: it switches on the per-region lower bounds on
        # pair terms (``Tables.nearest``) so that the model prices multi-region mixes before their
        # exact pair constraints have been added
        self.multi = None
        if len(tb.regions) > 1:
            self.multi = s.BoolVar("multi")
            self.row([(y, 1.0) for y in self.y.values()] + [(self.multi, -len(tb.regions))], ub=1)
        limits = self.p.limits
        if limits.max_regions is not None:
            self.row([(y, 1.0) for y in self.y.values()], ub=limits.max_regions)
        for idx in tb.zones.values():
            in_zone = [(self.x[i], 1.0) for i in idx]
            if limits.max_nodes_per_zone is not None:
                self.row(in_zone, ub=limits.max_nodes_per_zone)
            if limits.max_accelerators_per_zone is not None:
                self.row([(self.x[i], cands[i].accelerators) for i in idx], ub=limits.max_accelerators_per_zone)
            if limits.max_zone_share is not None:
                self.row(in_zone + [(self.total, -limits.max_zone_share)], ub=0)
        if limits.max_spot_share is not None:
            self.row([(self.x[i], 1.0) for i, c in enumerate(cands) if c.market == "spot"]
                     + [(self.total, -limits.max_spot_share)], ub=0)
        for scope, quota in limits.quotas:
            self.row([(self.x[i], c.accelerators) for i, c in enumerate(cands) if scope in (c.cloud, c.region)],
                     ub=quota)
        for pool, most in limits.pool_caps:
            self.row([(self.x[i], c.accelerators) for i, c in enumerate(cands) if c.pool == pool], ub=most)

        self.E = {q: s.NumVar(0, self.inf, f"E[{q}]") for q in tb.regions}
        node_cost = s.NumVar(0, self.inf, "node_cost")
        self.row([(node_cost, 1.0)] + [(self.x[i], -units.to_model_usd(c.price_usd_per_hour + c.data_usd_per_hour))
                                       for i, c in enumerate(cands)], 0, 0)
        cost: Terms = [(node_cost, 1.0)] + [(e, 1.0) for e in self.E.values()]
        {"hivemind": self._hivemind, "allreduce": self._allreduce, "local-sgd": self._local_sgd,
         "asgd-ga": self._asgd}[self.o.strategy]()
        if limits.budget_usd_per_hour is not None:
            self.row(cost, ub=units.to_model_usd(limits.budget_usd_per_hour))
        objective = s.Objective()
        for var, coef in cost:
            objective.SetCoefficient(var, coef)
        objective.SetMinimization()

    # -- helpers ----------------------------------------------------------------------------

    def used_indicator(self, regions: list[str], name: str):  # noqa: ANN201
        """y_q for one region; for several, Y with Y ≥ y_q each (Y ∈ [0, 1])."""
        if len(regions) == 1:
            return self.y[regions[0]]
        var = self.s.NumVar(0, 1, name)
        for q in regions:
            self.row([(var, 1.0), (self.y[q], -1.0)], lb=0)
        return var

    def require(self, lhs: Terms, table: dict[int, float], indicators: list, n_on: int) -> None:
        """lhs ≥ Σ_k w_k·table[k] when all ``indicators`` are 1 (big-M otherwise; ∞ entries forbidden)."""
        finite_values = [v for v in table.values() if finite(v)]
        for k, v in table.items():
            if not finite(v):
                self.row([(self.w[k], 1.0)] + [(ind, 1.0) for ind in indicators], ub=n_on)
        if not finite_values or not max(finite_values):
            return
        big = max(finite_values)
        # lhs − Σ w_k v_k − big·Σ ind ≥ −big·n_on
        self.row(lhs + [(self.w[k], -v) for k, v in table.items() if finite(v) and v]
                 + [(ind, -big) for ind in indicators], lb=-big * n_on)

    # -- strategies -------------------------------------------------------------------------

    def _need(self, k: int, tau: float) -> float:
        """c(k, τ): the good compute rate R hivemind needs with k nodes and extra time τ."""
        o, t = self.o, self.t
        slack = o.samples_per_round - t * (self.tb.overhead[k] + tau)
        return o.samples_per_round * t / (o.efficiency * slack) if slack > 0 else float("inf")

    def _hivemind(self) -> None:
        s, o, tb, cands = self.s, self.o, self.tb, self.cands
        model = units.to_model_rate
        R = s.NumVar(0, self.inf, "R")
        self.row([(R, 1.0)] + [(self.x[i], -model(c.rate * c.goodput)) for i, c in enumerate(cands)], 0, 0)
        rate: Terms = [(R, 1.0)]
        self.row(rate + [(self.w[1], -model(self.t))], lb=0)
        ks = range(2, self.N + 1)
        need = lambda tau_of: {k: model(self._need(k, tau_of(k))) for k in ks}  # noqa: E731
        self.require(rate, need(lambda k: 0.0), [], 0)
        for n, (members, table) in enumerate(tb.region_groups):
            used = self.used_indicator(members, f"Y{n}")
            self.require(rate, need(lambda k, table=table: table[k]), [used], 1)
        for a, b in sorted(self.pairs):
            table = tb.pair(a, b)
            self.require(rate, need(lambda k, table=table: table[k]), [self.y[a], self.y[b]], 2)
        if self.multi is not None:
            for q in tb.regions:
                table = tb.nearest[q]
                self.require(rate, need(lambda k, table=table: table[k]), [self.y[q], self.multi], 2)
        for q in tb.sites:
            cap = tb.region_cap[q]
            u = {m: s.BoolVar(f"u[{q},{m}]") for m in range(1, cap + 1)}
            self.row([(v, 1.0) for v in u.values()] + [(self.y[q], -1.0)], 0, 0)
            self.row([(self.x[i], 1.0) for i in tb.members[q]] + [(v, -m) for m, v in u.items()], 0, 0)
            for m, v in u.items():
                table = tb.site(q, m)
                self.require(rate, {k: model(self._need(k, table[k])) if k > m else 0.0 for k in ks}, [v], 1)
        coefficient = 3600 * self.t * 2 * o.payload_bytes / o.samples_per_round
        self._pair_egress(per_round=self._balance, coefficient=coefficient)

    def _balance(self, q: str):  # noqa: ANN202
        """b_q ≥ min(C_q, Σx − C_q), with one binary."""
        s, N = self.s, self.N
        b = s.NumVar(0, N, f"b[{q}]")
        z = s.BoolVar(f"z[{q}]")
        members = [(self.x[i], 1.0) for i in self.tb.members[q]]
        self.row([(b, 1.0)] + [(v, -c) for v, c in members] + [(z, N)], lb=0)  # b ≥ C_q − N·z
        self.row([(b, 1.0), (self.total, -1.0)] + members + [(z, -N)], lb=-N)  # b ≥ n − C_q − N(1−z)
        return b

    def _pair_egress(self, *, coefficient: float, per_round: Callable | None = None,
                     per_sample: Callable[[int], float] | None = None) -> None:
        """E_q ≥ coefficient · price(q, q') · volume for every ordered pair in use."""
        o = self.o
        volumes = {}
        if per_round is not None:
            regions = self.tb.regions if self.multi is not None else sorted({q for pair in self.pairs for q in pair})
            volumes = {q: per_round(q) for q in regions}
        if self.multi is not None:  # the cheapest price to any other region, once two regions are used
            for q in self.tb.regions:
                price = units.to_model_usd(coefficient * self.tb.cheapest[q])
                if price <= 0:
                    continue
                if per_round is not None:
                    big = price * self.N
                    self.row([(self.E[q], 1.0), (volumes[q], -price), (self.y[q], -big), (self.multi, -big)],
                             lb=-2 * big)
                else:
                    table = {k: per_sample(k) for k in self.tb.ks}
                    big = price * max(table.values())
                    self.row([(self.E[q], 1.0)] + [(self.w[k], -price * v) for k, v in table.items()]
                             + [(self.y[q], -big), (self.multi, -big)], lb=-2 * big)
        for a, b in sorted(self.pairs):
            for src, dst in ((a, b), (b, a)):
                price = units.to_model_usd(coefficient * o.usd_per_byte(src, dst))
                if price <= 0:
                    continue
                if per_round is not None:
                    big = price * self.N  # E ≥ price·b − big·(1 − y_dst)
                    self.row([(self.E[src], 1.0), (volumes[src], -price), (self.y[dst], -big)], lb=-big)
                else:
                    table = {k: per_sample(k) for k in self.tb.ks}
                    big = price * max(table.values())  # E ≥ price·Σ w_k v_k − big·(2 − y − y)
                    self.row([(self.E[src], 1.0)] + [(self.w[k], -price * v) for k, v in table.items()]
                             + [(self.y[src], -big), (self.y[dst], -big)], lb=-2 * big)

    def _step_time(self) -> Terms:
        """τ = the slowest step in use, as one-hot levels over the distinct step times."""
        s, cands = self.s, self.cands
        level = {v: s.BoolVar(f"level{j}") for j, v in enumerate(self.tb.steps)}
        self.row([(b, 1.0) for b in level.values()], 1, 1)
        for i, c in enumerate(cands):
            own = c.samples_per_step / c.rate
            self.row([(self.x[i], 1.0)] + [(b, -c.capacity) for v, b in level.items() if v >= own], ub=0)
        return [(b, v) for v, b in level.items()]

    def _max_term(self, name: str, terms: list[tuple[dict[int, float], list, int]]):  # noqa: ANN202
        top = max((max(table.values()) for table, _, _ in terms), default=0.0)
        var = self.s.NumVar(0, max(top, 0.0), name)
        for table, indicators, n_on in terms:
            big = max(table.values())
            # var ≥ Σ w_k v_k − big·(n_on − Σ ind)
            self.row([(var, 1.0)] + [(self.w[k], -v) for k, v in table.items() if v]
                     + [(ind, -big) for ind in indicators], lb=-big * n_on)
        return var

    def _good_samples(self) -> Terms:
        return [(self.x[i], c.samples_per_step * c.goodput) for i, c in enumerate(self.cands)]

    def _ring_terms(self) -> tuple[list, list]:
        tb = self.tb
        inside = [(table, [self.used_indicator(members, f"Yr{n}")], 1)
                  for n, (members, table) in enumerate(tb.region_groups)]
        between = [({k: v if k > 1 else 0.0 for k, v in tb.pair(a, b).items()}, [self.y[a], self.y[b]], 2)
                   for a, b in sorted(self.pairs)]
        if self.multi is not None:
            between += [({k: v if k > 1 else 0.0 for k, v in tb.nearest[q].items()}, [self.y[q], self.multi], 2)
                        for q in tb.regions]
        return inside, between

    def _allreduce(self) -> None:
        o, t = self.o, self.t
        tau = self._step_time()
        inside, between = self._ring_terms()
        T = self._max_term("T", inside + between)
        # G − t·τ − t·T ≥ 0
        self.row(self._good_samples() + [(v, -t * c) for v, c in tau] + [(T, -t)], lb=0)
        m_min = self.p.min_samples_per_step
        self._pair_egress(coefficient=3600 * t, per_sample=lambda k: share(k) * o.payload_bytes / (k * m_min))

    def _local_sgd(self) -> None:
        o, t = self.o, self.t
        H = o.local_steps
        tau = self._step_time()
        inside, between = self._ring_terms()
        t_in = self._max_term("T_in", inside)
        t_wan = self._max_term("T_wan", between)
        # H·G − t·H·τ − t·H·T_in − t·T_wan ≥ 0
        self.row([(v, H * c) for v, c in self._good_samples()] + [(v, -t * H * c) for v, c in tau]
                 + [(t_in, -t * H), (t_wan, -t)], lb=0)
        m_min = self.p.min_samples_per_step
        self._pair_egress(coefficient=3600 * t, per_sample=lambda k: 2 * o.payload_bytes / (H * k * m_min))

    def _asgd(self) -> None:
        s, o, tb, cands = self.s, self.o, self.tb, self.cands
        A = o.accumulation_steps
        model = units.to_model_rate
        X, h = {}, {}
        for q, idx in tb.members.items():
            top = sum(model(cands[i].rate * cands[i].goodput) * min(cands[i].capacity, self.N) for i in idx)
            X[q] = s.NumVar(0, top, f"X[{q}]")
            h[q] = s.BoolVar(f"h[{q}]")
            self.row([(X[q], 1.0)] + [(self.x[i], -model(cands[i].rate * cands[i].goodput)) for i in idx], ub=0)
            self.row([(X[q], 1.0), (self.y[q], -top)], ub=0)
            self.row([(h[q], 1.0), (self.y[q], -1.0)], ub=0)
        self.row([(v, 1.0) for v in h.values()], 1, 1)
        self.row([(v, 1.0) for v in X.values()], lb=model(self.t))
        for a, b in sorted(self.pairs):
            for src, home in ((a, b), (b, a)):
                top = X[src].ub()
                push = o.pair_s(src, home, 0)
                # X_src ≤ (A/push)·Σ m_i x_i + top·(1 − h_home)
                self.row([(X[src], 1.0), (h[home], top)]
                         + [(self.x[i], -model(A / push) * cands[i].samples_per_step) for i in tb.members[src]],
                         ub=top)
                # a region pushes at most once per push time: 2W per push, priced at the sender
                price = units.to_model_usd(3600 / push * 2 * o.payload_bytes * o.usd_per_byte(src, home))
                if price > 0:
                    self.row([(self.E[src], 1.0), (self.y[src], -price), (h[home], -price)], lb=-price)
