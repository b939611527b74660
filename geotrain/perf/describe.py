"""An estimate's bottleneck, in words."""

from __future__ import annotations

from geotrain.domain import Offer
from geotrain.perf.model import Estimate


def _where(offer: Offer) -> str:
    loc = offer.location
    return f"{loc.cloud}/{loc.region}" + (f"/{loc.zone}" if loc.zone else "")


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


def bottleneck_words(result: Estimate) -> str:
    """The bottleneck in one sentence."""
    b = result.bottleneck
    round_s = result.time_per_round_s
    if b is None or b.what == "compute":
        return "compute: communication does not limit this mix"
    share = f"{_s(b.seconds)} of each {_s(round_s)} round"
    if b.what == "overhead":
        return (f"the averaging protocol's own overhead ({_s(b.seconds)} per round, fitted on one-zone runs) "
                f"outweighs moving the data; no link is the limit")
    a, c = (result.groups[i].offer for i in b.groups)
    if b.what == "site uplink":
        return f"the uplink of on-prem site {a.location.region} ({a.uplink_gbps:g} Gbit/s): {share}"
    link = b.link
    how = {"measured": "measured", "derived": f"derived from the measured pair {link.derived_from}",
           "modelled": "RTT measured, bandwidth modelled"}.get(link.basis, "estimated")
    if b.what == "link aggregate" and link.aggregate_gbps is None:
        return (f"all streams between {_where(a)} and {_where(c)} together, through one path that carries "
                f"{link.bandwidth_gbps * 1000:.0f} Mbit/s as one stream ({how}; no multi-stream figure for it: "
                f"give aggregate_gbps in the site's links to count more): {share}")
    if b.what == "link aggregate":
        return (f"all streams between {_where(a)} and {_where(c)} together ({link.aggregate_gbps:.2f} Gbit/s "
                f"aggregate, one stream per peer at {link.bandwidth_gbps * 1000:.0f} Mbit/s): {share}")
    if b.what == "node egress":
        return (f"each {_where(a)} node's own egress ({link.bandwidth_gbps:.2f} Gbit/s single stream, {how}): {share}")
    return (f"the link {_where(a)} <-> {_where(c)} ({link.link_class.value.replace('_', ' ')}, "
            f"{link.bandwidth_gbps * 1000:.0f} Mbit/s {_carried(link, how)}, {link.rtt_ms:.1f} ms RTT): {share}")


def _carried(link, how: str) -> str:  # noqa: ANN001 - a LinkEstimate
    """What the link's figure is: one stream, or NCCL's streams at most the machines' NIC."""
    if link.nic_capped:
        return "the machines' NIC as their cloud sells it (sustained), under NCCL's streams"
    if link.streams > 1:
        return f"over NCCL's {link.streams} streams, each {how}"
    return f"single stream, {how}"
