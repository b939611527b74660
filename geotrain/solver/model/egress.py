"""The model's egress rows (``geotrain.solver.model``'s docstring writes them in math): hivemind's
all-to-all, the rings' next-place hops and, before those rows exist, each place's cheapest hop. A
part of :class:`geotrain.solver.model.rows.Builder`, which supplies the variables (``x``, ``w``, ``y``,
``Y``, ``E``, ``total``, the indicators ``multi``, ``multi_region``) and ``row``."""

from __future__ import annotations

from collections.abc import Callable

from geotrain.solver import units


class EgressRows:
    """The egress rows of :class:`geotrain.solver.model.rows.Builder` (a part of it)."""

    def _hivemind_egress(self) -> None:
        """Σ_p E_p = α·Q·s(n) with Q = Σ_p C_p·D_p (s(n) = pair_share(n), 1/n in one group): Q ≥ Σ_p G_p, G_p ≥ D_p when p is used (exact for one
        node in p), G_p ≥ m·D_p when p holds m nodes (once p's counts are in the model)."""
        s, tb, N = self.s, self.tb, self.N
        if len(tb.places) < 2:
            return
        alpha = 3600 * self.t * 2 * self.o.payload_bytes / self.o.samples_per_round
        price = self.o.usd_per_byte
        C = {}
        for p in tb.places:
            C[p] = s.NumVar(0, tb.place_cap[p], f"C[{p}]")
            self.row([(C[p], 1.0)] + [(v, -c) for v, c in self.count(p)], 0, 0)
        G: Terms = []
        top_q = 0.0
        fixed_total = sum(tb.fixed_count.values())
        for p in tb.places:
            coef = {q: units.to_model_usd(alpha * price(p, q)) for q in tb.places if q != p}
            top = max(coef.values())
            if top <= 0:
                continue
            d_terms = [(C[q], c) for q, c in coef.items() if c]
            big_d = top * N
            fixed = tb.fixed_count.get(p)
            if fixed is not None:  # the place's count cannot change (machines that must be used): G_p = m·D_p
                if fixed == 0:
                    continue
                g = s.NumVar(0, fixed * big_d, f"G[{p}]")
                self.row([(g, 1.0)] + [(var, -fixed * c) for var, c in d_terms], lb=0)
                top_q += fixed * big_d
            elif p in self.lazy.counted:
                cap = tb.place_cap[p]
                g = s.NumVar(0, cap * big_d, f"G[{p}]")
                u = self.counts_one_hot(cap, self.count(p), self.y[p], f"u[{p}]")
                for m, v in u.items():
                    big = m * big_d
                    self.row([(g, 1.0)] + [(var, -m * c) for var, c in d_terms] + [(v, -big)], lb=-big)
                top_q += cap * big_d
            elif fixed_total:
                # before p's counts are in the model, and machines that must be used exist: p's nodes
                # send at least to those, G_p ≥ C_p·Σ_{q fixed} c_pq·m_q (linear: exact for that part)
                k_p = sum(coef.get(q, 0.0) * m for q, m in tb.fixed_count.items() if q != p)
                if k_p <= 0:
                    continue
                g = s.NumVar(0, tb.place_cap[p] * k_p, f"G[{p}]")
                self.row([(g, 1.0), (C[p], -k_p)], lb=0)
                top_q += tb.place_cap[p] * k_p
            else:
                # before p's counts are in the model: E_p ≥ ½·α·min_q c_pq·min(C_p, n − C_p)·ν, where
                # ν = min_n n·pair_share(n) (1 in one group; (G − 1)/G in groups of at most G)
                nu = min((k * self.o.pair_share(k) for k in range(2, N + 1)), default=1.0)
                cheapest = units.to_model_usd(alpha * tb.cheapest[p]) * nu
                if cheapest > 0:
                    b = self._balance(p)
                    self.row([(self.E[p], 1.0), (b, -0.5 * cheapest)], lb=0)
                continue
            G.append((g, 1.0))
        if not G:
            return
        # E ≥ Q·s(k) − M(1 − w_k), one row per k (s(k) = pair_share(k): 1/k in one group of every node)
        E = s.NumVar(0, self.inf, "E_counted")
        self.extra_cost.append((E, 1.0))
        top_q = min(top_q, N * N * max(self.tb.max_price_alpha(alpha), 0.0)) or top_q
        for k in range(2, N + 1):
            each = self.o.pair_share(k)
            big = top_q * each
            self.row([(E, 1.0)] + [(g, -each) for g, _ in G] + [(self.w[k], -big)], lb=-big)

    def _balance(self, p: str):  # noqa: ANN202
        """b_p ≥ min(C_p, n − C_p), with one binary."""
        s, N = self.s, self.N
        b = s.NumVar(0, N, f"b[{p}]")
        z = s.BoolVar(f"z[{p}]")
        members = self.count(p)
        self.row([(b, 1.0)] + [(v, -c) for v, c in members] + [(z, N)], lb=0)  # b ≥ C_p − N·z
        self.row([(b, 1.0), (self.total, -1.0)] + members + [(z, -N)], lb=-N)  # b ≥ n − C_p − N(1−z)
        return b

    def _hop_egress(self, source: str, volume: dict[int, float], *, ring: list[str], scope: str) -> None:
        """E ≥ price·Σ_k w_k·volume[k] for the next place in use after ``source`` among ``ring``
        (places in ring order); ``scope`` names the rows' indicator kind: "place" or "lead"."""
        o = self.o
        index = {p: j for j, p in enumerate(ring)}
        for a, b in sorted(h for h in self.lazy.hops if h[0] == source):
            if a not in index or b not in index:
                continue
            price = units.to_model_usd(o.usd_per_byte(a, b))
            if price <= 0:
                continue
            ia, ib = index[a], index[b]
            between = ring[ia + 1:ib] if ia < ib else ring[ia + 1:] + ring[:ib]
            ind = self._indicator(scope)
            big = price * max(volume.values())
            self.row([(self.E[a], 1.0)] + [(self.w[k], -price * v) for k, v in volume.items() if v]
                     + [(ind(a), -big), (ind(b), -big)] + [(ind(q), big) for q in between], lb=-2 * big)

    def _indicator(self, scope: str) -> Callable:
        if scope == "place":
            return lambda p: self.y[p]
        return lambda lead: self.Y[self.tb.region_of[lead]]

    def _cheapest_hop(self, volume: dict[int, float], scope: str) -> None:
        """Once two places (regions) are used, each sends a hop at least at its cheapest price."""
        tb = self.tb
        if scope == "place":
            if self.multi is None:
                return
            items = [(p, self.y[p], tb.cheapest[p]) for p in tb.places]
            flag = self.multi
        else:
            if self.multi_region is None:
                return
            items = [(lead, self.Y[tb.region_of[lead]], tb.cheapest_lead[lead]) for lead in tb.leads]
            flag = self.multi_region
        for p, used, cheapest in items:
            price = units.to_model_usd(cheapest)
            if price <= 0:
                continue
            big = price * max(volume.values())
            self.row([(self.E[p], 1.0)] + [(self.w[k], -price * v) for k, v in volume.items() if v]
                     + [(used, -big), (flag, -big)], lb=-2 * big)
