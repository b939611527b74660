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

Pair constraints are added lazily: the model starts without them, and after each solve the pairs
among the regions the solution uses are added until none is missing. Constraints of pairs that a
solution does not use are inactive by construction, so the final solution is optimal for the full
model. ``geotrain.solver.semantics`` evaluates the same model for one count vector.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import combinations

from geotrain.solver import semantics, units
from geotrain.solver.problem import Problem, finite, share
from geotrain.solver.result import Solution, SolveStatus

BACKENDS = ("SCIP", "CBC")


@dataclass
class TargetModel:
    """Solves ``min $/h s.t. throughput ≥ t`` for one problem, for any number of targets."""

    problem: Problem
    backend: str = "SCIP"
    time_limit_s: float = 30.0
    pairs: set[tuple[str, str]] = field(default_factory=set)

    def solve(self, target: float) -> Solution:
        """Optimal mix for target ``target`` samples/s (lazily adding pair constraints)."""
        start = time.perf_counter()
        iterations = 0
        while True:
            iterations += 1
            status, counts, bound = self._solve_once(target)
            if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
                return Solution(status, None, None, bound, time.perf_counter() - start, iterations, target)
            used = sorted({c.region for c, n in zip(self.problem.candidates, counts, strict=True) if n})
            missing = {p for p in combinations(used, 2) if p not in self.pairs}
            if not missing:
                cost = semantics.hourly_cost(self.problem, counts, target)
                return Solution(status, counts, cost, bound, time.perf_counter() - start, iterations, target)
            self.pairs |= missing

    # -- building ---------------------------------------------------------------------------

    def _solve_once(self, target: float) -> tuple[SolveStatus, tuple[int, ...] | None, float | None]:
        from ortools.linear_solver import pywraplp

        p = self.problem
        solver = pywraplp.Solver.CreateSolver(self.backend)
        if solver is None:
            raise RuntimeError(f"OR-Tools has no {self.backend} back end here")
        solver.SetTimeLimit(int(self.time_limit_s * 1000))
        b = _Builder(p, solver, target, self.pairs)
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
    """Adds the variables and constraints of the docstring's model to one pywraplp solver."""

    def __init__(self, problem: Problem, solver, target: float, pairs: set[tuple[str, str]]) -> None:  # noqa: ANN001
        self.p, self.s, self.t, self.pairs = problem, solver, target, pairs
        self.o = problem.oracle
        self.cands = problem.candidates
        self.N = problem.node_cap
        self.regions = problem.regions
        self.x: list = []

    def build(self) -> None:
        s, p, cands, N = self.s, self.p, self.cands, self.N
        inf = s.infinity()
        self.x = [s.IntVar(c.minimum, c.capacity, f"x{i}") for i, c in enumerate(cands)]
        self.w = {k: s.BoolVar(f"w{k}") for k in range(1, N + 1)}
        s.Add(sum(self.w.values()) == 1)
        self.total = sum(self.x)
        s.Add(self.total == sum(k * w for k, w in self.w.items()))
        self.members = {q: [i for i, c in enumerate(cands) if c.region == q] for q in self.regions}
        self.y = {q: s.BoolVar(f"y[{q}]") for q in self.regions}
        self.C = {}
        for q, idx in self.members.items():
            cap = min(N, sum(cands[i].capacity for i in idx))
            self.C[q] = sum(self.x[i] for i in idx)
            s.Add(self.C[q] <= cap * self.y[q])
            s.Add(self.C[q] >= self.y[q])
        limits = p.limits
        if limits.max_regions is not None:
            s.Add(sum(self.y.values()) <= limits.max_regions)
        zones: dict[str, list[int]] = {}
        for i, c in enumerate(cands):
            zones.setdefault(c.zone, []).append(i)
        for idx in zones.values():
            in_zone = sum(self.x[i] for i in idx)
            if limits.max_nodes_per_zone is not None:
                s.Add(in_zone <= limits.max_nodes_per_zone)
            if limits.max_zone_share is not None:
                s.Add(in_zone <= limits.max_zone_share * self.total)
        if limits.max_spot_share is not None:
            s.Add(sum(self.x[i] for i, c in enumerate(cands) if c.market == "spot") <= limits.max_spot_share * self.total)
        for scope, quota in limits.quotas:
            s.Add(sum(c.accelerators * self.x[i] for i, c in enumerate(cands) if scope in (c.cloud, c.region)) <= quota)

        self.E = {q: s.NumVar(0, inf, f"E[{q}]") for q in self.regions}
        node_cost = sum(units.to_model_usd(c.price_usd_per_hour + c.data_usd_per_hour) * self.x[i]
                        for i, c in enumerate(cands))
        cost = node_cost + sum(self.E.values())
        {"hivemind": self._hivemind, "allreduce": self._allreduce, "local-sgd": self._local_sgd,
         "asgd-ga": self._asgd}[self.o.strategy]()
        if limits.budget_usd_per_hour is not None:
            s.Add(cost <= units.to_model_usd(limits.budget_usd_per_hour))
        s.Minimize(cost)

    # -- strategies -------------------------------------------------------------------------

    def _need(self, k: int, tau: float) -> float:
        """c(k, τ): the good compute rate R hivemind needs with k nodes and extra time τ."""
        o, t = self.o, self.t
        slack = o.samples_per_round - t * (o.overhead_s(k) + tau)
        return o.samples_per_round * t / (o.efficiency * slack) if slack > 0 else float("inf")

    def _require(self, lhs, table: dict[int, float], indicators: list, n_on: int) -> None:  # noqa: ANN001
        """lhs ≥ Σ_k w_k·table[k] when all ``indicators`` are 1 (big-M otherwise; ∞ entries forbidden)."""
        finite_values = [v for v in table.values() if finite(v)]
        for k, v in table.items():
            if not finite(v):
                self.s.Add(self.w[k] + sum(indicators) <= n_on)
        if not finite_values:
            return
        big = max(finite_values)
        rhs = sum(self.w[k] * v for k, v in table.items() if finite(v) and v)
        self.s.Add(lhs >= rhs - big * (n_on - sum(indicators)))

    def _hivemind(self) -> None:
        s, o, cands, N = self.s, self.o, self.cands, self.N
        rate = sum(units.to_model_rate(c.rate * c.goodput) * self.x[i] for i, c in enumerate(cands))
        model = units.to_model_rate
        s.Add(rate >= model(self.t) * self.w[1])
        ks = range(2, N + 1)
        self._require(rate, {k: model(self._need(k, 0.0)) for k in ks}, [], 0)
        for q in self.regions:
            self._require(rate, {k: model(self._need(k, o.region_s(q, k))) for k in ks}, [self.y[q]], 1)
        for a, b in sorted(self.pairs):
            self._require(rate, {k: model(self._need(k, o.pair_s(a, b, k))) for k in ks}, [self.y[a], self.y[b]], 2)
        for q, idx in self.members.items():
            cloud, _, site = q.partition("/")
            if cloud != "onprem" or o.site_s(site, 1, 2) is None:
                continue
            cap = min(N, sum(cands[i].capacity for i in idx))
            u = {m: s.BoolVar(f"u[{q},{m}]") for m in range(1, cap + 1)}
            s.Add(sum(u.values()) == self.y[q])
            s.Add(self.C[q] == sum(m * v for m, v in u.items()))
            for m, v in u.items():
                table = {k: model(self._need(k, o.site_s(site, m, k) or 0.0)) if k > m else 0.0 for k in ks}
                self._require(rate, table, [v], 1)
        self._pair_egress(lambda q: self._balance(q), 3600 * self.t * 2 * o.payload_bytes / o.samples_per_round,
                          per_round=True)

    def _balance(self, q: str):  # noqa: ANN202
        """b_q ≥ min(C_q, Σx − C_q), with one binary."""
        s, N = self.s, self.N
        b = s.NumVar(0, N, f"b[{q}]")
        z = s.BoolVar(f"z[{q}]")
        s.Add(b >= self.C[q] - N * z)
        s.Add(b >= (self.total - self.C[q]) - N * (1 - z))
        return b

    def _pair_egress(self, volume, coefficient: float, *, per_round: bool) -> None:  # noqa: ANN001
        """E_q ≥ coefficient · price(q, q') · volume(q) for every ordered pair in use."""
        s, o = self.s, self.o
        volumes = {q: volume(q) for q in self.regions} if per_round else {}
        for a, b in sorted(self.pairs):
            for src, dst in ((a, b), (b, a)):
                price = units.to_model_usd(coefficient * o.usd_per_byte(src, dst))
                if price <= 0:
                    continue
                if per_round:
                    big = price * self.N
                    s.Add(self.E[src] >= price * volumes[src] - big * (1 - self.y[dst]))
                else:
                    table = volume(src)  # {k: per-sample bytes factor}
                    big = price * max(table.values())
                    s.Add(self.E[src] >= price * sum(self.w[k] * v for k, v in table.items())
                          - big * (2 - self.y[src] - self.y[dst]))

    def _step_time(self):  # noqa: ANN202
        """τ ≥ m_i/s_i for every candidate in use: the slowest node's step."""
        s, cands = self.s, self.cands
        slowest = max(c.samples_per_step / c.rate for c in cands)
        tau = s.NumVar(0, slowest, "tau")
        for i, c in enumerate(cands):
            used = s.BoolVar(f"used{i}")
            s.Add(self.x[i] <= c.capacity * used)
            s.Add(tau >= (c.samples_per_step / c.rate) * used)
        return tau

    def _max_term(self, name: str, terms: list[tuple[dict[int, float], list, int]]):  # noqa: ANN202
        s = self.s
        top = max((max(table.values()) for table, _, _ in terms), default=0.0)
        var = s.NumVar(0, max(top, 0.0), name)
        for table, indicators, n_on in terms:
            big = max(table.values())
            s.Add(var >= sum(self.w[k] * v for k, v in table.items() if v) - big * (n_on - sum(indicators)))
        return var

    def _good_samples(self):  # noqa: ANN202
        return sum(c.samples_per_step * c.goodput * self.x[i] for i, c in enumerate(self.cands))

    def _ring_terms(self) -> tuple[list, list]:
        o, ks = self.o, range(1, self.N + 1)
        inside = [({k: o.region_s(q, k) if k > 1 else 0.0 for k in ks}, [self.y[q]], 1) for q in self.regions]
        between = [({k: o.pair_s(a, b, k) if k > 1 else 0.0 for k in ks}, [self.y[a], self.y[b]], 2)
                   for a, b in sorted(self.pairs)]
        return inside, between

    def _allreduce(self) -> None:
        o = self.o
        tau = self._step_time()
        inside, between = self._ring_terms()
        T = self._max_term("T", inside + between)
        self.s.Add(self._good_samples() >= self.t * (tau + T))
        m_min = self.p.min_samples_per_step
        table = lambda _q: {k: share(k) * o.payload_bytes / (k * m_min) for k in range(1, self.N + 1)}  # noqa: E731
        self._pair_egress(table, 3600 * self.t, per_round=False)

    def _local_sgd(self) -> None:
        o = self.o
        H = o.local_steps
        tau = self._step_time()
        inside, between = self._ring_terms()
        t_in = self._max_term("T_in", inside)
        t_wan = self._max_term("T_wan", between)
        self.s.Add(H * self._good_samples() >= self.t * (H * tau + H * t_in + t_wan))
        m_min = self.p.min_samples_per_step
        table = lambda _q: {k: 2 * o.payload_bytes / (H * k * m_min) for k in range(1, self.N + 1)}  # noqa: E731
        self._pair_egress(table, 3600 * self.t, per_round=False)

    def _asgd(self) -> None:
        s, o, cands = self.s, self.o, self.cands
        A = o.accumulation_steps
        model = units.to_model_rate
        X, h = {}, {}
        for q, idx in self.members.items():
            compute = sum(model(cands[i].rate * cands[i].goodput) * self.x[i] for i in idx)
            top = sum(model(cands[i].rate * cands[i].goodput) * min(cands[i].capacity, self.N) for i in idx)
            X[q] = s.NumVar(0, top, f"X[{q}]")
            h[q] = s.BoolVar(f"h[{q}]")
            s.Add(X[q] <= compute)
            s.Add(X[q] <= top * self.y[q])
            s.Add(h[q] <= self.y[q])
        s.Add(sum(h.values()) == 1)
        s.Add(sum(X.values()) >= model(self.t))
        for a, b in sorted(self.pairs):
            for src, home in ((a, b), (b, a)):
                top = X[src].ub()
                push = o.pair_s(src, home, 0)
                per_step = sum(cands[i].samples_per_step * self.x[i] for i in self.members[src])
                s.Add(X[src] <= model(A / push) * per_step + top * (1 - h[home]))
                # a region pushes at most once per push time: 2W per push, priced at the sender
                price = units.to_model_usd(3600 / push * 2 * o.payload_bytes * o.usd_per_byte(src, home))
                if price > 0:
                    s.Add(self.E[src] >= price * (self.y[src] + h[home] - 1))
