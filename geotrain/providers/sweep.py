"""What ``geotrain cleanup --cloud`` finds and does: one :class:`Swept` per cloud resource of a geotrain
run, found by the run's tag or label alone (no state file, no ledger: any machine with the account's
credentials finds them). Each cloud's sweep is ``geotrain.providers.<cloud>.sweep.sweep``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Say = Callable[["Swept"], None]  # told of each resource as it is found and once it is released


@dataclass(frozen=True, slots=True)
class Swept:
    cloud: str
    region: str  # region or zone ("global" for a GCP firewall rule, the resource group for Azure's)
    kind: str  # instance, volume, address, network-interface, security-group, disk, firewall, ...
    resource_id: str
    run_id: str  # the run its tag or label names ("" where the tag is cut or hashed)
    found: str  # its state when found (running, available, ...)
    action: str  # "terminated", "deleted", "would delete", "failed: ...", "left: ..."
    released: bool  # gone, or going (an instance shutting down); False: still there (or a dry run)

    def line(self) -> str:
        run = f" (run {self.run_id})" if self.run_id else ""
        return f"{self.cloud} {self.region} {self.kind} {self.resource_id}{run} [{self.found}]: {self.action}"
