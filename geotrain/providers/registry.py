"""Providers by name, and the router that runs one plan on several of them.

``--provider`` takes one name or a comma-separated list: ``local`` (every node a process on this
machine, whatever cloud its offer names), or any of ``aws``, ``gcp``, ``azure``, ``onprem``, each
node going to the provider of its offer's cloud. Providers are imported on demand: a cloud SDK
loads only when its provider is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError, NotFoundError, ProviderError
from geotrain.providers.base import (LOCAL_PROVIDER, Capabilities, Closing, LaunchRequest, LoginCommand, NodeInfo, PeerRules,
                                     NodeLink, NodeLogin, NodeProcess, Provider, ProviderFactory)

CLOUD_PROVIDERS = {  # name (= the offers' cloud) → module:class with a from_environment(**settings)
    "aws": "geotrain.providers.aws:AwsProvider",
    "gcp": "geotrain.providers.gcp:GcpProvider",
    "azure": "geotrain.providers.azure:AzureProvider",
    "onprem": "geotrain.providers.onprem:OnPremProvider",
}
PROVIDER_NAMES = (LOCAL_PROVIDER, *CLOUD_PROVIDERS)


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """What the cloud providers need from the launch: where the launcher is (the only address the
    run's firewall lets reach the node agents) and the on-prem inventory (hosts to SSH to)."""

    control_cidr: str | None = None
    inventory: Path | None = None
    identities: tuple[tuple[str, str], ...] = ()  # (cloud, identity its nodes get: geotrain.providers.identity)


def parse_names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    unknown = [n for n in names if n not in PROVIDER_NAMES]
    if not names or unknown:
        raise InputError(f"--provider: {', '.join(unknown) or repr(text)} is not a provider; providers: "
                         f"{', '.join(PROVIDER_NAMES)} (several clouds: a comma-separated list, e.g. aws,gcp)")
    if LOCAL_PROVIDER in names and len(names) > 1:
        raise InputError("--provider: local runs every node on this machine; it does not mix with clouds")
    return names


def provider_class(name: str) -> ProviderFactory:
    module_name, _, class_name = CLOUD_PROVIDERS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"provider {name} needs its SDK: pip install 'geotrain[{name}]' ({exc})") from exc
    return getattr(module, class_name)


def make_provider(names: Sequence[str], settings: ProviderSettings) -> Provider:
    """One provider, or a :class:`Router` over several."""
    made: dict[str, Provider] = {}
    for name in names:
        cls = provider_class(name)
        made[name] = cls.from_environment(**_kwargs(name, settings))
    if len(made) == 1:
        return next(iter(made.values()))
    return LinkedRouter(made) if all(isinstance(p, NodeLink) for p in made.values()) else Router(made)


def dry_run_calls(name: str, request: LaunchRequest, settings: ProviderSettings) -> list[dict]:
    """The calls provider ``name`` would make to launch ``request``, made without credentials or any call."""
    cls = provider_class(name)
    return cls.for_dry_run(**_kwargs(name, settings)).dry_run(request)


def _kwargs(name: str, settings: ProviderSettings) -> dict[str, object]:
    kwargs = {"control_cidr": settings.control_cidr, "instance_role": dict(settings.identities).get(name)} \
        if name != "onprem" else {"inventory": settings.inventory}
    return {k: v for k, v in kwargs.items() if v is not None}


class Router:
    """Several providers as one: a launch goes to the provider of its offer's cloud; list merges them
    (by launch time); a node's other calls go to the provider that has it."""

    def __init__(self, providers: dict[str, Provider]) -> None:
        if not providers:
            raise ValueError("a router needs at least one provider")
        self.providers = dict(providers)
        self.name = ",".join(self.providers)
        caps = [p.capabilities for p in self.providers.values()]
        notices = [c.notice_s for c in caps if c.notice_s is not None]
        self.capabilities = Capabilities(spot=any(c.spot for c in caps), notice_s=min(notices) if notices else None,
                                         preemption_injection=False, shared_host=all(c.shared_host for c in caps))
        self._owner: dict[str, Provider] = {}

    def for_cloud(self, cloud: str) -> Provider:
        provider = self.providers.get(cloud)
        if provider is None:
            raise ProviderError(f"no provider for cloud {cloud} (this launch has {self.name}); "
                                f"add it to --provider")
        return provider

    def check_credentials(self) -> None:
        for provider in self.providers.values():
            provider.check_credentials()

    def launch(self, request: LaunchRequest) -> NodeInfo:
        provider = self.for_cloud(request.offer.location.cloud)
        node = provider.launch(request)
        self._owner[node.node_id] = provider
        return node

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        nodes: list[NodeInfo] = []
        for provider in self.providers.values():
            for node in provider.list(run_id):
                self._owner[node.node_id] = provider
                nodes.append(node)
        return sorted(nodes, key=lambda n: n.launched_at)

    def _provider_of(self, node_id: str) -> Provider:
        if node_id not in self._owner:
            self.list()
        provider = self._owner.get(node_id)
        if provider is None:
            raise NotFoundError(f"node {node_id} is unknown to {self.name}")
        return provider

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        self._provider_of(node_id).terminate(node_id, reason=reason)

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> NodeProcess:
        return self._provider_of(node_id).start(node_id, argv, env, log_path, cwd=cwd, files=files)

    def booted(self, node_id: str) -> bool | None:
        """The owning provider's :class:`~geotrain.providers.bootwatch.BootWatch` (ready, where it has none)."""
        from geotrain.providers.bootwatch import BootWatch

        provider = self._provider_of(node_id)
        return provider.booted(node_id) if isinstance(provider, BootWatch) else True

    def login_command(self, node_id: str, command: Sequence[str] = ()) -> LoginCommand | None:
        provider = self._provider_of(node_id)
        return provider.login_command(node_id, command) if isinstance(provider, NodeLogin) else None

    def dry_run(self, request: LaunchRequest) -> list[dict]:
        return self.for_cloud(request.offer.location.cloud).dry_run(request)  # type: ignore[attr-defined]

    def served_clouds(self) -> frozenset[str]:
        return frozenset(self.providers)

    def close(self) -> None:
        for provider in self.providers.values():
            if isinstance(provider, Closing):
                provider.close()


class LinkedRouter(Router):
    """A router over providers that all reach their nodes over the launcher's own connection
    (:class:`~geotrain.providers.base.NodeLink`): so does the router."""

    def ship(self, node_id: str, sources: Sequence[tuple[Path, str]]) -> None:
        provider = self._provider_of(node_id)
        assert isinstance(provider, NodeLink)
        provider.ship(node_id, sources)

    def store_address(self, node_id: str, local_port: int) -> tuple[str, int]:
        provider = self._provider_of(node_id)
        assert isinstance(provider, NodeLink)
        return provider.store_address(node_id, local_port)

    def admit_peers(self, run_id: str, addresses: Sequence[str]) -> None:
        for provider in self.providers.values():
            if isinstance(provider, PeerRules):
                provider.admit_peers(run_id, addresses)
