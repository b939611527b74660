"""Whether a node has booted: :class:`BootWatch`, the optional seam beside
:class:`~geotrain.providers.base.Provider` that lets a launcher wait for many nodes at once and give up
the moment it is asked to stop (``geotrain.launcher.boot.wait_booted``), and :func:`agent_answers`, the
one non-blocking look at a node agent that the cloud providers' ``booted`` ends with.

A provider that lacks ``booted`` has nodes that are ready once launched (the local provider's processes).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Protocol, runtime_checkable

from geotrain.providers.remote import AgentEndpoint

PROBE_TIMEOUT_S = 5.0  # one look at an agent; a VM whose firewall drops packets costs this much per look


@runtime_checkable
class BootWatch(Protocol):
    """A provider that can say, in one short look (a few API calls, no waiting), how a node's boot goes."""

    def booted(self, node_id: str) -> bool | None:
        """True: the node is up and its agent answers (``start`` will not wait); False: it ended, or will
        never answer (another run's token); None: not yet. Unknown ``node_id`` → NotFoundError; a cloud
        that does not answer → the provider's error (the caller looks again)."""
        ...


def agent_answers(endpoint: AgentEndpoint, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """One ``GET /v1/health`` with the run's token: True if the agent answers, False if it refuses the
    token (a node of another run at that address), None if nothing answers (still booting)."""
    request = urllib.request.Request(endpoint.url + "/v1/health", method="GET",
                                     headers={"Authorization": f"Bearer {endpoint.token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - the node's own address
            answer.read()
            return True
    except urllib.error.HTTPError as exc:
        return False if exc.code in (401, 403) else None
    except (urllib.error.URLError, OSError, ValueError):
        return None
