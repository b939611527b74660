"""AzureSource: Azure offers through the Retail Prices API, azure-mgmt-compute and Resource Graph, its
clients (credential, subscription, retry policy) and ``check``."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from geotrain.clouds.azure.clients import (
    DEFAULT_ARM_URL,
    SUBSCRIPTION_ENV,
    default_credential,
    no_throttle_retry_policy,
)
from geotrain.clouds.geography import continent_of
from geotrain.clouds.retry import with_backoff
from geotrain.errors import CatalogError, CredentialsError
from geotrain.pricing.interruption import interruptions_per_hour_for_band
from geotrain.pricing.live.azure.prices import Price, RegionFailed, RetailThrottled, retail_prices
from geotrain.pricing.live.azure.signals import (
    CLOUD,
    GRAPH_API_VERSION,
    eviction_bands,
    placement_hints,
    status_code,
)
from geotrain.pricing.live.azure.skus import list_skus, specs_of
from geotrain.pricing.live.base import (
    EVERY_OFFER,
    CheckReport,
    FetchRequest,
    Progress,
    Skipped,
    SourceResult,
    no_progress,
    offer_row,
)
from geotrain.pricing.schema import utc_now

DEFAULT_PRICES_URL = "https://prices.azure.com"
ARM_SCOPE = "https://management.azure.com/.default"
SOURCE = "azure-retail-prices"

_LOGIN_HINT = (f"sign in with `az login` (or set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET) "
               f"and set {SUBSCRIPTION_ENV} to the subscription to price")


def _throttled(exc: BaseException) -> bool:
    return isinstance(exc, RetailThrottled) or status_code(exc) == 429


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


class AzureSource:
    """Azure offers (GPU VM sizes, spot and on-demand, region-wide) through the Retail Prices API,
    azure-mgmt-compute and Resource Graph; see the package docstring for every call and assumption.

    ``credential``: an azure-core TokenCredential (default: DefaultAzureCredential). ``subscription_id``:
    default ``$AZURE_SUBSCRIPTION_ID``. ``prices_url`` / ``arm_url``: endpoints (tests: a local fake).
    ``session``: a ``requests.Session`` for the Retail Prices API. ``enforce_https``: False lets the
    bearer token go to an http:// ARM endpoint (local fakes only). ``arm_client_kwargs``: more keyword
    arguments for ComputeManagementClient (e.g. ``connection_verify`` for an https fake).
    ``retry_total``: azure-core retries of transient non-429 failures. ``sleep``, ``backoff_attempts``,
    ``first_pause_s``: for :func:`with_backoff`. ``placement_count``: ``desiredCount`` of placement
    score requests (and the capacity hint of a "High" score).
    """

    cloud = CLOUD

    def __init__(self, *, credential: Any = None, subscription_id: str | None = None,
                 prices_url: str = DEFAULT_PRICES_URL, arm_url: str = DEFAULT_ARM_URL,
                 session: Any = None, enforce_https: bool = True,
                 arm_client_kwargs: Mapping[str, Any] | None = None, retry_total: int = 3,
                 timeout_s: float = 60.0, sleep: Callable[[float], None] = time.sleep,
                 backoff_attempts: int = 6, first_pause_s: float = 0.5, placement_count: int = 8,
                 placement_regions_per_call: int = 8, placement_sizes_per_call: int = 5,
                 environ: Mapping[str, str] | None = None) -> None:
        self._credential = credential
        env = os.environ if environ is None else environ
        self._subscription_id = subscription_id if subscription_id is not None else env.get(SUBSCRIPTION_ENV, "")
        self._prices_url = prices_url.rstrip("/")
        self._arm_url = arm_url.rstrip("/")
        self._session = session
        self._enforce_https = enforce_https
        self._arm_client_kwargs = dict(arm_client_kwargs or {})
        self._retry_total = retry_total
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._attempts = backoff_attempts
        self._first_pause_s = first_pause_s
        self._placement_count = placement_count
        self._placement_regions = placement_regions_per_call
        self._placement_sizes = placement_sizes_per_call
        self._client: Any = None

    @classmethod
    def from_environment(cls) -> AzureSource:
        """The source with the SDK's standard credential chain and ``$AZURE_SUBSCRIPTION_ID``."""
        return cls()

    # ---- clients ----------------------------------------------------------------------------------
    def _compute(self) -> Any:
        if self._client is not None:
            return self._client
        if not self._subscription_id:
            raise CredentialsError(f"Azure: no subscription id; set {SUBSCRIPTION_ENV} "
                                   f"(`az account show --query id -o tsv`) after `az login`")
        try:
            from azure.mgmt.compute import ComputeManagementClient
        except ImportError as exc:
            raise CredentialsError("Azure: the Azure SDK is not installed; pip install 'geotrain[azure]', "
                                   f"then {_LOGIN_HINT}") from exc
        credential = self._credential
        if credential is None:
            credential = default_credential()
        kwargs: dict[str, Any] = {"retry_policy": no_throttle_retry_policy(self._retry_total),
                                  "connection_timeout": self._timeout_s, "read_timeout": self._timeout_s}
        kwargs.update(self._arm_client_kwargs)
        self._client = ComputeManagementClient(credential, self._subscription_id, base_url=self._arm_url, **kwargs)
        return self._client

    def _http(self) -> Any:
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    def _call_options(self) -> dict[str, Any]:
        return {} if self._enforce_https else {"enforce_https": False}

    def _backoff(self, call: Callable[[], Any]) -> Any:
        return with_backoff(call, throttled=_throttled, attempts=self._attempts, first_pause_s=self._first_pause_s,
                            sleep=self._sleep)

    # ---- fetch ------------------------------------------------------------------------------------
    def fetch(self, request: FetchRequest, progress: Progress = no_progress) -> SourceResult:
        from azure.core.exceptions import (
            AzureError,
            ClientAuthenticationError,
            DecodeError,
            DeserializationError,
            HttpResponseError,
        )

        observed = observed_text(request.observed_at or utc_now())
        calls: Counter[str] = Counter()
        signals: Counter[str] = Counter()
        skipped: list[Skipped] = []
        asked = frozenset(r.lower() for r in request.regions) if request.regions else None

        client = self._compute()
        progress(self.cloud, "", "resource SKUs")
        try:
            skus = self._backoff(lambda: list_skus(client, calls, self._call_options()))
        except ClientAuthenticationError as exc:
            raise CredentialsError(f"Azure rejected the credentials ({_short(exc)}); {_LOGIN_HINT}") from exc
        except (DeserializationError, DecodeError) as exc:
            raise CatalogError(f"Azure resource SKUs: an answer of unexpected shape ({_short(exc)})") from exc
        except HttpResponseError as exc:
            if status_code(exc) == 401:
                raise CredentialsError(f"Azure rejected the credentials ({_short(exc)}); {_LOGIN_HINT}") from exc
            if status_code(exc) == 403:
                raise CredentialsError(
                    f"Azure refused to list resource SKUs for subscription {self._subscription_id} "
                    f"(HTTP {status_code(exc)}: {_short(exc)}); give the identity the Reader role "
                    f"(Microsoft.Compute/skus/read), or {_LOGIN_HINT}") from exc
            if status_code(exc) == 404:
                raise CredentialsError(f"Azure: subscription {self._subscription_id} was not found; check "
                                       f"{SUBSCRIPTION_ENV} (`az account list`)") from exc
            why = f"resource SKUs could not be listed (HTTP {status_code(exc)}: {_short(exc)}); try again later"
            return SourceResult(self.cloud, (), tuple(Skipped(r, EVERY_OFFER, why) for r in sorted(asked or {"*"})), dict(signals),
                                dict(calls))
        except AzureError as exc:  # unreachable (connection, timeout): every region is skipped
            why = f"resource SKUs could not be listed ({type(exc).__name__}: {_short(exc)}); try again later"
            return SourceResult(self.cloud, (), tuple(Skipped(r, EVERY_OFFER, why) for r in sorted(asked or {"*"})), dict(signals),
                                dict(calls))

        specs = specs_of(skus, asked, request.accelerators, signals)
        regions = sorted(asked) if asked is not None else sorted({spec.region for spec in specs.values()})
        prices: dict[tuple[str, str, str], Price] = {}
        for region in regions:
            wanted = {size.lower(): spec for (r, size), spec in specs.items() if r == region}
            if not wanted:
                skipped.append(Skipped(region, EVERY_OFFER, "no GPU VM size of a series geotrain knows is offered "
                                                            f"there to subscription {self._subscription_id}"))
                continue
            progress(self.cloud, region, "spot and on-demand prices")
            try:
                prices.update(retail_prices(region, wanted, calls, signals, prices_url=self._prices_url,
                                            http=self._http, backoff=self._backoff, timeout_s=self._timeout_s))
            except RegionFailed as exc:
                skipped.append(Skipped(region, EVERY_OFFER, str(exc)))
            except RetailThrottled:
                skipped.append(Skipped(region, EVERY_OFFER, f"Retail Prices API still throttling after "
                                                            f"{self._attempts} tries; try again later"))

        spot = sorted({(region, size) for region, size, market in prices if market == "spot"})
        bands = eviction_bands(client, spot, calls, signals, progress, arm_url=self._arm_url,
                               backoff=self._backoff, call_options=self._call_options())
        capacity = placement_hints(client, spot, calls, signals, progress, arm_url=self._arm_url,
                                   subscription_id=self._subscription_id,
                                   placement_count=request.gang_nodes or self._placement_count,
                                   regions_per_call=self._placement_regions,
                                   sizes_per_call=self._placement_sizes, backoff=self._backoff,
                                   call_options=self._call_options())

        rows = []
        for (region, size, market), price in sorted(prices.items()):
            spec = specs[(region, size)]
            continent = continent_of(self.cloud, region)
            fields: dict[str, Any] = {}
            if market == "on_demand":
                fields = {"interruption_band": "none", "interruptions_per_hour": 0.0}
            else:
                band = bands.get((region, size.lower()))
                if band is not None:
                    fields = {"interruption_band": band, "interruptions_per_hour": interruptions_per_hour_for_band(band)}
                    signals["interruption_band"] += 1
                hint = capacity.get((region, size.lower()))
                if hint is not None:
                    fields["capacity_hint"] = hint
                    signals["capacity_hint"] += 1
            rows.append(offer_row(
                cloud=self.cloud, region=region, zone="", continent=continent.value if continent else "",
                instance_type=spec.instance_type, accelerator=spec.accelerator,
                accelerator_count=spec.accelerator_count, vcpus=spec.vcpus, memory_gib=spec.memory_gib,
                market=market, price_usd_per_hour=price.price_usd_per_hour, observed_at=observed, source=SOURCE,
                **fields))
        return SourceResult(self.cloud, tuple(rows), tuple(skipped), dict(signals), dict(calls))

    # ---- check ------------------------------------------------------------------------------------
    def check(self) -> CheckReport:
        """Lists one page of resource SKUs (proves the credentials and Microsoft.Compute/skus/read) and runs
        a one-row Resource Graph query (Microsoft.ResourceGraph/resources/read, for eviction rates)."""
        try:
            from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError
            from azure.core.rest import HttpRequest
        except ImportError:
            return CheckReport(self.cloud, False, "", "the Azure SDK is not installed; pip install 'geotrain[azure]'")
        sub = self._subscription_id
        try:
            client = self._compute()
        except CredentialsError as exc:
            return CheckReport(self.cloud, False, "", exc.message)
        missing: list[str] = []
        try:
            pager = client.resource_skus.list(**self._call_options()).by_page()
            next(iter(pager), None)
        except ClientAuthenticationError as exc:
            return CheckReport(self.cloud, False, "", f"credentials not accepted ({_short(exc)}); {_LOGIN_HINT}")
        except HttpResponseError as exc:
            if status_code(exc) == 403:
                return CheckReport(self.cloud, False, sub, "the identity may not list resource SKUs; give it the "
                                   "Reader role on the subscription", ("Microsoft.Compute/skus/read",))
            if status_code(exc) == 404:
                return CheckReport(self.cloud, False, "", f"subscription {sub} not found; check {SUBSCRIPTION_ENV}")
            return CheckReport(self.cloud, False, sub, f"resource SKUs could not be listed ({_short(exc)})")
        except AzureError as exc:
            return CheckReport(self.cloud, False, sub, f"Azure unreachable ({_short(exc)})")
        try:
            url = f"{self._arm_url}/providers/Microsoft.ResourceGraph/resources?api-version={GRAPH_API_VERSION}"
            body = {"query": "spotresources | take 1"}
            client.send_request(HttpRequest("POST", url, json=body), **self._call_options()).raise_for_status()
        except HttpResponseError as exc:
            if status_code(exc) in (401, 403):
                missing.append("Microsoft.ResourceGraph/resources/read")
        except AzureError:
            pass
        message = "resource SKUs listed; Retail Prices need no credentials"
        if missing:
            message += "; Resource Graph refused, so spot offers get no eviction rate"
        return CheckReport(self.cloud, True, sub, message, tuple(missing))


def observed_text(when: datetime) -> str:
    """The observed_at text of a row (UTC, seconds); a naive time is taken as UTC."""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
