"""What of a mix's training traffic crosses the internet unencrypted: the one sentence that ``plan``
and ``launch --dry-run`` print about it.

Between nodes, training traffic (torch.distributed's gloo or NCCL, geotrain's own WAN transport) is
plain TCP: inside one private network (``Location.network_scope``: an AWS region's default VPC, an
Azure region's VNet, a GCP network across all its regions) or one on-prem site it stays there; between
them (other regions of AWS or Azure, other clouds or sites) it crosses the internet as it is. The launcher's
own traffic (commands, files, the rendezvous store) rides its SSH connections where the provider uses
them, and the node agents' plain HTTP where it does not.
"""

from __future__ import annotations

from collections.abc import Iterable

from geotrain.domain import Location

SSH_CLOUDS = frozenset({"aws", "azure", "gcp", "onprem"})  # providers whose control traffic rides the launcher's SSH


CLOUDS_WITH_NETWORKS = frozenset({"aws", "azure", "gcp"})  # whose run firewalls admit only the run's own network
PEER_RULE_CLOUDS = frozenset({"aws", "azure", "gcp"})  # whose providers admit the run's other nodes by public address


def unjoined_networks(locations: Iterable[Location]) -> tuple[str, ...]:
    """The private networks of a mix whose nodes could not reach each other, or (): a run's firewall on
    a cloud admits the run's nodes of its own network, and those of other networks only where the
    provider makes per-peer rules for their public addresses (``PEER_RULE_CLOUDS``; a VM binds its
    public address at boot, ``providers.startup``). So a mix of several networks trains when every node
    is on such a cloud (AWS or Azure regions, several clouds); with an on-prem site beside a cloud it
    cannot (a site's machines bind no public address, and its NAT is the user's). Sites alone are the
    user's own network to join."""
    locations = list(locations)
    places = tuple(sorted({loc.network_scope for loc in locations}))
    if len(places) > 1 and any(loc.cloud in CLOUDS_WITH_NETWORKS for loc in locations) and \
            not all(loc.cloud in PEER_RULE_CLOUDS for loc in locations):
        return places
    return ()


def plaintext_words(locations: Iterable[Location]) -> str | None:
    """The sentence, or None when nothing of the mix's training traffic leaves one network."""
    locations = list(locations)
    places = sorted({loc.network_scope for loc in locations})
    clouds = sorted({loc.cloud for loc in locations})
    words = []
    if len(places) > 1:
        names = ", ".join(places)
        words.append(f"training traffic between {names} crosses the internet unencrypted (plain TCP between the "
                     "nodes' public addresses): use a strategy and data you accept in the clear, or keep the mix "
                     "in one region or site")
    plain_control = [cloud for cloud in clouds if cloud not in SSH_CLOUDS and cloud != "local"]
    if plain_control:
        words.append(f"the launcher talks to the {', '.join(plain_control)} node agents over plain HTTP with the "
                     "run's token (not yet over SSH)")
    return "; ".join(words) if words else None
