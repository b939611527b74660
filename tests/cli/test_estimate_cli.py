from __future__ import annotations

import json

from typer.testing import CliRunner

from geotrain.cli import app

runner = CliRunner()
INVENTORY = """
sites:
  - site: munich-lab
    continent: europe
    near_region: gcp/europe-west3
    uplink_gbps: 0.5
    machines:
      - {instance_type: rtx8000-ws, accelerator: RTX8000, count: 1, vcpus: 16, memory_gib: 128}
"""
NODES = ("gcp/us-central1-a/n1-standard-8+T4/spot=4,aws/us-west-2/g4dn.2xlarge/spot=4,"
         "gcp/europe-west3/n1-standard-8+T4=2,onprem/munich-lab/rtx8000-ws=1")


def test_two_clouds_two_continents_and_onprem(tmp_path):
    inventory = tmp_path / "sites.yaml"
    inventory.write_text(INVENTORY)
    result = runner.invoke(app, ["estimate", "--workload", "convnext-large", "--nodes", NODES,
                                 "--onprem", str(inventory)])
    assert result.exit_code == 0, result.output
    assert "bottleneck" in result.stdout and "per 1M samples" in result.stdout
    data = json.loads(runner.invoke(app, ["estimate", "--workload", "roberta-xlm", "--nodes", NODES,
                                          "--onprem", str(inventory), "--json"]).stdout)
    assert data["node_count"] == 11 and data["samples_per_s"] > 0
    assert {n["offer_id"].split("/")[0] for n in data["nodes"]} == {"gcp", "aws", "onprem"}
    assert data["egress_usd_per_hour_by_link_class"].get("cross_continent", 0) > 0
    assert data["bottleneck"]["description"]
    assert data["usd_per_million_samples"] == data["usd_per_hour"] / (data["samples_per_s"] * 3600) * 1e6


def test_slow_wan_link_is_named(tmp_path):
    result = runner.invoke(app, ["estimate", "--workload", "roberta-xlm", "--strategy", "allreduce", "--nodes",
                                 "gcp/us-central1-a/n1-standard-8+T4=2,gcp/australia-southeast1/n1-standard-8+T4=2",
                                 "--json"])
    assert result.exit_code == 0, result.output
    bottleneck = json.loads(result.stdout)["bottleneck"]
    assert bottleneck["what"] == "link" and bottleneck["link"]["link_class"] == "cross_continent"
    assert "us-central1" in bottleneck["description"] and "australia-southeast1" in bottleneck["description"]


def test_bad_nodes_exit_2_with_one_line():
    result = runner.invoke(app, ["estimate", "--workload", "convnext-large", "--nodes", "gcp/us-central1-a=4"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "CLOUD/ZONE-OR-REGION/INSTANCE" in result.stderr
    result = runner.invoke(app, ["estimate", "--workload", "convnext-large", "--nodes", "gcp/mars-1/n1-standard-8+T4=4"])
    assert result.exit_code == 2 and "it is offered in" in result.stderr
    result = runner.invoke(app, ["estimate", "--workload", "nope", "--nodes", "gcp/us-central1-a/n1-standard-8+T4=4"])
    assert result.exit_code == 2 and "unknown workload 'nope'" in result.stderr
    result = runner.invoke(app, ["estimate", "--workload", "convnext-large", "--nodes", "aws/us-west-2c/g4dn.2xlarge=4"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "give the region us-west-2" in result.stderr and "usw2-az1" in result.stderr


def test_a_node_too_small_for_the_model_is_refused_with_the_memory_it_needs(tmp_path):
    workloads = tmp_path / "workloads.csv"
    workloads.write_text("name,parameters,kind,samples_per_step\nllm-1.3b,1300000000,nlp,8\n", encoding="utf-8")
    result = runner.invoke(app, ["estimate", "--workload", "llm-1.3b", "--workloads", str(workloads),
                                 "--nodes", "aws/us-west-2/g4dn.xlarge=2"])
    assert result.exit_code == 2, result.output
    assert "llm-1.3b needs 19.4 GiB per GPU" in result.output and "T4 has 16.0 GiB" in result.output
    assert "Traceback" not in result.output
    rates = tmp_path / "rates.csv"
    rates.write_text("workload,accelerator,samples_per_s\nllm-1.3b,A100,100\n", encoding="utf-8")
    fits = runner.invoke(app, ["estimate", "--workload", "llm-1.3b", "--workloads", str(workloads),
                               "--rates", str(rates), "--nodes", "aws/us-east-1/p4d.24xlarge=1"])
    assert fits.exit_code == 0, fits.output
