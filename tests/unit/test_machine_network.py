"""The network inside a region as the clouds sell it: each machine's NIC (checked against moto's copy
of EC2's DescribeInstanceTypes, a reference this project did not write), NCCL's socket streams over
it, and DDP's overlap of the all-reduce with the backward pass."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import moto
import pytest

from geotrain.domain import NodeGroup, SyncSettings
from geotrain.perf.data import data_text
from geotrain.perf.model import PerfModel
from geotrain.perf.nic import MachineNetworks, nccl_streams
from geotrain.perf.terms import BACKWARD_SHARE, ddp_bucket_share, ddp_step_s
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.snapshot import bundled_snapshot

REGISTRY = WorkloadRegistry.bundled()
MODEL = PerfModel(egress=EgressPrices.bundled())
ALLREDUCE = SyncSettings("allreduce")


def offer(cloud: str, zone_scope: str, instance_type: str):  # noqa: ANN201
    for o in bundled_snapshot().offers():
        if o.location.cloud == cloud and o.location.zone_scope == zone_scope and o.shape.instance_type == instance_type:
            return o
    raise AssertionError(f"no {instance_type} in {zone_scope} in the bundled snapshot")


def rate(workload: str, o, count: int, sync: SyncSettings = ALLREDUCE) -> float:  # noqa: ANN001
    return MODEL.predict(REGISTRY.get(workload), [NodeGroup(o, count)], sync).samples_per_s


def test_the_aws_figures_are_ec2s_own_as_moto_ships_them():
    """Every AWS row: the primary card's baseline (sustained) and peak, and EFA, as DescribeInstanceTypes
    answers them (moto's copy of the API's answers)."""
    with gzip.open(Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz", "rt") as f:
        ec2 = json.load(f)
    rows = [r for r in csv.DictReader(io.StringIO(data_text("instance_network.csv"))) if r["cloud"] == "aws"]
    assert len(rows) >= 50
    for row in rows:
        info = ec2[row["instance_type"]]["NetworkInfo"]
        card = info["NetworkCards"][info.get("DefaultNetworkCardIndex", 0)]
        assert float(row["nic_gbps"]) == card["BaselineBandwidthInGbps"], row["instance_type"]
        assert (row["fabric"] == "efa") == bool(info.get("EfaSupported")), row["instance_type"]
    table = MachineNetworks.bundled()
    assert table.nic_gbps("aws", "p4d.24xlarge") == 100 and table.of("aws", "p4d.24xlarge").fabric_gbps == 400
    assert table.nic_gbps("aws", "g4dn.xlarge") == 5 and table.of("aws", "g4dn.xlarge").burst_gbps == 25


def test_every_row_names_its_source_and_every_gpu_machine_without_one_is_known():
    rows = list(csv.DictReader(io.StringIO(data_text("instance_network.csv"))))
    assert all(r["source"] and float(r["nic_gbps"]) > 0 for r in rows)
    listed = {(r["cloud"], r["instance_type"]) for r in rows}
    gpu = {(o.location.cloud, o.shape.instance_type) for o in bundled_snapshot().offers() if o.shape.accelerator_count}
    missing = {name for cloud, name in gpu - listed}
    # no published figure in the sources (perf/data/PROVENANCE.md): old AWS families, GCP N1 with 2-8
    # T4/V100, Azure NCv3 and NC A10 v4
    assert all(name.split(".")[0] in {"g2", "g3", "g3s", "g4ad", "p2", "p3"} or name.startswith("n1-standard-")
               or "_v3" in name or "A10_v4" in name for name in missing), sorted(missing)


def test_nccl_opens_sixteen_streams_on_aws_and_one_elsewhere():
    """NCCL's socket transport: 2 threads × 8 sockets on an AWS ENA interface, 1 × 1 otherwise."""
    assert nccl_streams("aws") == 16 and nccl_streams("gcp") == 1 and nccl_streams("azure") == 1


def test_eight_p4d_train_faster_than_one_and_the_nic_is_the_link():
    """One p4d.24xlarge alone, two, eight: resnet50 on DDP. The ring runs over NCCL's 16 streams, at most
    the primary NIC's 100 Gbit/s (the EFA fabric is not set up by geotrain's launch)."""
    p4d = offer("aws", "aws/us-east-1/use1-az1", "p4d.24xlarge")
    one, two, eight = (rate("resnet50", p4d, n) for n in (1, 2, 8))
    assert two > 1.8 * one and eight > 6.5 * one, (one, two, eight)
    estimate = MODEL.predict(REGISTRY.get("resnet50"), [NodeGroup(p4d, 8)], ALLREDUCE)
    link = estimate.bottleneck.link
    assert link.streams == 16 and link.bandwidth_gbps == pytest.approx(min(16 * 4.78, 100), rel=0.01)


def test_a_small_nic_caps_the_ring_and_other_clouds_keep_one_stream():
    g6 = offer("aws", "aws/us-east-1/use1-az1", "g6.xlarge")  # 2.5 Gbit/s sustained, 10 burst
    link = MODEL.predict(REGISTRY.get("resnet50"), [NodeGroup(g6, 4)], ALLREDUCE).bottleneck.link
    assert link.nic_capped and link.bandwidth_gbps == 2.5
    l4 = next(o for o in bundled_snapshot().offers() if o.location.cloud == "gcp" and o.shape.instance_type == "g2-standard-96")
    link = MODEL.predict(REGISTRY.get("resnet50"), [NodeGroup(l4, 4)], ALLREDUCE).bottleneck.link
    assert link.streams == 1 and not link.nic_capped


def test_across_regions_a_ring_hop_is_one_stream():
    a = offer("aws", "aws/us-east-1/use1-az1", "p4d.24xlarge")
    b = next(o for o in bundled_snapshot().offers() if o.location.cloud == "aws" and o.location.region == "us-west-2"
             and o.shape.instance_type == "p4d.24xlarge")
    estimate = MODEL.predict(REGISTRY.get("resnet50"), [NodeGroup(a, 2), NodeGroup(b, 2)], ALLREDUCE)
    assert estimate.bottleneck.link.streams == 1 and estimate.bottleneck.link.link_class.value != "same_zone"


@pytest.mark.parametrize("compute_s, ring_s", [(0.02, 0.0), (0.02, 0.005), (0.02, 0.05), (0.3, 0.1)])
def test_ddp_hides_the_ring_behind_the_backward_pass_but_the_last_bucket(compute_s, ring_s):
    b = ddp_bucket_share(REGISTRY.get("convnext-large").parameters)  # 198 M parameters: 792 MB of fp32 gradients
    assert b == pytest.approx(25 * 2**20 / (4 * 197.8e6))
    step = ddp_step_s(compute_s, ring_s, b)
    assert max(compute_s, ring_s) <= step <= compute_s + ring_s
    assert step == pytest.approx(max(compute_s + b * ring_s, (1 - BACKWARD_SHARE) * compute_s + ring_s))
    # a model of at most one bucket (25 MiB of fp32 gradients) cannot overlap: compute, then the ring
    tiny = ddp_bucket_share(REGISTRY.get("tiny-cnn").parameters)
    assert tiny == 1.0 and ddp_step_s(compute_s, ring_s, tiny) == pytest.approx(compute_s + ring_s)


def test_only_ddp_overlaps_the_regional_strategies_average_after_the_backward_pass():
    p4d = offer("aws", "aws/us-east-1/use1-az1", "p4d.24xlarge")
    ddp = MODEL.predict(REGISTRY.get("convnext-large"), [NodeGroup(p4d, 8)], ALLREDUCE)
    local = MODEL.predict(REGISTRY.get("convnext-large"), [NodeGroup(p4d, 8)], SyncSettings("local-sgd", local_steps=1))
    assert ddp.samples_per_s > local.samples_per_s
