"""The rows of the model in ``geotrain.solver.model`` (its docstring writes them in math), added to
one pywraplp solver, and the lazy rows the model has gained so far."""

from __future__ import annotations

from dataclasses import dataclass, field

from geotrain.solver import semantics, units
from geotrain.solver.problem import finite, share
from geotrain.solver.model.egress import EgressRows
from geotrain.solver.tables import Tables

Terms = list[tuple[object, float]]  # (variable, coefficient)


@dataclass
class Lazy:
    """Rows the model has gained so far (valid for every target)."""

    pairs: set[tuple[str, str]] = field(default_factory=set)  # places (regions' lead places for local-sgd/asgd-ga)
    hops: set[tuple[str, str]] = field(default_factory=set)  # directed next-place egress rows
    counted: set[str] = field(default_factory=set)  # places (hivemind) or lead places (local-sgd) with u_{.,m}


class Builder(EgressRows):
    """Adds the variables and constraints of the docstring's model to one pywraplp solver.

    Rows are written with the solver's low-level API (a constraint and its coefficients), which is
    many times faster than building Python expressions for rows of thousands of terms.
    """

    def __init__(self, tables: Tables, solver, target: float, lazy: Lazy) -> None:  # noqa: ANN001
        self.tb, self.s, self.t, self.lazy = tables, solver, target, lazy
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
        self.total = s.NumVar(self.p.limits.min_nodes or 0, N, "n")
        self.row([(self.total, 1.0)] + [(x, -1.0) for x in self.x], 0, 0)
        self.row([(self.total, 1.0)] + [(w, -k) for k, w in self.w.items()], 0, 0)
        self.fewest = self.fewest_nodes()
        if self.o.strategy == "allreduce":
            self.fewest, self.node_rates = self._allreduce_fewest()
        below = [w for k, w in self.w.items() if k < self.fewest]
        if below:  # no mix of fewer nodes reaches t (``fewest_nodes``)
            self.row([(w, 1.0) for w in below], ub=0)
        self.y = {p: s.BoolVar(f"y[{p}]") for p in tb.places}
        for p, idx in tb.members.items():
            members = self.count(p)
            self.row(members + [(self.y[p], -tb.place_cap[p])], ub=0)
            self.row(members + [(self.y[p], -1.0)], lb=0)
        self.Y = {}
        for r, places in tb.region_places.items():
            if len(places) == 1:
                self.Y[r] = self.y[places[0]]
                continue
            self.Y[r] = s.BoolVar(f"Y[{r}]")
            for p in places:
                self.row([(self.Y[r], 1.0), (self.y[p], -1.0)], lb=0)
            self.row([(self.Y[r], 1.0)] + [(self.y[p], -1.0) for p in places], ub=0)
        # multi = 1 when two or more places are used: it switches on the per-place lower bounds on pair
        # terms (``Tables.nearest``) so that the model prices mixes before their exact rows are added
        self.multi = None
        if len(tb.places) > 1:
            self.multi = s.BoolVar("multi")
            self.row([(y, 1.0) for y in self.y.values()] + [(self.multi, -len(tb.places))], ub=1)
        self.multi_region = None
        if len(tb.regions) > 1:
            self.multi_region = s.BoolVar("multi_region")
            self.row([(y, 1.0) for y in self.Y.values()] + [(self.multi_region, -len(tb.regions))], ub=1)
        limits = self.p.limits
        if limits.max_regions is not None:
            self.row([(y, 1.0) for y in self.Y.values()], ub=limits.max_regions)
        for p in tb.places:
            in_zone = self.count(p)
            if limits.max_nodes_per_zone is not None:
                self.row(in_zone, ub=limits.max_nodes_per_zone)
            if limits.max_accelerators_per_zone is not None:
                self.row([(self.x[i], cands[i].accelerators) for i in tb.members[p]],
                         ub=limits.max_accelerators_per_zone)
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

        self.E = {p: s.NumVar(0, self.inf, f"E[{p}]") for p in tb.places}
        node_cost = s.NumVar(0, self.inf, "node_cost")
        self.row([(node_cost, 1.0)] + [(self.x[i], -units.to_model_usd(c.price_usd_per_hour + c.data_usd_per_hour))
                                       for i, c in enumerate(cands)], 0, 0)
        self.extra_cost: Terms = []
        {"hivemind": self._hivemind, "allreduce": self._allreduce, "local-sgd": self._local_sgd, "ma": self._local_sgd,
         "asgd-ga": self._asgd}[self.o.strategy]()
        cost: Terms = [(node_cost, 1.0)] + [(e, 1.0) for e in self.E.values()] + self.extra_cost
        if limits.budget_usd_per_hour is not None:
            self.row(cost, ub=units.to_model_usd(limits.budget_usd_per_hour))
        self.cost = cost
        objective = s.Objective()
        for var, coef in cost:
            objective.SetCoefficient(var, coef)
        objective.SetMinimization()

    # -- helpers ----------------------------------------------------------------------------

    def count(self, p: str) -> Terms:
        """C_p as terms."""
        return [(self.x[i], 1.0) for i in self.tb.members[p]]

    def region_count(self, r: str) -> Terms:
        return [(self.x[i], 1.0) for p in self.tb.region_places[r] for i in self.tb.members[p]]

    def used_indicator(self, places: list[str], name: str):  # noqa: ANN201
        """y_p for one place; for several, Y with Y ≥ y_p each (Y ∈ [0, 1])."""
        if len(places) == 1:
            return self.y[places[0]]
        var = self.s.NumVar(0, 1, name)
        for p in places:
            self.row([(var, 1.0), (self.y[p], -1.0)], lb=0)
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

    def several(self, r: str):  # noqa: ANN201
        """z_r ∈ {0,1}, 1 when region r holds two or more nodes: C_r ≤ 1 + (U_r − 1)·z_r."""
        z = self.s.BoolVar(f"z[{r}]")
        self.row(self.region_count(r) + [(z, -(self.tb.region_cap[r] - 1))], ub=1)
        return z

    def counts_one_hot(self, cap: int, count: Terms, used, name: str) -> dict[int, object]:  # noqa: ANN001
        """u_m ∈ {0,1}, m = 1..cap: the count is m (Σ u_m = used, Σ m·u_m = count)."""
        u = {m: self.s.BoolVar(f"{name}[{m}]") for m in range(1, cap + 1)}
        self.row([(v, 1.0) for v in u.values()] + [(used, -1.0)], 0, 0)
        self.row(count + [(v, -m) for m, v in u.items()], 0, 0)
        return u

    def cutoff(self, usd_per_hour: float) -> None:
        """Only mixes the model prices below ``usd_per_hour``: valid because the model never prices a
        mix above its referee, so nothing the referee prices below it is cut off."""
        self.row(self.cost, ub=units.to_model_usd(usd_per_hour))

    def no_good(self, counts: tuple[int, ...]) -> None:
        """Cut off one count vector: some candidate's count differs from it."""
        s, x = self.s, self.x
        terms: Terms = [(x[i], 1.0) for i, a in enumerate(counts) if a == 0]
        for i, a in enumerate(counts):
            if a == 0:
                continue
            big = self.cands[i].capacity + 1  # keeps the unchosen side slack for every x in 0..cap
            d = s.NumVar(0, 1, "")
            up = s.BoolVar("")
            # d ≤ x − a + M·(1 − up),  d ≤ a − x + M·up  (d can be 1 iff x ≠ a)
            self.row([(d, 1.0), (x[i], -1.0), (up, big)], ub=big - a)
            self.row([(d, 1.0), (x[i], 1.0), (up, -big)], ub=a)
            terms.append((d, 1.0))
        self.row(terms, lb=1)

    # -- strategies -------------------------------------------------------------------------

    def _need(self, k: int, tau: float) -> float:
        """c(k, τ): the good compute rate R hivemind needs with k nodes and extra time τ."""
        o, t = self.o, self.t
        slack = o.samples_per_round - t * (self.tb.overhead[k] + tau)
        return o.samples_per_round * t / slack if slack > 0 else float("inf")

    def _hivemind(self) -> None:
        s, tb, cands = self.s, self.tb, self.cands
        model = units.to_model_rate
        R = s.NumVar(0, self.inf, "R")
        self.row([(R, 1.0)] + [(self.x[i], -model(c.rate * c.goodput * c.step_efficiency))
                               for i, c in enumerate(cands)], 0, 0)
        rate: Terms = [(R, 1.0)]
        # one node alone trains at its full rate (no per-step cost of the protocol)
        self.row([(self.x[i], model(c.rate * c.goodput)) for i, c in enumerate(cands)]
                 + [(self.w[1], -model(self.t))], lb=0)
        ks = range(2, self.N + 1)
        need = lambda tau_of: {k: model(self._need(k, tau_of(k))) for k in ks}  # noqa: E731
        self.require(rate, need(lambda k: 0.0), [], 0)
        for n, (members, table) in enumerate(tb.place_groups):
            used = self.used_indicator(members, f"Yp{n}")
            self.require(rate, need(lambda k, table=table: table[k]), [used], 1)
        for a, b in sorted(self.lazy.pairs):
            table = tb.pair(a, b)
            self.require(rate, need(lambda k, table=table: table[k]), [self.y[a], self.y[b]], 2)
        # a node on a slower host (h_i above the fastest's) makes the overhead h_i·A_k: z_L = 1 once a
        # node of host factor ≥ L is used
        fastest = min(c.host_factor for c in cands)
        for n, level in enumerate(sorted({c.host_factor for c in cands if c.host_factor > fastest})):
            z = s.BoolVar(f"host{n}")
            self.row([(self.x[i], 1.0) for i, c in enumerate(cands) if c.host_factor >= level]
                     + [(z, -float(self.N))], ub=0)
            extra = level - fastest
            self.require(rate, need(lambda k, extra=extra: extra * self.o.overhead_s(k)), [z], 1)
        if self.multi is not None:
            for p in tb.places:
                table = tb.nearest[p]
                self.require(rate, need(lambda k, table=table: table[k]), [self.y[p], self.multi], 2)
        for q in tb.sites:
            cap = tb.region_cap[q]
            u = self.counts_one_hot(cap, self.region_count(q), self.Y[q], f"u[{q}]")
            for m, v in u.items():
                table = tb.site(q, m)
                self.require(rate, {k: model(self._need(k, table[k])) if k > m else 0.0 for k in ks}, [v], 1)
        self._hivemind_egress()

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
            if big <= 0:
                continue
            # var ≥ Σ w_k v_k − big·(n_on − Σ ind)
            self.row([(var, 1.0)] + [(self.w[k], -v) for k, v in table.items() if v]
                     + [(ind, -big) for ind in indicators], lb=-big * n_on)
        return var

    def _allreduce_node_rates(self, fewest: int) -> list[float]:
        """allreduce: r_i, the most samples/s a node of candidate i adds to a mix of at least ``fewest``
        nodes. Each step of such a mix is at least ``d_i = step(m_i/s_i, L_p)``, with ``L_p = min_{k ≥
        fewest} ρ_p(k)`` the least ring of i's place p (T is at least p's term at the mix's count), so
        ``t ≤ G/step ≤ Σ_i m_i g_i x_i / d_i = Σ_i r_i x_i``."""
        least: dict[str, float] = {}
        if 2 <= fewest <= self.N:
            for members, table in self.tb.place_groups:
                low = min(table[k] for k in range(fewest, self.N + 1))
                least.update((p, low) for p in members)
        return [c.samples_per_step * c.goodput / self.o.step_s(c.samples_per_step / c.rate, least.get(c.zone, 0.0))
                for c in self.cands]

    def _allreduce_fewest(self) -> tuple[int, list[float]]:
        """n_min and r_i tightened together: the fewest nodes at the rates r_i of mixes of n_min nodes
        (every mix that reaches t has at least as many; a larger n_min gives smaller r_i)."""
        fewest = self.fewest
        rates = self._allreduce_node_rates(fewest)
        for _ in range(3):
            more = self.fewest_nodes(rates)
            if more <= fewest or more > self.N:
                return max(more, fewest), rates
            fewest, rates = more, self._allreduce_node_rates(more)
        return fewest, rates

    def fewest_nodes(self, node_rates: list[float] | None = None) -> int:
        """n_min: no mix of fewer nodes trains ``t`` samples/s, even at its nodes' full speed: every
        strategy's throughput rows imply ``Σ_i s_i g_i x_i ≥ t`` (allreduce: ``t ≤ G/(τ + b·T) ≤ G/τ ≤
        Σ s_i g_i x_i``, as ``τ ≥ m_i/s_i``; local-sgd, ma likewise with ``T_loc ≥ τ``; hivemind: ``e·R ≥
        t`` with ``e ≤ 1``; asgd-ga: ``Σ X_r ≥ t``, ``X_r ≤ Σ_{i∈r} s_i g_i x_i``). N + 1 where no mix can."""
        each = node_rates if node_rates is not None else [c.rate * c.goodput for c in self.cands]
        rates = sorted((r for r, c in zip(each, self.cands, strict=True) for _ in range(min(c.capacity, self.N))),
                       reverse=True)
        total = 0.0
        for k, rate in enumerate(rates[:self.N], 1):
            total += rate
            if total >= self.t * (1 - 1e-9):
                return k
        return self.N + 1

    def _good_samples(self) -> Terms:
        return [(self.x[i], c.samples_per_step * c.goodput) for i, c in enumerate(self.cands)]

    def _allreduce(self) -> None:
        o, t, tb = self.o, self.t, self.tb
        tau = self._step_time()
        inside = [(table, [self.used_indicator(members, f"Yr{n}")], 1)
                  for n, (members, table) in enumerate(tb.place_groups)]
        between = [({k: v if k > 1 else 0.0 for k, v in tb.pair(a, b).items()}, [self.y[a], self.y[b]], 2)
                   for a, b in sorted(self.lazy.pairs)]
        if self.multi is not None:
            between += [({k: v if k > 1 else 0.0 for k, v in tb.nearest[p].items()}, [self.y[p], self.multi], 2)
                        for p in tb.places]
        T = self._max_term("T", inside + between)
        # every mix that reaches t has at least n_min nodes, so T is at least the smallest in-place term at
        # n_min or more nodes (a term of any place in use at the mix's own count is at least that): a valid
        # row the one-hot w leaves loose (its LP prices n nodes by a blend of 1 and N nodes)
        least = 0.0
        if 2 <= self.fewest <= self.N:
            least = min((min(table[k] for k in range(self.fewest, self.N + 1)) for _, table in tb.place_groups),
                        default=0.0)
            if least > 0:
                self.row([(T, 1.0)], lb=least)
        # no node adds more than r_i (``_allreduce_node_rates``): Σ_i r_i x_i ≥ t, to the tolerance a mix
        # meets its target by (a tighter right-hand side, a hair above what whole nodes give, made CBC's
        # presolve call a feasible model infeasible)
        self.row([(x, r) for x, r in zip(self.x, self.node_rates, strict=True)], lb=t * (1 - 1e-6))
        # DDP's step: G − t·(τ + b·T) ≥ 0 and G − t·((1 − β)·τ + T) ≥ 0. Where the bounds of τ (its levels)
        # and of T (least, the largest term) settle which of the two binds (β·τ ≥ (1 − b)·T or ≤ for every
        # τ and T), the other is left out: it says nothing more, and the LP is smaller
        b, beta = o.bucket_share, o.backward_share
        levels = [c for _, c in tau]
        overlap_binds = b < 1 and beta * max(levels) <= (1 - b) * least
        last_bucket_binds = not overlap_binds and (b >= 1 or beta * min(levels) >= (1 - b) * T.ub())
        if not overlap_binds:
            self.row(self._good_samples() + [(v, -t * c) for v, c in tau] + [(T, -t * b)], lb=0)
        if not last_bucket_binds:
            self.row(self._good_samples() + [(v, -t * (1 - beta) * c) for v, c in tau] + [(T, -t)], lb=0)
        m_max = self.p.max_samples_per_step
        volume = {k: 3600 * t * share(k) * o.payload_bytes / (k * m_max) for k in tb.ks}
        self._cheapest_hop(volume, "place")
        for p in tb.places:
            self._hop_egress(p, volume, ring=tb.places, scope="place")

    def _local_sgd(self) -> None:
        s, o, t, tb = self.s, self.o, self.t, self.tb
        H = o.local_steps
        tau = self._step_time()
        tau_min = min(tb.steps)
        top_local = max(tb.steps) + max((tb.ring_region(lead, tb.region_cap[tb.region_of[lead]])
                                         for lead in tb.leads), default=0.0)
        T_loc = s.NumVar(0, top_local, "T_loc")
        self.row([(T_loc, 1.0)] + [(v, -c) for v, c in tau], lb=0)
        B = s.NumVar(0, self.inf, "B")
        for lead in tb.leads:
            r = tb.region_of[lead]
            cap = tb.region_cap[r]
            if cap < 2:
                continue
            ring = {m: tb.ring_region(lead, m) for m in range(1, cap + 1)}
            beta = o.broadcast_s(lead)
            count = self.region_count(r)
            if lead in self.lazy.counted:
                u = self.counts_one_hot(cap, count, self.Y[r], f"u[{r}]")
                # T_loc ≥ τ_min + Σ_m u_m ρ(m)  (only when r is used: Σ u = Y_r)
                self.row([(T_loc, 1.0)] + [(v, -(tau_min + ring[m])) for m, v in u.items()], lb=0)
                self.row([(B, 1.0)] + [(v, -beta) for m, v in u.items() if m >= 2], lb=0)
            else:
                slope = 1.0 / (cap - 1)
                # T_loc ≥ τ_min·Y_r + ρ(2)·(C_r − 1)/(U_r − 1): at most the truth for C_r ≥ 1
                self.row([(T_loc, 1.0), (self.Y[r], -tau_min + ring[2] * slope)]
                         + [(v, -ring[2] * slope * c) for v, c in count], lb=0)
                self.row([(B, 1.0), (self.Y[r], beta * slope)] + [(v, -beta * slope * c) for v, c in count], lb=0)
                # and T_loc ≥ (τ_min + ρ(2))·z_r, B ≥ β·z_r: ρ grows with the count
                z = self.several(r)
                self.row([(T_loc, 1.0), (z, -(tau_min + ring[2]))], lb=0)
                self.row([(B, 1.0), (z, -beta)], lb=0)
        T_wan = self._wan_term()
        if o.strategy == "ma":  # the average overlaps the next K steps: T_c ≥ K·T_loc, T_c ≥ T_wan
            T_c = s.NumVar(0, self.inf, "T_c")
            self.row([(T_c, 1.0), (T_loc, -H)], lb=0)
            self.row([(T_c, 1.0), (T_wan, -1.0)], lb=0)
            # K·G − t·T_c − t·B ≥ 0
            self.row([(v, H * c) for v, c in self._good_samples()] + [(T_c, -t), (B, -t)], lb=0)
        else:
            # H·G − t·H·T_loc − t·T_wan − t·B ≥ 0
            self.row([(v, H * c) for v, c in self._good_samples()] + [(T_loc, -t * H), (T_wan, -t), (B, -t)], lb=0)
        m_max = self.p.max_samples_per_step
        per_step = {k: 3600 * t * o.payload_bytes / (k * m_max) for k in tb.ks}
        for r, places in tb.region_places.items():
            for p in places:
                self._hop_egress(p, per_step, ring=places, scope="place")
        per_round = {k: v / H for k, v in per_step.items()}
        self._cheapest_hop(per_round, "lead")
        for lead in tb.leads:
            self._hop_egress(lead, per_round, ring=tb.leads, scope="lead")

    def _wan_term(self):  # noqa: ANN202
        """T_wan ≥ π_{rr'}(R) for the regions in use (R of them), with v_R one-hot."""
        s, tb = self.s, self.tb
        T_wan = s.NumVar(0, self.inf, "T_wan")
        if self.multi_region is None:
            return T_wan
        most = min(len(tb.regions), self.N)
        v = {R: s.BoolVar(f"v[{R}]") for R in range(1, most + 1)}
        self.row([(b, 1.0) for b in v.values()], 1, 1)
        self.row([(b, R) for R, b in v.items()] + [(y, -1.0) for y in self.Y.values()], 0, 0)
        Y = lambda lead: self.Y[tb.region_of[lead]]  # noqa: E731
        rows = [(tb.pair(a, b), [Y(a), Y(b)], 2) for a, b in sorted(self.lazy.pairs)]
        rows += [(tb.nearest_lead[lead], [Y(lead), self.multi_region], 2) for lead in tb.leads]
        for table, indicators, n_on in rows:
            values = {R: table[R] for R in v if R >= 2}
            big = max(values.values(), default=0.0)
            if big <= 0:
                continue
            self.row([(T_wan, 1.0)] + [(v[R], -val) for R, val in values.items()]
                     + [(ind, -big) for ind in indicators], lb=-big * n_on)
        return T_wan

    def _asgd(self) -> None:
        s, o, tb, cands = self.s, self.o, self.tb, self.cands
        A = o.accumulation_steps
        model = units.to_model_rate
        X, h, power = {}, {}, {}
        top_power = model(sum(c.rate * min(c.capacity, self.N) for c in cands))
        star = s.NumVar(0, top_power, "power*")
        for r, places in tb.region_places.items():
            idx = [i for p in places for i in tb.members[p]]
            top = sum(model(cands[i].rate * cands[i].goodput) * min(cands[i].capacity, self.N) for i in idx)
            X[r] = s.NumVar(0, top, f"X[{r}]")
            h[r] = s.BoolVar(f"h[{r}]")
            self.row([(X[r], 1.0)] + [(self.x[i], -model(cands[i].rate * cands[i].goodput)) for i in idx], ub=0)
            if tb.region_cap[r] > 1:
                # two or more nodes in r: each node's step also waits for r's all-reduce, at least ρ_r(2)
                ring = tb.ring_region(tb.lead_of[r], 2)
                alone = max(model(cands[i].rate * cands[i].goodput) for i in idx)
                self.row([(X[r], 1.0), (self.several(r), alone)]
                         + [(self.x[i], -model(cands[i].samples_per_step
                                               / (cands[i].samples_per_step / (cands[i].rate * cands[i].goodput)
                                                  + ring))) for i in idx], ub=alone)
            self.row([(X[r], 1.0), (self.Y[r], -top)], ub=0)
            self.row([(h[r], 1.0), (self.Y[r], -1.0)], ub=0)
            raw = [(self.x[i], model(cands[i].rate)) for i in idx]
            power[r] = raw
            self.row([(star, 1.0)] + [(v, -c) for v, c in raw], lb=0)  # Π* ≥ Π_r
            self.row(raw + [(star, -1.0), (h[r], -top_power)], lb=-top_power)  # Π_r ≥ Π* − M(1 − h_r)
        self.row([(v, 1.0) for v in h.values()], 1, 1)
        self.row([(v, 1.0) for v in X.values()], lb=model(self.t))
        region_of = tb.region_of
        for a, b in sorted(self.lazy.pairs):
            for src, home in ((a, b), (b, a)):
                r, hr = region_of[src], region_of[home]
                top = X[r].ub()
                push = o.pair_s(src, home, 0)
                # X_src ≤ (A/push)·Σ m_i x_i + top·(1 − h_home)
                self.row([(X[r], 1.0), (h[hr], top)]
                         + [(self.x[i], -model(A / push) * cands[i].samples_per_step)
                            for p in tb.region_places[r] for i in tb.members[p]], ub=top)
                price = units.to_model_usd(semantics.asgd_push_usd_per_hour(self.p, src, home))
                if price > 0:
                    self.row([(self.E[src], 1.0), (self.Y[r], -price), (h[hr], -price)], lb=-price)
