"""The fitted constants of the hivemind strategy and what a node keeps of its rate inside Hivemind
(the formulas are in :mod:`geotrain.perf.strategies`; the fit in :mod:`geotrain.perf.calibration`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from geotrain.perf.strategies import PeerGroup
    from geotrain.perf.workloads import Workload


@dataclass(frozen=True, slots=True)
class HivemindFit:
    """Fitted constants of the hivemind strategy (see ``perf/data/calibration.json``).

    ``efficiency``: ``e_w`` per workload with runs; ``unseen_step_s_per_gparam``: ``λ_k`` per workload
    kind, the whole per-step cost of a workload without runs; ``step_s_per_gparam``: ``κ``;
    ``round_floor_s``, ``per_peer_s``, ``per_gparam_s``: ``f0``, ``β``, ``γ`` on the fastest host (host
    factor 1); ``host_vcpus``: ``V``, ``host_exponent``: ``α``; ``unknown_vcpus``: what a node of unknown
    size counts as."""

    efficiency: dict[str, float]
    unseen_step_s_per_gparam: dict[str, float]
    round_floor_s: float
    per_peer_s: float
    per_gparam_s: float
    step_s_per_gparam: float = 0.0
    host_vcpus: float = 1.0
    host_exponent: float = 0.0
    unknown_vcpus: float = 8.0

    def terms(self, workload: Workload) -> tuple[float, float]:
        """(e, per-step seconds per billion parameters): ``(e_w, κ)`` for a workload with runs, ``(1, λ_k)``
        for one without (the largest ``λ`` where its kind has none; ``κ`` where no ``λ`` was fitted)."""
        e = self.efficiency.get(workload.name)
        if e is not None:
            return e, self.step_s_per_gparam
        unseen = self.unseen_step_s_per_gparam
        return 1.0, unseen.get(workload.kind, max(unseen.values(), default=self.step_s_per_gparam))

    def efficiency_of(self, workload: Workload) -> float:
        return self.terms(workload)[0]

    def host_factor(self, vcpus: float) -> float:
        """h(v) = (min(v, V)/V)^(−α) ≥ 1: how much slower than the fastest host Hivemind's own work runs."""
        v = vcpus if vcpus > 0 else self.unknown_vcpus
        return (min(v, self.host_vcpus) / self.host_vcpus) ** -self.host_exponent

    def node_share(self, workload: Workload, samples_per_step: int) -> float:
        """e' = 1 / (1 + (1/e_w − 1)·mb_w/mb): the share of its rate a node stepping ``mb`` samples
        keeps of what the protocol takes per step; ``mb_w`` (the workload's micro-batch, one
        accelerator's step in the runs ``e_w`` was measured on) gives ``e_w`` back."""
        e = self.efficiency_of(workload)
        return 1.0 / (1.0 + (1.0 / e - 1.0) * workload.samples_per_step / samples_per_step)

    def step_efficiency(self, workload: Workload, samples_per_s: float, samples_per_step: int, vcpus: float) -> float:
        """e'·q, q = 1 / (1 + h·κ·(P/1e9)·e'·r / mb): the share of its rate ``r`` a node keeps inside
        Hivemind, the protocol's share per step (``e'``) and its fixed cost per step (``q``) both
        amortised over the node's micro-batch ``mb``."""
        e = self.node_share(workload, samples_per_step)
        fixed = self.host_factor(vcpus) * self.terms(workload)[1] * workload.parameters / 1e9
        return e / (1.0 + fixed * e * samples_per_s / samples_per_step)

    def node_rate(self, workload: Workload, group: PeerGroup) -> float:
        """r_eff = e'·q·r: what one node of ``group`` trains inside Hivemind."""
        return group.samples_per_s * self.step_efficiency(workload, group.samples_per_s, group.samples_per_step,
                                                          group.vcpus)
