"""GcpSource: Compute Engine prices of one project through the SDK clients (``google-cloud-billing``
over REST, ``google-cloud-compute``), with one retry policy and geotrain's errors for the SDK's."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from geotrain.clouds.gcp.credentials import (
    CREDENTIALS_HINT,
    PROJECT_HINT,
    default_credentials,
    environment_project,
)
from geotrain.clouds.gcp.errors import sdk_errors
from geotrain.clouds.retry import with_backoff
from geotrain.errors import CatalogError, CredentialsError, ProviderError, ThrottledError
from geotrain.pricing.live.base import (
    EVERY_OFFER,
    CheckReport,
    FetchRequest,
    Progress,
    Skipped,
    SourceResult,
    no_progress,
)
from geotrain.pricing.live.gcp.skus import (
    CLOUD,
    SPOT_PREFIX,
    UNITS,
    Rates,
    Zone,
    build_offers,
    bundled_zonal_offers,
    classify_sku,
    market_of,
    unit_price,
)

T = TypeVar("T")

SERVICE_DISPLAY_NAME = "Compute Engine"
VIEWER_HINT = "grant the account roles/compute.viewer on the project and enable the Cloud Billing API"

# operations, as IAM permission names (what `missing` lists)
OP_SERVICES = "cloudbilling.services.list"
OP_SKUS = "cloudbilling.services.skus.list"
OP_ZONES = "compute.zones.list"
OP_MACHINE_TYPES = "compute.machineTypes.list"
OP_ACCELERATOR_TYPES = "compute.acceleratorTypes.list"


@dataclass(frozen=True, slots=True)
class GcpClients:
    """The four SDK clients the source uses."""

    catalog: Any  # google.cloud.billing_v1.CloudCatalogClient (transport="rest")
    zones: Any  # google.cloud.compute_v1.ZonesClient
    machine_types: Any  # google.cloud.compute_v1.MachineTypesClient
    accelerator_types: Any  # google.cloud.compute_v1.AcceleratorTypesClient

    @classmethod
    def build(cls, credentials: Any, *, api_endpoint: str | None = None) -> GcpClients:
        """Clients on ``credentials``; ``api_endpoint`` (e.g. ``http://127.0.0.1:PORT``) points all four
        at one server (a fake), else each goes to its Google endpoint."""
        from google.api_core.client_options import ClientOptions
        from google.cloud import billing_v1, compute_v1

        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        kw = {"credentials": credentials, "client_options": options}
        return cls(catalog=billing_v1.CloudCatalogClient(transport="rest", **kw),
                   zones=compute_v1.ZonesClient(**kw), machine_types=compute_v1.MachineTypesClient(**kw),
                   accelerator_types=compute_v1.AcceleratorTypesClient(**kw))


def default_clients(project: str | None) -> tuple[GcpClients, str]:
    """Clients on Application Default Credentials, and the project (given, from the environment, or the
    credentials' own)."""
    credentials, project = default_credentials(project)
    return GcpClients.build(credentials), project


ClientFactory = Callable[[str | None], tuple[GcpClients, str]]


class GcpSource:
    """Compute Engine prices of one project, per zone (see the package docstring)."""

    cloud = CLOUD

    def __init__(self, project: str | None = None, *, clients: GcpClients | None = None,
                 client_factory: ClientFactory = default_clients,
                 zonal_offers: Collection[tuple[str, str, str]] | None = None,
                 sleep: Callable[[float], None] = time.sleep, attempts: int = 6, first_pause_s: float = 0.5,
                 page_size: int = 5000, timeout_s: float = 60.0) -> None:
        self._project = project
        self._clients = clients
        self._factory = client_factory
        self._zonal = frozenset(zonal_offers) if zonal_offers is not None else None
        self._sleep = sleep
        self._attempts = attempts
        self._first_pause_s = first_pause_s
        self._page_size = page_size
        self._timeout_s = timeout_s

    @classmethod
    def from_environment(cls) -> GcpSource:
        """A source on Application Default Credentials; the project from GOOGLE_CLOUD_PROJECT (or
        CLOUDSDK_CORE_PROJECT, GCLOUD_PROJECT), else the credentials' own. Nothing is read until used."""
        return cls(environment_project())

    # ---- PriceSource ----------------------------------------------------------------------------
    def fetch(self, request: FetchRequest, progress: Progress = no_progress) -> SourceResult:
        clients, project = self._resolve()
        calls: Counter[str] = Counter()
        progress(CLOUD, "global", "Compute Engine SKUs")
        rates = self._rates(clients, calls)
        progress(CLOUD, "global", "zones")
        zone_regions = self._zone_regions(clients, project, calls, request.regions)
        progress(CLOUD, "global", "machine types")
        machine_types, unreachable = self._aggregated(clients.machine_types, OP_MACHINE_TYPES, "machine_types",
                                                      project, calls, zone_regions)
        progress(CLOUD, "global", "accelerator types")
        accelerator_types, unreachable_gpus = self._aggregated(clients.accelerator_types, OP_ACCELERATOR_TYPES,
                                                               "accelerator_types", project, calls, zone_regions)
        for zone, why in unreachable_gpus.items():
            unreachable.setdefault(zone, why)

        observed = (request.observed_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
        stamp = observed.strftime("%Y-%m-%dT%H:%M:%SZ")
        zonal = self._zonal if self._zonal is not None else bundled_zonal_offers()
        regions = sorted(set(zone_regions.values()))
        rows: list[dict[str, Any]] = []
        skipped: list[Skipped] = []
        for region in sorted(set(request.regions or ()) - set(regions)):
            skipped.append(Skipped(region, EVERY_OFFER, f"not a Compute Engine region of project {project}"))
        for region in regions:
            failed = sorted(z for z, r in zone_regions.items() if r == region and z in unreachable)
            if failed:
                skipped.append(Skipped(region, EVERY_OFFER, f"Compute Engine could not list zone {failed[0]}: "
                                                            f"{unreachable[failed[0]]}"))
                continue
            zones = [Zone(z, region, machine_types.get(z, {}), _max_cards(accelerator_types.get(z, {})))
                     for z in sorted(zone_regions) if zone_regions[z] == region]
            progress(CLOUD, region, "offers")
            rows.extend(build_offers(region, zones, rates, zonal, request.accelerators, stamp))
        return SourceResult(CLOUD, tuple(rows), skipped=tuple(skipped),
                            signals={"capacity_hint": 0, "interruption_band": 0, "availability": 0},
                            calls=dict(calls))

    def check(self) -> CheckReport:
        try:
            clients, project = self._resolve()
        except CredentialsError as exc:
            return CheckReport(CLOUD, False, "", str(exc))
        from google.api_core import exceptions as gexc

        probes: list[tuple[str, Callable[[], Any]]] = [
            (OP_ZONES, lambda: next(iter(clients.zones.list(
                request={"project": project, "max_results": 1}, retry=None, timeout=self._timeout_s).pages))),
            (OP_MACHINE_TYPES, lambda: next(iter(clients.machine_types.aggregated_list(
                request={"project": project, "max_results": 1}, retry=None, timeout=self._timeout_s).pages))),
            (OP_ACCELERATOR_TYPES, lambda: next(iter(clients.accelerator_types.aggregated_list(
                request={"project": project, "max_results": 1}, retry=None, timeout=self._timeout_s).pages))),
            (OP_SERVICES, lambda: self._probe_service(clients)),
        ]
        missing: list[str] = []
        problems: list[str] = []
        for operation, probe in probes:
            try:
                probe()
            except (gexc.Forbidden, gexc.PermissionDenied):
                missing.append(operation)
            except (gexc.Unauthorized, gexc.Unauthenticated) as exc:
                return CheckReport(CLOUD, False, project, f"Google Cloud rejected the credentials ({_short(exc)}): "
                                   f"{CREDENTIALS_HINT}")
            except CredentialsError as exc:
                return CheckReport(CLOUD, False, project, str(exc))
            except (CatalogError, ProviderError) as exc:
                problems.append(f"{operation}: {exc}")
            except Exception as exc:  # noqa: BLE001 - check reports every failure as a line, it never raises
                if _is_refresh_error(exc):
                    return CheckReport(CLOUD, False, project, f"Google Cloud rejected the credentials "
                                       f"({_short(exc)}): {CREDENTIALS_HINT}")
                problems.append(f"{operation}: {_short(exc)}")
        if missing:
            return CheckReport(CLOUD, False, project, f"project {project}: permission refused for "
                               f"{', '.join(missing)}; {VIEWER_HINT}", tuple(missing))
        if problems:
            return CheckReport(CLOUD, False, project, f"project {project}: {'; '.join(problems)}")
        return CheckReport(CLOUD, True, project, f"project {project}: Compute Engine zones, machine types, "
                           "accelerator types and Cloud Billing Catalog prices are readable")

    # ---- reading --------------------------------------------------------------------------------
    def _resolve(self) -> tuple[GcpClients, str]:
        if self._clients is not None:
            if not self._project:
                raise CredentialsError(f"no Google Cloud project given: {PROJECT_HINT}", scope="gcp")
            return self._clients, self._project
        clients, project = self._factory(self._project)
        self._clients, self._project = clients, project
        return clients, project

    def _call(self, operation: str, calls: Counter[str], call: Callable[[], T]) -> T:
        """One API call: throttling retried, the SDK's errors turned into geotrain's."""
        from google.api_core import exceptions as gexc
        from google.protobuf.json_format import ParseError

        def once() -> T:
            calls[operation] += 1
            return call()

        def throttled(exc: BaseException) -> bool:
            return isinstance(exc, (gexc.TooManyRequests, gexc.ServiceUnavailable))

        try:
            return with_backoff(once, throttled=throttled, attempts=self._attempts,
                                first_pause_s=self._first_pause_s, sleep=self._sleep)
        except (gexc.TooManyRequests, gexc.ServiceUnavailable) as exc:
            raise ThrottledError(f"Google Cloud kept refusing {operation} ({_short(exc)}) after {self._attempts} "
                                 "tries; wait a minute and run the refresh again", scope="gcp") from exc
        except (gexc.Unauthorized, gexc.Unauthenticated) as exc:
            raise CredentialsError(f"Google Cloud rejected the credentials on {operation} ({_short(exc)}): "
                                   f"{CREDENTIALS_HINT}", scope="gcp") from exc
        except (gexc.Forbidden, gexc.PermissionDenied) as exc:
            raise CredentialsError(f"Google Cloud refused {operation} for project {self._project} "
                                   f"({_short(exc)}): {VIEWER_HINT}", scope="gcp") from exc
        except ParseError as exc:
            raise CatalogError(f"GCP {operation} answered in a shape geotrain does not understand ({_short(exc)}); "
                               "nothing was stored") from exc
        except gexc.GoogleAPICallError as exc:
            raise ProviderError(f"GCP {operation} failed ({_short(exc)}); try the refresh again later",
                                scope="gcp") from exc
        except Exception as exc:
            if _is_refresh_error(exc):
                raise CredentialsError(f"Google Cloud rejected the credentials ({_short(exc)}): "
                                       f"{CREDENTIALS_HINT}", scope="gcp") from exc
            if isinstance(exc, sdk_errors()):  # no answer: a transport, auth-transport or retry error
                raise ProviderError(f"GCP {operation} got no answer ({type(exc).__name__}: {_short(exc)}); check "
                                    "the network, then run the refresh again", scope="gcp") from exc
            raise

    def _pages(self, operation: str, calls: Counter[str], method: Callable[..., Any],
               request: dict[str, Any]) -> Iterator[Any]:
        """Every page of a list call, one call (with its retries) a page."""
        token = ""
        while True:
            page_request = dict(request, page_token=token) if token else dict(request)
            pager = self._call(operation, calls, lambda r=page_request: method(
                request=r, retry=None, timeout=self._timeout_s))
            page = next(iter(pager.pages))  # the page already fetched; the pager would fetch the next itself
            yield page
            token = page.next_page_token
            if not token:
                return

    def _service_name(self, clients: GcpClients, calls: Counter[str]) -> str:
        for page in self._pages(OP_SERVICES, calls, clients.catalog.list_services, {"page_size": 5000}):
            for service in page.services:
                if service.display_name == SERVICE_DISPLAY_NAME:
                    return service.name
        raise CatalogError(f"the Cloud Billing Catalog lists no service named {SERVICE_DISPLAY_NAME!r}; "
                           "geotrain cannot price GCP VMs without it (nothing was stored)")

    def _probe_service(self, clients: GcpClients) -> None:
        pager = clients.catalog.list_services(request={"page_size": 5000}, retry=None, timeout=self._timeout_s)
        if not any(service.display_name == SERVICE_DISPLAY_NAME for service in pager):
            raise CatalogError(f"the Cloud Billing Catalog lists no service named {SERVICE_DISPLAY_NAME!r}")

    def _rates(self, clients: GcpClients, calls: Counter[str]) -> Rates:
        service = self._service_name(clients, calls)
        host: dict[tuple[str, str, str, str], float] = {}
        gpu: dict[tuple[str, str, str], float] = {}
        for page in self._pages(OP_SKUS, calls, clients.catalog.list_skus,
                                {"parent": service, "page_size": self._page_size, "currency_code": "USD"}):
            for sku in page.skus:
                market = market_of(sku.category.usage_type, sku.description)
                if market is None or sku.category.resource_family != "Compute":
                    continue
                description = SPOT_PREFIX.sub("", sku.description.strip())
                kind, key = classify_sku(sku.category.resource_group, description)
                if kind is None:
                    continue
                usd = unit_price(sku, UNITS[kind])
                for region in sku.service_regions:
                    if kind in ("gpu", "slice"):
                        gpu.setdefault((region, market, key), usd)
                    else:
                        host.setdefault((region, market, key, kind), usd)
        return Rates(host, gpu)

    def _zone_regions(self, clients: GcpClients, project: str, calls: Counter[str],
                      regions: frozenset[str] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for page in self._pages(OP_ZONES, calls, clients.zones.list, {"project": project, "max_results": 500}):
            for zone in page.items:
                region = zone.region.rstrip("/").rsplit("/", 1)[-1]
                if not zone.name or not region:
                    raise CatalogError(f"GCP {OP_ZONES} answered a zone without a name or region ({zone.name!r}); "
                                       "nothing was stored")
                if zone.status == "DOWN" or (regions is not None and region not in regions):
                    continue
                out[zone.name] = region
        return out

    def _aggregated(self, client: Any, operation: str, field: str, project: str, calls: Counter[str],
                    zone_regions: dict[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """Per zone of ``zone_regions``: name -> entry of an aggregated list; and the zones reported
        unreachable, with the warning."""
        listed: dict[str, dict[str, Any]] = {}
        unreachable: dict[str, str] = {}
        for page in self._pages(operation, calls, client.aggregated_list, {"project": project, "max_results": 500}):
            for scope, scoped in page.items.items():
                zone = scope.removeprefix("zones/")
                if zone not in zone_regions:
                    continue
                entries = getattr(scoped, field)
                if not entries and scoped.warning and scoped.warning.code == "UNREACHABLE":
                    unreachable[zone] = f"{scoped.warning.code}: {scoped.warning.message}"
                    continue
                listed.setdefault(zone, {}).update({entry.name: entry for entry in entries})
        return listed, unreachable


def _max_cards(accelerator_types: dict[str, Any]) -> dict[str, int]:
    return {name: int(entry.maximum_cards_per_instance) for name, entry in accelerator_types.items()}


def _is_refresh_error(exc: BaseException) -> bool:
    from google.auth.exceptions import RefreshError

    return isinstance(exc, RefreshError)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."

