"""Every setup family of Erben et al. (PVLDB 17(6), 2024) written as one `geotrain estimate` call.

One test per family, through the CLI as a user types it (the commands are those of
``examples/erben/README.md``). Each checks what the family is: its nodes, where they are, the
strategy, the link classes its traffic crosses, who pays egress, that on-prem machines are owned.
Where the study measured the setup's samples/s (``geotrain/perf/data/calibration_runs.csv``, a copy
of ``erben-calibration.csv``), the prediction is printed beside it, not asserted: the model's error
is the bench's to report (``bench/perf_model.py``).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.perf.data import data_text

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "erben"
SITES = str(EXAMPLES / "sites.yaml")
LINKS = str(EXAMPLES / "links.csv")
LAMBDA_OFFERS = str(EXAMPLES / "lambda.csv")
LAMBDA_EGRESS = str(EXAMPLES / "lambda-egress.csv")

GC_T4 = "n1-standard-8+T4"
AWS_T4 = "g4dn.2xlarge"
AZURE_T4 = "Standard_NC4as_T4_v3"
LAMBDA_A10 = "gpu_1x_a10"
TBS = 32768

runner = CliRunner()


def estimate(workload: str, nodes: str, *extra: str) -> dict:
    """``geotrain estimate`` as the family's command, hivemind at the study's target batch size."""
    result = runner.invoke(app, ["estimate", "--workload", workload, "--nodes", nodes, "--strategy", "hivemind",
                                 "--tbs", str(TBS), *extra, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "geotrain.estimate.v1"
    assert doc["strategy"] == "hivemind" and doc["samples_per_round"] == TBS
    return doc


def import_lambda() -> None:
    """LambdaLabs is no built-in cloud: its A10 offer is imported, as a user would."""
    result = runner.invoke(app, ["catalog", "import", LAMBDA_OFFERS])
    assert result.exit_code == 0, result.output


def placement(doc: dict) -> dict[str, int]:
    """Node count per cloud/region (offer ids are cloud/region/zone/instance/market)."""
    out: dict[str, int] = {}
    for node in doc["nodes"]:
        cloud, region = node["offer_id"].split("/")[:2]
        out[f"{cloud}/{region}"] = out.get(f"{cloud}/{region}", 0) + node["count"]
    return out


def link_classes(doc: dict) -> set[str]:
    return set(doc["egress_usd_per_hour_by_link_class"])


def measured_sps(setup: str, workload: str, peers: int) -> float | None:
    for row in csv.DictReader(io.StringIO(data_text("calibration_runs.csv"))):
        if (row["setup"], row["workload"], int(row["peers"])) == (setup, workload, peers):
            return float(row["samples_per_s"])
    return None


def show(label: str, doc: dict, measured: float | None = None) -> None:
    """Predicted (and measured, where the study has it) samples/s, for a reader of the test log."""
    line = f"{label}: predicted {doc['samples_per_s']:,.1f} samples/s"
    if measured is not None:
        line += f", measured {measured:,.1f} ({doc['samples_per_s'] / measured - 1:+.1%})"
    print(f"{line}; ${doc['usd_per_hour']:.3f}/h, bottleneck {doc['bottleneck']['what']}")


def assert_cloud_priced(doc: dict) -> None:
    """$/h is the nodes' compute plus egress; on-prem machines add nothing to compute."""
    compute = sum(n["count"] * n["price_usd_per_hour"] for n in doc["nodes"])
    assert doc["compute_usd_per_hour"] == pytest.approx(compute)
    assert doc["usd_per_hour"] == pytest.approx(doc["compute_usd_per_hour"] + doc["egress_usd_per_hour"])
    assert doc["egress_usd_per_hour"] == pytest.approx(sum(doc["egress_usd_per_hour_by_cloud"].values()))


@pytest.mark.parametrize("workload", ["convnext-large", "roberta-xlm"])
def test_one_zone_gc_us(workload):
    """Experiment A: n x T4 (n1-standard-8) in one GC US zone; no traffic leaves the zone."""
    for peers in (2, 4, 8):
        doc = estimate(workload, f"gcp/us-central1-a/{GC_T4}/spot={peers}")
        assert placement(doc) == {"gcp/us-central1": peers} and doc["node_count"] == peers
        assert doc["nodes"][0]["offer_id"] == f"gcp/us-central1/us-central1-a/{GC_T4}/spot"
        assert link_classes(doc) == {"same_zone"}
        assert doc["egress_usd_per_hour"] == 0 and doc["egress_gb_per_hour"] == 0 and doc["assumptions"] == []
        assert_cloud_priced(doc)
        show(f"A {peers}xT4 {workload}", doc, measured_sps("one-zone-gc-us", workload, peers))


def test_us_eu():
    """Experiment set 1-1 / 1-2: T4s split evenly between GC US and GC EU; every round crosses the Atlantic."""
    for per_side in (2, 4):
        nodes = f"gcp/us-central1/{GC_T4}={per_side},gcp/europe-west3/{GC_T4}={per_side}"
        doc = estimate("roberta-xlm", nodes)
        assert placement(doc) == {"gcp/us-central1": per_side, "gcp/europe-west3": per_side}
        assert "cross_continent" in link_classes(doc) and not link_classes(doc) & {"internet", "cross_region"}
        assert doc["egress_usd_per_hour_by_link_class"]["cross_continent"] > 0  # GC bills traffic between continents
        assert set(doc["egress_usd_per_hour_by_cloud"]) == {"gcp"} and doc["egress_gb_per_hour"] > 0
        assert doc["assumptions"] == []
        assert_cloud_priced(doc)
        show(f"US+EU {per_side}+{per_side} T4 roberta-xlm", doc)


def test_three_and_four_continents():
    """Experiment set 1-4 (US, EU, ASIA) and 1-5 (+ AUS): two T4s per continent, all on GC."""
    regions = ["us-central1", "europe-west3", "asia-east1", "australia-southeast1"]
    egress = {}
    for continents in (3, 4):
        nodes = ",".join(f"gcp/{r}/{GC_T4}=2" for r in regions[:continents])
        doc = estimate("convnext-large", nodes)
        assert placement(doc) == {f"gcp/{r}": 2 for r in regions[:continents]}
        assert doc["node_count"] == 2 * continents
        assert "cross_continent" in link_classes(doc) and not link_classes(doc) & {"internet", "cross_region"}
        assert doc["egress_usd_per_hour_by_cloud"]["gcp"] > 0 and doc["assumptions"] == []
        assert_cloud_priced(doc)
        egress[continents] = doc["egress_usd_per_hour"] / doc["samples_per_s"]
        show(f"{continents} continents 2xT4 each convnext-large", doc)
    assert egress[4] > egress[3]  # a fourth continent (Oceania, the dearest to reach) costs more per sample


def test_gc_and_aws():
    """Experiment set 2 (aws-gc): two GC T4 VMs in us-west1 and two AWS g4dn.2xlarge in us-west-2."""
    doc = estimate("convnext-large", f"gcp/us-west1/{GC_T4}=2,aws/us-west-2/{AWS_T4}=2")
    assert placement(doc) == {"gcp/us-west1": 2, "aws/us-west-2": 2}
    assert "internet" in link_classes(doc)  # traffic between clouds leaves both over the internet
    by_cloud = doc["egress_usd_per_hour_by_cloud"]
    assert by_cloud["gcp"] > 0 and by_cloud["aws"] > 0 and doc["assumptions"] == []
    assert_cloud_priced(doc)
    show("GC+AWS 2+2 T4 convnext-large", doc)


def test_gc_and_azure():
    """Experiment set 2 (azure-gc): two GC T4 VMs and two Azure NC4as_T4_v3, with the measured link typed in."""
    nodes = f"gcp/us-west1/{GC_T4}=2,azure/westus3/{AZURE_T4}=2"
    doc = estimate("convnext-large", nodes, "--links", LINKS)
    assert placement(doc) == {"gcp/us-west1": 2, "azure/westus3": 2}
    assert "internet" in link_classes(doc)
    assert doc["egress_usd_per_hour_by_cloud"]["gcp"] > 0 and doc["egress_usd_per_hour_by_cloud"]["azure"] > 0
    assert doc["assumptions"] == []
    assert_cloud_priced(doc)
    show("GC+Azure 2+2 T4 convnext-large (measured link)", doc)


def _hybrid(site: str, machine: str, accelerators: int) -> None:
    """One on-prem machine plus four cloud GPUs: GC T4 in the EU, GC T4 in the US, LambdaLabs A10 in the US."""
    import_lambda()
    onprem = f"onprem/{site}/{machine}=1"
    clouds = {"EU T4": f"gcp/europe-west3/{GC_T4}=4", "US T4": f"gcp/us-west1/{GC_T4}=4",
              "US A10": f"lambda/us-west-1/{LAMBDA_A10}/on_demand=4"}
    for label, cloud_nodes in clouds.items():
        for workload in ("convnext-large", "roberta-xlm"):
            doc = estimate(workload, f"{onprem},{cloud_nodes}", "--onprem", SITES, "--links", LINKS)
            assert doc["node_count"] == 5 and placement(doc)[f"onprem/{site}"] == 1
            owned = next(n for n in doc["nodes"] if n["offer_id"].startswith("onprem/"))
            assert owned["offer_id"] == f"onprem/{site}/-/{machine}/owned" and owned["price_usd_per_hour"] == 0
            assert "internet" in link_classes(doc)  # every round leaves the site
            assert doc["egress_usd_per_hour_by_cloud"]["onprem"] == 0  # uplinks are not billed per GB
            cloud = cloud_nodes.split("/")[0]
            assert doc["egress_usd_per_hour_by_cloud"][cloud] > 0  # what leaves the cloud for the site is billed
            assert_cloud_priced(doc)
            if cloud == "lambda":  # no egress rows for an imported cloud: an assumed rate, and it says so
                assert any("'lambda' assumed" in line for line in doc["assumptions"])
            else:
                assert doc["assumptions"] == []
            show(f"{machine} ({accelerators} GPU) + 4 {label} {workload}", doc)

    us = estimate("roberta-xlm", f"{onprem},{clouds['US T4']}", "--onprem", SITES, "--links", LINKS)
    # the measured 150 ms path to the US, as typed in links.csv, limits the round: every peer's share
    # crosses it, and with only its single-stream figure the four peers' streams share that figure
    link = us["bottleneck"]["link"]
    assert us["bottleneck"]["what"] == "link aggregate" and link["bandwidth_measured"] and link["rtt_measured"]
    assert "one path" in us["bottleneck"]["description"]
    assert {link["from"].split("/")[1], link["to"].split("/")[1]} == {site, "us-west1"}

    free = estimate("convnext-large", f"{onprem},{clouds['US A10']}", "--onprem", SITES, "--links", LINKS,
                    "--egress", LAMBDA_EGRESS)  # the study: LambdaLabs bills no egress
    assert free["egress_usd_per_hour"] == 0 and free["assumptions"] == []


def test_onprem_rtx8000_plus_cloud():
    """Experiment set 3-P: the RTX8000 workstation (Munich) with cloud GPUs in the EU and the US."""
    _hybrid("tum-rtx8000", "rtx8000-ws", 1)


def test_onprem_dgx2_plus_cloud():
    """Experiment set 3-R: the DGX-2 (8 x V100, micro-batch 256 = 32 per GPU) with cloud GPUs in the EU and US."""
    _hybrid("tum-dgx2", "dgx-2", 8)


def test_lambdalabs_one_zone():
    """LambdaLabs US-West, n x A10 (imported offer, $0.60/h on demand); nothing leaves the zone, nothing assumed."""
    import_lambda()
    for workload in ("convnext-large", "roberta-xlm"):
        for peers in (2, 8):
            doc = estimate(workload, f"lambda/us-west-1/{LAMBDA_A10}/on_demand={peers}")
            assert placement(doc) == {"lambda/us-west-1": peers}
            node = doc["nodes"][0]
            assert node["offer_id"] == f"lambda/us-west-1/-/{LAMBDA_A10}/on_demand"
            assert node["price_usd_per_hour"] == 0.6  # the study's price, as imported
            assert link_classes(doc) == {"same_zone"} and doc["egress_usd_per_hour"] == 0
            assert doc["assumptions"] == []  # no traffic leaves the zone, so no egress rate had to be assumed
            assert doc["compute_usd_per_hour"] == pytest.approx(0.6 * peers)
            show(f"Lambda {peers}xA10 {workload}", doc, measured_sps("one-zone-lambda-us-west", workload, peers))
