"""The closed-form terms of a round, shared by the perf model's strategies
(:mod:`geotrain.perf.strategies`, whose docstring derives them) and the planner's linear model
(``geotrain.planning.oracle``): one formula, two users. Payloads in bytes, bandwidths in Gbit/s,
times in seconds."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from geotrain.domain import WAN_STREAMS
from geotrain.perf.network import LinkEstimate
from geotrain.perf.nic import nccl_streams

if TYPE_CHECKING:
    from geotrain.perf.hivemind_fit import HivemindFit

# DDP (torch.nn.parallel.DistributedDataParallel): gradients are all-reduced in buckets of
# ``bucket_cap_mb`` = 25 MiB (its default) as the backward pass fills them
DDP_BUCKET_BYTES = 25 * 2**20
GRADIENT_BYTES = 4  # bytes per gradient in a bucket (fp32 parameters; the wire precision is cast in a hook)
BACKWARD_SHARE = 2 / 3  # of a training step: the backward pass costs about twice the forward


def share(n: int) -> float:
    """v(n) = 2(n−1)/n: the share of the parameters each node sends in an all-reduce."""
    return 2 * (n - 1) / n


def nccl_link(link: LinkEstimate, cloud: str, *nics: float | None) -> LinkEstimate:
    """``link`` as NCCL's socket transport uses it between two machines of one region:
    ``min(S_cloud · bw, agg, nic_a, nic_b)`` (:mod:`geotrain.perf.nic`)."""
    streams = nccl_streams(cloud)
    gbps = link.streams_gbps(streams)
    nic = min((n for n in nics if n), default=None)
    capped = nic is not None and nic < gbps
    if capped:
        gbps = nic
    if gbps == link.bandwidth_gbps and streams == 1:
        return link
    return replace(link, bandwidth_gbps=gbps, streams=streams, nic_capped=capped)


def ddp_bucket_share(parameters: int) -> float:
    """b: the share of the gradients in DDP's last bucket (``DDP_BUCKET_BYTES`` of fp32 gradients),
    whose all-reduce cannot start before the backward pass ends."""
    return min(1.0, DDP_BUCKET_BYTES / (GRADIENT_BYTES * max(parameters, 1)))


def ddp_step_s(compute_s: float, comm_s: float, bucket_share: float) -> float:
    """One DDP step: ``max(τ + b·T, (1 − β)·τ + T)``; the all-reduce overlaps the backward pass
    (``β`` of the step), all but the last bucket."""
    return max(compute_s + bucket_share * comm_s, (1 - BACKWARD_SHARE) * compute_s + comm_s)


def seconds(payload_bytes: float, gbps: float) -> float:
    return payload_bytes * 8 / (gbps * 1e9)


def hivemind_group(n, group_size: int | None):  # noqa: ANN001, ANN201 - a count, or an array of counts
    """m = min(n, G): the peers of one averaging group, where Hivemind's matchmaking forms groups of
    at most ``G`` (its ``target_group_size``; None: one group of every peer)."""
    if group_size is None:
        return n
    return min(n, group_size) if isinstance(n, int | float) else np.minimum(n, group_size)


def hivemind_reach(n, group_size: int | None):  # noqa: ANN001, ANN201
    """(m − 1)/(n − 1): the share of the other peers in a peer's group (groups drawn at random)."""
    if group_size is None:
        return 1.0
    m = hivemind_group(n, group_size)
    if isinstance(n, int | float):
        return (m - 1) / (n - 1) if n > 1 else 1.0
    return np.where(n > 1, (m - 1) / np.maximum(n - 1, 1), 1.0)


def hivemind_overhead_s(fit: HivemindFit, n: int, parameters: int, host: float = 1.0,
                        group_size: int | None = None) -> float:
    """h·(f0 + β·m + γ·(P/1e9)); ``host`` = h of the slowest node (1: the fastest host, a lower bound);
    m = min(n, G), the peers of one averaging group."""
    m = hivemind_group(n, group_size)
    return host * (fit.round_floor_s + fit.per_peer_s * m + fit.per_gparam_s * parameters / 1e9)


def hivemind_pair_s(payload: float, n: int, link: LinkEstimate, group_size: int | None = None) -> float:
    """A pair of one group: ``2W/m`` each way in the two phases, a round trip each."""
    return seconds(2 * payload / hivemind_group(n, group_size), link.bandwidth_gbps) + 2 * link.rtt_ms / 1e3


def hivemind_node_egress_s(payload: float, n: int, cap_gbps: float, group_size: int | None = None) -> float:
    """A node's own egress: ``2W/m`` to each of the m − 1 others of its group."""
    m = hivemind_group(n, group_size)
    return seconds((m - 1) * 2 * payload / m, cap_gbps)


def hivemind_site_s(payload: float, n: int, inside: int, uplink_gbps: float, group_size: int | None = None) -> float:
    """What leaves an on-prem site of ``inside`` peers: ``2W/m`` from each to each peer outside it that
    shares its group, ``inside·(n − inside)·(m − 1)/(n − 1)`` pairs."""
    m = hivemind_group(n, group_size)
    return seconds(inside * (n - inside) * hivemind_reach(n, group_size) * 2 * payload / m, uplink_gbps)


def hivemind_aggregate_s(payload: float, n: int, senders: int, receivers: int, aggregate_gbps: float,
                         group_size: int | None = None) -> float:
    """One sender (a VM, or an on-prem site of ``senders`` machines) sends ``2W/m`` to each of
    ``receivers`` nodes in another region that share its group, all through one aggregate cap."""
    m = hivemind_group(n, group_size)
    return seconds(senders * receivers * hivemind_reach(n, group_size) * 2 * payload / m, aggregate_gbps)


def ring_pair_s(payload: float, n: int, link: LinkEstimate) -> float:
    return seconds(share(n) * payload, link.bandwidth_gbps) + (n - 1) * link.rtt_ms / 1e3


def butterfly_pair_s(payload: float, n: int, link: LinkEstimate, *, site: bool = False) -> float:
    """One pair of an all-reduce of ``n`` members over the runtime's WAN transport: ``2W/n`` each
    way over the pair's ``WAN_STREAMS`` streams (``site``: one end is an on-prem site, whose path
    they share), and one round trip (the two exchanges' one-way trips)."""
    return seconds(2 * payload / n, link.streams_gbps(WAN_STREAMS, site=site)) + link.rtt_ms / 1e3


def asgd_push_s(payload: float, link: LinkEstimate, *, site: bool = False) -> float:
    """Push accumulated gradients and pull parameters back: 2W over the link's ``WAN_STREAMS``
    streams (``site``: one end is an on-prem site, whose path they share), plus a round trip."""
    return seconds(2 * payload, link.streams_gbps(WAN_STREAMS, site=site)) + link.rtt_ms / 1e3
