"""Bytes from the wire: where the provider's nodes talk over links it can count (the local provider
with emulated links), the launcher records what the kernel counted per directed link, instead of
what the workers say they sent, so a user's own script is metered too and the cost report bills
what crossed each link."""

from __future__ import annotations

from geotrain.domain import link_class
from geotrain.ledger import Ledger
from geotrain.providers.base import Networked, Provider


class WireMeter:
    """Records, for one run, the growth of the provider network's byte counters since the last call."""

    def __init__(self, provider: Provider, ledger: Ledger, run_id: str) -> None:
        self.network = provider.network if isinstance(provider, Networked) else None
        self.provider, self.ledger, self.run_id = provider, ledger, run_id
        self._recorded: dict[tuple[str, str], int] = {}

    @property
    def active(self) -> bool:
        return self.network is not None and hasattr(self.network, "wire_bytes")

    def record(self, generation: int) -> int:
        """Write the new bytes per link as rows of ``generation``; the bytes written."""
        if not self.active:
            return 0
        where = {n.node_id: n.location for n in self.provider.list(self.run_id)}
        rows = []
        for (src, dst), total in sorted(self.network.wire_bytes().items()):
            new = total - self._recorded.get((src, dst), 0)
            if new <= 0 or src not in where or dst not in where:
                continue
            self._recorded[(src, dst)] = total
            rows.append((src, dst, link_class(where[src], where[dst]).value, new))
        self.ledger.add_link_bytes(self.run_id, generation, rows)
        return sum(r[3] for r in rows)
