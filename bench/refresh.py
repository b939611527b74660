"""catalog refresh of the full fake catalogs of AWS, GCP and Azure: offers per second.

The three local fakes (``tests/fakes``) serve every bundled offer of their cloud (4,295 in all: the
AWS fake leaves out the 13 rows of the Local Zones moto lacks) through the clouds' REST shapes; the
real SDKs (boto3, google-cloud-billing/compute, azure-mgmt-compute, the Retail Prices API over
requests) read them through geotrain's price sources, and ``refresh_catalog`` validates, merges and
stores the snapshot in a temporary GEOTRAIN_HOME. Printed per cloud: offers, seconds, offers/s, API
calls; then the whole refresh (the sources in turn, plus validation and the stored snapshot).

    .venv/bin/python bench/refresh.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["GEOTRAIN_HOME"] = tempfile.mkdtemp(prefix="geotrain-bench-refresh-")

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from google.auth.credentials import AnonymousCredentials  # noqa: E402

from geotrain.pricing.live.aws import AwsSource  # noqa: E402
from geotrain.pricing.live.azure import AzureSource  # noqa: E402
from geotrain.pricing.live.base import FetchRequest  # noqa: E402
from geotrain.pricing.live.gcp import GcpClients, GcpSource  # noqa: E402
from geotrain.pricing.live.refresh import refresh_catalog  # noqa: E402
from geotrain.pricing.snapshot import SnapshotStore  # noqa: E402
from tests.fakes.aws import FakeAws  # noqa: E402
from tests.fakes.azure_server import SUBSCRIPTION_ID, AzureFake  # noqa: E402
from tests.fakes.gcp import PROJECT, GcpFake  # noqa: E402


class FakeCred:
    """The token the Azure fake accepts (environment-notes §5)."""

    def get_token(self, *scopes, **kwargs):  # noqa: ANN002, ANN003, ANN201
        from azure.core.credentials import AccessToken

        return AccessToken("fake-token", int(time.time()) + 3600)

    def get_token_info(self, *scopes, options=None):  # noqa: ANN002, ANN001, ANN201
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo("fake-token", int(time.time()) + 3600)


def sources(aws: FakeAws, gcp: GcpFake, azure: AzureFake) -> list:
    config = Config(retries={"total_max_attempts": 1})

    def make(service: str, region: str):  # noqa: ANN202
        return boto3.client(service, region_name=region, endpoint_url=aws.endpoint_url, config=config,
                            aws_access_key_id="bench", aws_secret_access_key="bench")

    return [
        AwsSource(make, spot_advisor_url=aws.spot_advisor_url),
        GcpSource(PROJECT, clients=GcpClients.build(AnonymousCredentials(), api_endpoint=gcp.url)),
        AzureSource(credential=FakeCred(), subscription_id=SUBSCRIPTION_ID, prices_url=azure.url, arm_url=azure.url,
                    enforce_https=False, retry_total=0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with FakeAws() as aws, GcpFake() as gcp, AzureFake() as azure:
        per_cloud: dict[str, list[tuple[int, float, int]]] = {}
        totals = []
        for n in range(args.repeat):
            for source in sources(aws, gcp, azure):
                start = time.perf_counter()
                result = source.fetch(FetchRequest())
                seconds = time.perf_counter() - start
                per_cloud.setdefault(source.cloud, []).append((len(result.rows), seconds, sum(result.calls.values())))
            start, cpu = time.perf_counter(), time.process_time()
            outcome = refresh_catalog(sources(aws, gcp, azure), store=SnapshotStore())
            totals.append((outcome.offers, time.perf_counter() - start, time.process_time() - cpu,
                           len(outcome.snapshot)))
            print(f"run {n + 1}: refresh of 3 clouds: {outcome.offers} offers in {totals[-1][1]:.2f} s", flush=True)
    print(f"\n{'cloud':<6} {'offers':>7} {'seconds':>8} {'offers/s':>9} {'API calls':>10}   (median of {args.repeat})")
    for cloud, runs in per_cloud.items():
        offers = runs[0][0]
        seconds = statistics.median(r[1] for r in runs)
        print(f"{cloud:<6} {offers:>7} {seconds:>8.2f} {offers / seconds:>9.0f} {runs[0][2]:>10}")
    offers, wall, cpu, stored = totals[0][0], statistics.median(t[1] for t in totals), \
        statistics.median(t[2] for t in totals), totals[0][3]
    print(f"{'all':<6} {offers:>7} {wall:>8.2f} {offers / wall:>9.0f}   whole refresh: validated, merged and stored "
          f"({stored} offers in the snapshot), {cpu:.2f} cpu-s; target: >= 4,000 offers")


if __name__ == "__main__":
    main()
