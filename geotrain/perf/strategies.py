"""Sync strategies: how long a round takes, how many samples it trains, what it sends where.

Notation (all per round unless said otherwise):

- groups ``g`` of ``c_g`` identical nodes at one location, each training ``r_g`` samples/s alone;
  ``n = Σ c_g`` nodes; ``mb_g`` = micro-batch per step of a node (workload micro-batch × accelerators);
- ``W`` = bytes of one copy of the parameters on the wire (parameters × bytes per parameter);
- ``bw(g,h)``, ``rtt(g,h)``: single-stream bandwidth and RTT between a node of g and one of h
  (:mod:`geotrain.perf.network`); ``cap_g`` = a node's own egress cap (its same-zone figure: one
  stream already fills a cloud VM's NIC, see ``perf/data/PROVENANCE.md``); ``agg(q,q')`` = what all
  streams of one sender in region q towards region q' carry (an aggregate figure, if any);
- ``v(n) = 2(n−1)/n``: the share of ``W`` each node sends in an all-reduce.

Strategies
----------
``hivemind`` (Erben et al.): peers accumulate gradients until the target batch size ``TBS`` is
reached across all peers, then average parameters in a butterfly all-reduce (each node sends
``2W/n`` to every other node). A node of g trains inside Hivemind at ``r'_g``, below ``r_g``: what
the protocol takes of each step, in proportion to the step (``e_w``, per workload, measured on
nodes of one accelerator stepping the workload's micro-batch ``mb_w``: such a node keeps ``e_w``
of its rate; a node of several accelerators steps ``mb_g = a_g·mb_w`` samples at once and pays it
once per step, so it keeps ``e'_g``), and a fixed cost per step ``h_g·κ·P/1e9`` seconds (gradient
accumulation and step bookkeeping over the ``P`` parameters, on the node's host) amortised over
``mb_g``; the round's own work (matchmaking, compression, reduction, the optimizer step) runs on
the hosts, and the slowest host in the round sets its pace::

    e'_g     = 1 / (1 + (1/e_w − 1)·mb_w/mb_g)      the share per step, amortised (e_w at mb_g = mb_w)
    1/r'_g   = 1/(e'_g·r_g) + h_g·κ·(P/1e9)/mb_g     per sample;  r'_g = q_g·r_g with
    q_g      = e'_g / (1 + h_g·κ·(P/1e9)·e'_g·r_g/mb_g)  the node's step efficiency
    h(v)     = (min(v, V)/V)^(−α) ≥ 1                 host factor of a node with v vCPUs
    T_calc   = TBS / Σ c_g r'_g
    T_xfer   = max( max_{g,h} (2W/n)·8 / bw(g,h) + 2·rtt(g,h),  slowest peer pair (two phases)
                    max_g v(n)·W·8 / cap_g,                     a node's own egress
                    max_site bytes leaving site·8 / uplink,     an on-prem site's uplink
                    max_{q,q'} max(s_q·c_q', s_q'·c_q)·(2W/n)·8 / agg(q,q') )
                                                                 a region pair's aggregate cap;
               bytes leaving a site = c_s·(n − c_s)·2W/n;  c_q nodes in region q; s_q = 1 for cloud
               VMs (each sends its own streams), c_q for an on-prem site (its machines share one path);
               between an on-prem site and another place agg = the link's measured aggregate, else
               what one stream carries there (``LinkEstimate.site_path_gbps``): every peer's butterfly share
               crosses the site's one path, and the site's streams are not assumed to add up where
               no multi-stream figure says they do
    T_comm   = max_g h_g · (f0 + β·n + γ·(P/1e9)) + T_xfer
    T_round  = T_calc + T_comm,   samples = TBS,   granularity = T_calc / T_comm

Groups: Hivemind's matchmaking forms averaging groups of at most ``G`` peers (its
``target_group_size``; ``SyncSettings.group_size``, which the runtime passes to the library); with
``n > G`` peers several groups average at once. Each term of a round is then a group's, with
``m = min(n, G)`` for ``n`` wherever the all-reduce's size enters (``2W/m`` per pair, ``v(m)·W`` per
node, ``β·m``), and a pair of nodes in a group with chance ``(m − 1)/(n − 1)`` (the bytes that leave a
site or cross a region pair). ``T_calc`` still counts every peer: all of them accumulate the target
batch. Where each term was measured, and how far it may be carried: ``f0``, ``β``, ``γ`` and ``e_w``
on Erben et al.'s runs of 2 to 8 peers in one group (``G`` = 16 leaves them as fitted); beyond 8
peers in a group, ``β·m`` is carried linearly up to ``G`` and no further, as the library's groups
are bounded there. The library itself, at more peers (``bench/hivemind_groups.py``: 8, 16 and 32
local peers of its ``DecentralizedAverager`` with the runtime's averaging options, on 2 cores):
at 8 and 16 peers it formed groups of exactly ``G`` = 4, 8 and 16, every peer in one each round,
as ``m = min(n, G)`` says; at 32 its groups were smaller than ``G`` (2 to 14) and a few peers
found none, with 96 processes on the 2 cores (timed matchmaking on an overloaded machine; not
separable here from a limit of the library). Its host work per peer and round grew with the
swarm, not the group: 0.17, 0.31 and 0.52–0.74 CPU-seconds at 8, 16 and 32 peers whatever ``G``
(every peer looks for its group in one DHT key that all of them declare in), about 0.02 s per peer
against ``β`` = 0.35 s per peer of a group: the model leaves it out.

The round's host work is ``γ·P``, not in ``n``: in a butterfly each peer reduces its ``1/n`` share of
the vector from all ``n`` peers (``n·W/n = W``), copies the whole vector out and the average back,
and steps the optimizer over all ``P``; what grows with ``n`` is the share of ``W`` on the wire,
``v(n)``, which ``T_xfer`` counts. ``β·n`` is what each other peer costs (its connections, messages,
parts' bookkeeping).

``e_w``, ``κ``, ``α``, ``f0``, ``β``, ``γ`` are fitted on the one-zone tables of Erben et al. (GC T4
VMs with 8 vCPUs, LambdaLabs A10 VMs with 30; ``scripts/calibrate_perf.py``, which says which are
priors); ``V`` is a prior. A workload without runs has no ``e_w``: it trains at its own rate and
pays its kind's whole per-step cost ``λ_k`` (fitted over that kind's workloads with ``e = 1``), so
its prediction comes from its size ``P`` and its compute rate ``r``, not from other workloads'
efficiencies::

    1/r'_g   = 1/r_g + h_g·λ_k·(P/1e9)/mb_g            (a workload of kind k without runs)

A multi-GPU node with a large micro-batch (a DGX-2) amortises both over many samples, a single
small GPU on a small VM over few. The runs ``e_w`` and ``κ`` were fitted on all stepped 32 samples
on one GPU, where a share of the step and a cost per step are the same figure; the amortisation is
the form's, checked against nothing measured here (Erben et al.'s hybrid runs with the DGX-2 are
not in ``../shared/data``): on them the share form without it, ``e_w·r``, cost the DGX-2 half of its
convnext-large rate, as it does a T4 VM, and predicted the hybrid mixes 24–41 % below what was
measured. One node alone trains at ``r`` (no averaging).

``allreduce``: synchronous data parallel (DDP); a ring all-reduce of the gradients every step,
timed over the slowest link in use (nodes are ordered by location, so the ring crosses each region
boundary once; with four or more regions the slowest pair may not be a ring hop, which makes the
time an upper bound). DDP all-reduces the gradients in buckets of 25 MiB (fp32) while the backward
pass (``β`` = 2/3 of a step) computes the rest; only the last bucket (``b`` of the gradients) waits
for the backward pass to end::

    T_calc  = max_g mb_g / r_g        (the slowest node sets the pace)
    T_ring  = max_{g,h} [ v(n)·W·8 / bw_nccl(g,h) + (n−1)·rtt(g,h) ]
    T_step  = max( T_calc + b·T_ring,  (1 − β)·T_calc + T_ring ),   b = min(1, 25 MiB / (4 bytes·P))
    samples = Σ c_g mb_g;   each node sends v(n)·W to its ring successor

``bw_nccl`` is what NCCL carries between two machines of one cloud region (:mod:`geotrain.perf.nic`:
its socket streams over the link, at most either machine's sustained NIC figure); across regions
it is the single-stream ``bw``. A model of at most 25 MiB of gradients is one bucket: no overlap.

``local-sgd`` (model averaging every ``H`` steps; Cloudless-Training's inter-region averaging,
DiLoCo-like): inside each region ``q`` the nodes run the all-reduce above every step; every ``H``
steps one leader per region averages the model with the other leaders over the WAN and broadcasts
it inside its region. The leaders' average goes over the runtime's WAN transport
(``geotrain.train.sync.streams``): a butterfly in which each leader sends ``2W/R`` to each other
leader over ``S`` = ``WAN_STREAMS`` TCP streams per pair, in two exchanges whose one-way trips add
up to one round trip, whatever ``R``::

    T_step_q = max_{g∈q} mb_g / r_g + T_ring(q)          T_ring as in allreduce, over q's nodes
    T_wan    = max_{q,q'} [ (2W/R)·8 / bw_S(q,q') + rtt(q,q') ]
    T_round  = H·max_q T_step_q + T_wan + max_q T_bcast(q)
    samples  = H · Σ c_g mb_g

``ma`` (Cloudless-Training's model averaging between the regions' parameter servers): the same
steps, average and broadcast with ``K`` pushes (one per step) a round, but the servers' average
overlaps the next ``K`` steps (it is waited for one round later)::

    T_round  = max(K·max_q T_step_q, T_wan) + max_q T_bcast(q)
    samples  = K · Σ c_g mb_g

``asgd-ga`` (Cloudless-Training): each region accumulates gradients for ``A`` steps, pushes them to
the parameter server in the home region (the region with the most compute) and pulls the
parameters back, asynchronously. Communication overlaps the next accumulation, but a region's
pushes must fit through its link (one push in flight, ``S`` = 1; a larger staleness bound can only
be faster)::

    T_cycle_q = max(A·T_step_q, 2W·8 / bw_8(q, home) + rtt(q, home))
    samples/s = Σ_q A · Σ_{g∈q} c_g mb_g / T_cycle_q

where ``bw_8`` (``bw_S`` above) is what the runtime's ``S`` = 8 streams per pair carry: 8 × one
stream, at most the pair's aggregate (``LinkEstimate.streams_gbps``; an on-prem site's path:
``site_path_gbps``).

allreduce's ring and the in-region rings and broadcasts of local-sgd, ma and asgd-ga run on NCCL:
inside a region over ``bw_nccl``, across regions over the single-stream ``bw`` (a region's ring
crosses each region boundary once); an on-prem site's one stream is at most its
``single_stream_gbps`` (or uplink), see :mod:`geotrain.perf.network`. The in-region all-reduce of
local-sgd, ma and asgd-ga follows the backward pass (the runtime averages the region's gradient after
it), so it does not overlap. On the local provider (gloo on CPU processes) and in the calibration's
runs every hop is one stream (``Topology.nccl`` False).

A runtime's transport can cost more round trips than the terms above count (gloo waits for the
receiver before each send): :class:`Protocol` adds ``k_s`` round trips of the longest RTT in use to a
round, measured per strategy for geotrain's runtime on gloo (``geotrain.perf.protocol``); the
rehearsal predicts with it, the planner (NCCL on GPUs, not measured) without.

Statistical efficiency (how staleness or infrequent averaging changes the samples needed to reach
a given loss) is outside this model: it predicts samples per second and bytes, not accuracy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from geotrain.domain import CLOUD_ONPREM, Location, SyncSettings, SyncStrategyName
from geotrain.perf.hivemind_fit import HivemindFit
from geotrain.perf.network import LinkEstimate
from geotrain.perf.terms import (
    asgd_push_s, butterfly_pair_s, ddp_bucket_share, ddp_step_s, hivemind_aggregate_s, hivemind_group,
    hivemind_node_egress_s, hivemind_overhead_s, hivemind_pair_s, hivemind_reach, hivemind_site_s, nccl_link,
    ring_pair_s, seconds, share,
)
from geotrain.perf.workloads import Workload


@dataclass(frozen=True, slots=True)
class PeerGroup:
    """``count`` identical nodes at one location."""

    location: Location
    count: int
    samples_per_s: float  # one node, training alone
    samples_per_step: int  # one node's micro-batch (all its accelerators)
    goodput: float = 1.0  # the share of its time a node trains (expected interruptions left out)
    vcpus: float = 0.0  # the node's virtual CPUs (hivemind's host factor; 0 = unknown)
    nic_gbps: float | None = None  # the machine's sustained NIC figure (geotrain.perf.nic; None: no cap)


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """What limits a round: a link between two groups, a node's egress, a site's uplink, or compute."""

    what: str  # "link" | "link aggregate" | "node egress" | "site uplink" | "compute" | "overhead"
    seconds: float
    groups: tuple[int, int] | None = None
    link: LinkEstimate | None = None


@dataclass(frozen=True, slots=True)
class SyncCost:
    samples_per_s: float
    time_per_round_s: float
    samples_per_round: float
    compute_s: float
    comm_s: float
    bytes_per_peer_per_round: float  # the largest amount one node sends in a round
    bytes_per_s: dict[tuple[int, int], float] = field(default_factory=dict)  # group i -> group j
    bottleneck: Bottleneck | None = None
    good_samples_per_s: float | None = None  # with each node's goodput (None: equal to samples_per_s)


class Topology:
    """Groups plus the links between them (``link(i, i)`` is the link inside group i). ``nccl``: the
    collectives run on NCCL over the machines' networks (GPUs in the clouds); otherwise (gloo on
    the local provider, the calibration's runs) a ring hop is one stream, as the link says."""

    def __init__(self, groups: Sequence[PeerGroup], link: Callable[[Location, Location], LinkEstimate],
                 uplink_gbps: Callable[[str], float | None], *, nccl: bool = False) -> None:
        self.groups = tuple(groups)
        self._link = link
        self._uplink = uplink_gbps
        self.nccl = nccl
        self.nodes = sum(g.count for g in self.groups)

    def link(self, i: int, j: int) -> LinkEstimate:
        return self._link(self.groups[i].location, self.groups[j].location)

    def collective(self, i: int, j: int) -> LinkEstimate:
        """The link a ring hop or broadcast between a node of i and one of j uses: inside one cloud
        region with ``nccl``, NCCL's socket streams over the link, at most either machine's NIC
        (``nccl_link``); otherwise the single-stream link."""
        a, b = self.groups[i], self.groups[j]
        link = self.link(i, j)
        if not self.nccl or a.location.region_scope != b.location.region_scope or a.location.cloud == CLOUD_ONPREM:
            return link
        return nccl_link(link, a.location.cloud, a.nic_gbps, b.nic_gbps)

    def cap_gbps(self, i: int) -> float:
        """A node's own single-stream egress cap: its same-location link."""
        return self.link(i, i).bandwidth_gbps

    def site_uplink_gbps(self, site: str) -> float | None:
        return self._uplink(site)

    def regions(self) -> dict[str, list[int]]:
        """Group indices by region (an on-prem site is a region)."""
        out: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(self.groups):
            out[g.location.region_scope].append(i)
        return dict(out)

    def pairs(self) -> list[tuple[int, int]]:
        """Unordered group pairs (i <= j) that have at least one node pair."""
        return [(i, j) for i in range(len(self.groups)) for j in range(i, len(self.groups))
                if i != j or self.groups[i].count > 1]


@dataclass(frozen=True, slots=True)
class Hivemind:
    """Hivemind's own all-reduce, whose two phases Erben et al. measured (``hivemind_pair_s``: a round
    trip each, one stream); the runtime is the Hivemind library."""

    fit: HivemindFit
    target_batch_size: int
    group_size: int | None = None  # G: the most peers in one averaging group (None: every peer in one)
    name: SyncStrategyName = SyncStrategyName.HIVEMIND

    @classmethod
    def from_settings(cls, sync: SyncSettings, fit: HivemindFit) -> Hivemind:
        return cls(fit, sync.target_batch_size, sync.group_size)

    def transfer(self, topo: Topology, payload: float) -> tuple[float, Bottleneck | None, dict]:
        """(T_xfer, what bounds it, bytes per round by directed group pair)."""
        n, g = topo.nodes, self.group_size
        # each node sends 2W/m to each of the m − 1 others of its group: per pair of nodes, 2W/m times
        # the chance (m − 1)/(n − 1) that the two share a group
        chunk = 2 * payload / hivemind_group(n, g) * hivemind_reach(n, g)
        worst, sent = 0.0, {}
        bound: Bottleneck | None = None
        for i, j in topo.pairs():
            link = topo.link(i, j)
            t = hivemind_pair_s(payload, n, link, g)
            if t > worst:
                worst, bound = t, Bottleneck("link", t, (i, j), link)
            gi, gj = topo.groups[i], topo.groups[j]
            if i == j:
                sent[(i, i)] = gi.count * (gi.count - 1) * chunk
            else:
                sent[(i, j)] = sent[(j, i)] = gi.count * gj.count * chunk
        for i in range(len(topo.groups)):
            t = hivemind_node_egress_s(payload, n, topo.cap_gbps(i), g)
            if t > worst:
                worst, bound = t, Bottleneck("node egress", t, (i, i), topo.link(i, i))
        for site, members in topo.regions().items():
            cloud, _, name = site.partition("/")
            uplink = topo.site_uplink_gbps(name) if cloud == CLOUD_ONPREM else None
            if uplink is None:
                continue
            t = hivemind_site_s(payload, n, sum(topo.groups[i].count for i in members), uplink, g)
            if t > worst:
                worst, bound = t, Bottleneck("site uplink", t, (members[0], members[0]))
        t, found = _aggregate_term(topo, payload, g)
        if found is not None and t > worst:
            worst, bound = t, found
        return worst, bound, sent

    def cost(self, topo: Topology, payload: float, workload: Workload) -> SyncCost:
        n = topo.nodes
        raw = sum(g.count * g.samples_per_s for g in topo.groups)
        good = sum(g.count * g.samples_per_s * g.goodput for g in topo.groups)
        if n == 1:
            return SyncCost(raw, self.target_batch_size / raw, self.target_batch_size,
                            self.target_batch_size / raw, 0.0, 0.0, {}, Bottleneck("compute", 0.0), good)
        fit = self.fit
        inside = [g.count * fit.node_rate(workload, g) for g in topo.groups]
        calc = self.target_batch_size / sum(inside)
        xfer, bound, sent = self.transfer(topo, payload)
        host = max(fit.host_factor(g.vcpus) for g in topo.groups)
        overhead = hivemind_overhead_s(fit, n, workload.parameters, host, self.group_size)
        comm = overhead + xfer
        round_s = calc + comm
        if bound is None or overhead > xfer:
            bound = Bottleneck("overhead", overhead)
        return SyncCost(
            samples_per_s=self.target_batch_size / round_s, time_per_round_s=round_s,
            samples_per_round=self.target_batch_size, compute_s=calc, comm_s=comm,
            bytes_per_peer_per_round=share(hivemind_group(n, self.group_size)) * payload,
            bytes_per_s={k: v / round_s for k, v in sent.items()}, bottleneck=bound,
            good_samples_per_s=self.target_batch_size / (
                self.target_batch_size / sum(r * g.goodput for r, g in zip(inside, topo.groups, strict=True))
                + comm),
        )


def _aggregate_term(topo: Topology, payload: float, group_size: int | None = None) -> tuple[float, Bottleneck | None]:
    """The slowest region pair by its aggregate cap: ``max_{q,q'} B(q,q')·8 / agg(q,q')``."""
    n = topo.nodes
    regions = topo.regions()
    count = {q: sum(topo.groups[i].count for i in members) for q, members in regions.items()}
    # one sender: a VM sends its own streams; an on-prem site's machines share one path
    senders = {q: count[q] if topo.groups[members[0]].location.cloud == CLOUD_ONPREM else 1
               for q, members in regions.items()}
    names = sorted(regions)
    worst, bound = 0.0, None
    for x, q in enumerate(names):
        for r in names[x + 1:]:
            site = CLOUD_ONPREM in (q.split("/", 1)[0], r.split("/", 1)[0])  # one end is an on-prem site
            capped = [(topo.link(i, j).site_path_gbps if site else topo.link(i, j).aggregate_gbps, i, j)
                      for i in regions[q] for j in regions[r]]
            capped = [c for c in capped if c[0]]
            if not capped:
                continue
            aggregate, i, j = min(capped)
            t = max(hivemind_aggregate_s(payload, n, senders[q], count[r], aggregate, group_size),
                    hivemind_aggregate_s(payload, n, senders[r], count[q], aggregate, group_size))
            if t > worst:
                worst, bound = t, Bottleneck("link aggregate", t, (i, j), topo.link(i, j))
    return worst, bound


def _ring(topo: Topology, members: Sequence[int]) -> dict[tuple[int, int], int]:
    """The ring over the nodes of ``members``, ordered by location: how many of its hops run from one
    group to another (``(i, i)``: between two nodes of group i). Counted per group, not per node: a
    ring of 1,000 nodes in a few groups is a few entries."""
    order = [i for i in sorted(members, key=lambda i: (topo.groups[i].location.cloud, topo.groups[i].location.region,
                                                       topo.groups[i].location.zone, i)) if topo.groups[i].count]
    nodes = sum(topo.groups[i].count for i in order)
    if nodes < 2:
        return {}
    if len(order) == 1:
        return {(order[0], order[0]): nodes}
    hops: dict[tuple[int, int], int] = defaultdict(int)
    for j, i in enumerate(order):
        if topo.groups[i].count > 1:
            hops[(i, i)] += topo.groups[i].count - 1
        hops[(i, order[(j + 1) % len(order)])] += 1
    return dict(hops)


def _ring_allreduce(topo: Topology, members: Sequence[int], payload: float) -> tuple[float, dict, Bottleneck | None]:
    """Time (over the slowest pair in use) and bytes (per ring hop) of one all-reduce among ``members``."""
    hops = _ring(topo, members)
    if not hops:
        return 0.0, {}, None
    n = sum(hops.values())
    pairs = [(i, j) for i in members for j in members if i <= j and (i != j or topo.groups[i].count > 1)]
    slowest = max(pairs, key=lambda p: ring_pair_s(payload, n, topo.collective(*p)))
    link = topo.collective(*slowest)
    t = ring_pair_s(payload, n, link)
    amount = share(n) * payload
    sent = {hop: count * amount for hop, count in hops.items()}
    return t, sent, Bottleneck("link", t, slowest, link)


@dataclass(frozen=True, slots=True)
class AllReduce:
    name: SyncStrategyName = SyncStrategyName.ALLREDUCE

    @classmethod
    def from_settings(cls, sync: SyncSettings, fit: HivemindFit) -> AllReduce:
        return cls()

    def cost(self, topo: Topology, payload: float, workload: Workload) -> SyncCost:
        calc = max(g.samples_per_step / g.samples_per_s for g in topo.groups)
        samples = sum(g.count * g.samples_per_step for g in topo.groups)
        ring, sent, bound = _ring_allreduce(topo, range(len(topo.groups)), payload)
        step = ddp_step_s(calc, ring, ddp_bucket_share(workload.parameters))
        n = topo.nodes
        exposed = step - calc  # what the backward pass does not hide
        return SyncCost(
            samples_per_s=samples / step, time_per_round_s=step, samples_per_round=samples,
            compute_s=calc, comm_s=exposed, bytes_per_peer_per_round=share(n) * payload if n > 1 else 0.0,
            bytes_per_s={k: v / step for k, v in sent.items()},
            bottleneck=bound if bound and exposed > 0 else Bottleneck("compute", calc),
            good_samples_per_s=sum(g.count * g.samples_per_step * g.goodput for g in topo.groups) / step,
        )


def _region_steps(topo: Topology, payload: float) -> dict[str, tuple[float, dict, Bottleneck | None]]:
    """Per region: (step time with its in-region all-reduce, bytes per step, bound)."""
    out = {}
    for region, members in topo.regions().items():
        calc = max(topo.groups[i].samples_per_step / topo.groups[i].samples_per_s for i in members)
        comm, sent, bound = _ring_allreduce(topo, members, payload)
        out[region] = (calc + comm, sent, bound)
    return out


def _averaging_cost(topo: Topology, payload: float, H: int, overlapped: bool) -> SyncCost:
    """local-sgd (``overlapped`` False) and ma (True): H in-region steps, the leaders' butterfly over
    the WAN transport, a broadcast."""
    regions = topo.regions()
    steps = _region_steps(topo, payload)
    slowest_region = max(steps, key=lambda r: steps[r][0])
    local = H * steps[slowest_region][0]
    sent: dict[tuple[int, int], float] = defaultdict(float)
    for _, region_sent, _ in steps.values():
        for k, v in region_sent.items():
            sent[k] += H * v
    leaders = {region: members[0] for region, members in regions.items()}
    R = len(leaders)
    wan, bound = 0.0, steps[slowest_region][2]
    if R > 1:
        order = sorted(leaders)
        pairs = {(leaders[a], leaders[b]): CLOUD_ONPREM in (a.split("/", 1)[0], b.split("/", 1)[0])
                 for x, a in enumerate(order) for b in order[x + 1:]}  # → one end is an on-prem site

        def pair_s(p: tuple[int, int]) -> float:
            return butterfly_pair_s(payload, R, topo.link(*p), site=pairs[p])

        slowest = max(pairs, key=pair_s)
        wan = pair_s(slowest)
        for a, b in pairs:
            sent[(a, b)] += 2 * payload / R
            sent[(b, a)] += 2 * payload / R
        bound = Bottleneck("link", wan, slowest, topo.link(*slowest))
    broadcast = 0.0
    for region, members in regions.items():
        leader = leaders[region]
        for i in members:
            receivers = topo.groups[i].count - (1 if i == leader else 0)
            if receivers:
                broadcast = max(broadcast, seconds(payload, topo.collective(leader, i).bandwidth_gbps))
                sent[(leader, i)] += receivers * payload
    if overlapped and wan <= local:  # the average hides behind the next K steps
        bound = steps[slowest_region][2]
    round_s = (max(local, wan) if overlapped else local + wan) + broadcast
    samples = H * sum(g.count * g.samples_per_step for g in topo.groups)
    compute = H * max(max(topo.groups[i].samples_per_step / topo.groups[i].samples_per_s for i in m)
                      for m in regions.values())
    per_peer = max(sent.get((i, j), 0.0) for i in range(len(topo.groups)) for j in range(len(topo.groups)))
    return SyncCost(
        samples_per_s=samples / round_s, time_per_round_s=round_s, samples_per_round=samples,
        compute_s=compute, comm_s=round_s - compute, bytes_per_peer_per_round=per_peer,
        bytes_per_s={k: v / round_s for k, v in sent.items()},
        bottleneck=bound or Bottleneck("compute", compute),
        good_samples_per_s=H * sum(g.count * g.samples_per_step * g.goodput for g in topo.groups) / round_s,
    )


@dataclass(frozen=True, slots=True)
class LocalSGD:
    local_steps: int
    name: SyncStrategyName = SyncStrategyName.LOCAL_SGD

    @classmethod
    def from_settings(cls, sync: SyncSettings, fit: HivemindFit) -> LocalSGD:
        return cls(sync.local_steps)

    def cost(self, topo: Topology, payload: float, workload: Workload) -> SyncCost:
        return _averaging_cost(topo, payload, self.local_steps, overlapped=False)


@dataclass(frozen=True, slots=True)
class ModelAveraging:
    """ma: the regions' servers average every K pushes (one per step), overlapped with the next K steps."""

    averaging_pushes: int
    name: SyncStrategyName = SyncStrategyName.MA

    @classmethod
    def from_settings(cls, sync: SyncSettings, fit: HivemindFit) -> ModelAveraging:
        return cls(sync.averaging_pushes)

    def cost(self, topo: Topology, payload: float, workload: Workload) -> SyncCost:
        return _averaging_cost(topo, payload, self.averaging_pushes, overlapped=True)


@dataclass(frozen=True, slots=True)
class AsgdGA:
    """``push_round_trips``: what a runtime's transport adds to each push, in round trips of that
    region's link to the home (:class:`geotrain.perf.protocol.Protocol`); a region's cycle, not the
    home region's compute, pays it."""

    accumulation_steps: int
    name: SyncStrategyName = SyncStrategyName.ASGD_GA
    push_round_trips: float = 0.0

    @classmethod
    def from_settings(cls, sync: SyncSettings, fit: HivemindFit) -> AsgdGA:
        return cls(sync.accumulation_steps)

    def cost(self, topo: Topology, payload: float, workload: Workload) -> SyncCost:
        A = self.accumulation_steps
        regions = topo.regions()
        steps = _region_steps(topo, payload)
        power = {r: sum(topo.groups[i].count * topo.groups[i].samples_per_s for i in m) for r, m in regions.items()}
        home = max(sorted(power), key=lambda r: power[r])
        server = regions[home][0]
        total, good, slowest_cycle, compute_max = 0.0, 0.0, 0.0, 0.0
        sent: dict[tuple[int, int], float] = defaultdict(float)
        bound: Bottleneck | None = None
        worst_share = 1.0
        for region, members in regions.items():
            step, region_sent, region_bound = steps[region]
            compute = A * step
            samples = A * sum(topo.groups[i].count * topo.groups[i].samples_per_step for i in members)
            leader = members[0]
            link = topo.link(leader, server)
            site = CLOUD_ONPREM in (region.split("/", 1)[0], home.split("/", 1)[0])
            push = 0.0 if region == home else (asgd_push_s(payload, link, site=site)
                                               + self.push_round_trips * link.rtt_ms / 1e3)
            cycle = max(compute, push)
            total += samples / cycle
            good += A * sum(topo.groups[i].count * topo.groups[i].samples_per_step * topo.groups[i].goodput
                            for i in members) / cycle
            slowest_cycle = max(slowest_cycle, cycle)
            compute_max = max(compute_max, compute)
            for k, v in region_sent.items():
                sent[k] += A * v / cycle
            if region != home:
                sent[(leader, server)] += payload / cycle
                sent[(server, leader)] += payload / cycle
                ratio = compute / push if push else 1.0
                if ratio < worst_share:
                    worst_share = ratio
                    bound = Bottleneck("link", push, (leader, server), link)
            elif bound is None and region_bound is not None:
                bound = region_bound
        return SyncCost(
            samples_per_s=total, time_per_round_s=slowest_cycle, samples_per_round=total * slowest_cycle,
            compute_s=compute_max, comm_s=max(0.0, slowest_cycle - compute_max),
            bytes_per_peer_per_round=2 * payload if len(regions) > 1 else 0.0,
            bytes_per_s=dict(sent), bottleneck=bound or Bottleneck("compute", compute_max),
            good_samples_per_s=good,
        )


Strategy = Hivemind | AllReduce | LocalSGD | ModelAveraging | AsgdGA
