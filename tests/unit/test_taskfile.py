"""SkyPilot task files → geotrain job specs: every supported field has its meaning, what is not
supported is refused by name, and the result round-trips through the plan file's job mapping."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from geotrain.config import job_to_mapping, parse_job_spec
from geotrain.domain import (
    UNMODELLED_WORKLOAD, Continent, InstanceShape, InterruptionSignal, Location, Market, Offer, ResourceFilter,
)
from geotrain.errors import JobSpecError
from geotrain.specfile import Fields
from geotrain.taskfile import is_task, task_to_job


def job_of(text: str, base: Path = Path("/work/tasks")):
    data = yaml.safe_load(text)
    mapping = task_to_job(data, "task.yaml")
    return parse_job_spec(Fields(mapping, origin="task.yaml", error=JobSpecError), base_dir=base)


def offer(cloud="aws", region="us-east-1", zone="use1-az1", itype="p4d.24xlarge", acc="A100", count=8,
          vcpus=96.0, mem=1152.0, market=Market.SPOT) -> Offer:
    return Offer(Location(cloud, region, zone, Continent.NORTH_AMERICA),
                 InstanceShape(itype, vcpus, mem, acc, count), market, 10.0, None,
                 InterruptionSignal("unknown", None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test")


def test_a_task_is_told_from_a_job_spec_by_its_own_keys():
    assert is_task({"run": "echo hi"}) and is_task({"resources": {}}) and is_task({"num_nodes": 2})
    assert not is_task({"name": "x", "workload": "convnext-large", "target_samples_per_s": 10})


def test_the_multi_node_ddp_task_pins_two_nodes_of_eight_a100_on_spot():
    job = job_of("""
        name: minGPT-ddp
        resources: {accelerators: A100:8, use_spot: true}
        num_nodes: 2
        setup: pip install -r requirements.txt
        run: torchrun --nnodes=$SKYPILOT_NUM_NODES main.py
        """)
    assert job.name == "minGPT-ddp" and job.workload == UNMODELLED_WORKLOAD and not job.modelled
    assert job.constraints.node_count == 2
    assert job.constraints.resources == (ResourceFilter(accelerator="A100", accelerator_count=8, market=Market.SPOT),)
    assert job.task.run.startswith("torchrun") and job.task.setup == "pip install -r requirements.txt"


def test_hello_without_num_nodes_is_one_node_as_in_skypilot_and_with_a_workload_the_planner_chooses():
    assert job_of("resources: {infra: aws, accelerators: V100}\nrun: echo hi").constraints.node_count == 1
    job = job_of("workload: convnext-large\ntarget_samples_per_s: 500\nresources: {accelerators: T4}\nrun: x")
    assert job.modelled and job.constraints.node_count is None and job.target_samples_per_s == 500
    assert job_of("workload: convnext-large\nnum_nodes: 3\nresources: {accelerators: T4}\nrun: x"
                  ).constraints.node_count == 3


@pytest.mark.parametrize("accelerators, expected", [
    ("A100:8", [("A100", 8)]),
    ("T4", [("T4", 1)]),
    ({"A100": 8, "H100": 8}, [("A100", 8), ("H100", 8)]),
    (["V100:4", "A10G:4"], [("V100", 4), ("A10G", 4)]),
])
def test_accelerators_in_every_form_skypilot_takes(accelerators, expected):
    job = job_of(yaml.safe_dump({"resources": {"accelerators": accelerators}, "run": "x"}))
    assert [(r.accelerator, r.accelerator_count) for r in job.constraints.resources] == expected


def test_any_of_and_ordered_are_the_candidate_set_each_over_the_base_fields():
    job = job_of("""
        resources:
          accelerators: A100:8
          use_spot: true
          any_of:
            - infra: gcp/us-central1
            - {cloud: aws, region: us-east-1, zone: use1-az4}
            - {infra: azure, accelerators: H100:8}
        run: x
        """)
    r = job.constraints.resources
    assert [(x.cloud, x.region, x.zone, x.accelerator, x.market) for x in r] == [
        ("gcp", "us-central1", None, "A100", Market.SPOT), ("aws", "us-east-1", "use1-az4", "A100", Market.SPOT),
        ("azure", None, None, "H100", Market.SPOT)]
    ordered = job_of("resources: {ordered: [{infra: aws}, {infra: gcp}], accelerators: T4}\nrun: x")
    assert [x.cloud for x in ordered.constraints.resources] == ["aws", "gcp"]


def test_cpus_memory_and_the_market():
    exact, least = job_of("resources: {cpus: 8, memory: '32+'}\nrun: x").constraints.resources[0], \
        job_of("resources: {cpus: '8+', use_spot: false}\nrun: x").constraints.resources[0]
    assert (exact.min_vcpus, exact.max_vcpus, exact.min_memory_gib, exact.max_memory_gib) == (8, 8, 32, None)
    assert (least.min_vcpus, least.max_vcpus, least.market) == (8, None, Market.ON_DEMAND)
    assert job_of("resources: {accelerators: T4}\nrun: x").constraints.resources[0].market is None  # the plan chooses


def test_a_filter_matches_offers_exactly_as_skypilot_names_them():
    f = ResourceFilter(cloud="aws", accelerator="A100", accelerator_count=8, market=Market.SPOT, min_vcpus=64)
    assert f.matches(offer())
    assert not f.matches(offer(acc="A100-80GB"))  # A100 is not A100-80GB
    assert not f.matches(offer(count=4)) and not f.matches(offer(cloud="gcp"))
    assert not f.matches(offer(market=Market.ON_DEMAND)) and not f.matches(offer(vcpus=32))
    assert ResourceFilter(accelerator="CPU").matches(offer(acc=None, count=0))
    assert not ResourceFilter(accelerator="CPU").matches(offer())


@pytest.mark.parametrize("text, named", [
    ("service: {readiness_probe: /}\nrun: x", "service"),
    ("resources: {ports: 8080}\nrun: x", "resources.ports"),
    ("resources: {image_id: docker:ubuntu}\nrun: x", "resources.image_id"),
    ("resources: {disk_size: 512}\nrun: x", "resources.disk_size"),
    ("resources: {job_recovery: FAILOVER}\nrun: x", "resources.job_recovery"),
    ("resources: {any_of: [{infra: aws, ports: 22}]}\nrun: x", "resources.any_of[0].ports"),
    ("resources: {acelerators: T4}\nrun: x", "resources.acelerators"),
    ("file_mounts: {/data: s3://bucket/data}\nrun: x", "file_mounts./data"),
    ("file_mounts: {/data: {source: s3://b, mode: MOUNT}}\nrun: x", "file_mounts./data"),
    ("workdir: {url: https://github.com/x/y, ref: main}\nrun: x", "workdir"),
    ("resources: {infra: k8s}\nrun: x", "k8s"),
    ("resources: {infra: aws/us-east-1/us-east-1a}\nrun: x", "AZ id"),
    ("resources: {accelerators: 'A100:0.5'}\nrun: x", "fractional"),
    ("envs: {TOKEN: null}\nrun: x", "envs.TOKEN"),
    ("num_nodes: 0\nrun: x", "num_nodes"),
    ("target_samples_per_s: 100\nrun: x", "workload: required"),
])
def test_what_geotrain_does_not_do_is_refused_by_name(text, named):
    with pytest.raises(JobSpecError) as err:
        job_of(text)
    assert named in str(err.value) and "task.yaml" in str(err.value)


def test_paths_are_beside_the_task_file_and_the_job_round_trips_through_its_mapping(tmp_path):
    job = job_of("""
        name: t
        workdir: ./code
        file_mounts: {~/data: ./data, cfg.json: /etc/hostname}
        envs: {EPOCHS: 3, MODE: fast}
        resources: {infra: aws/us-west-2, accelerators: T4:4, cpus: 16+}
        num_nodes: 2
        run: python train.py
        """, base=tmp_path)
    assert job.task.workdir == str((tmp_path / "code").resolve())
    assert dict(job.task.file_mounts) == {"~/data": str((tmp_path / "data").resolve()), "cfg.json": "/etc/hostname"}
    assert dict(job.task.envs) == {"EPOCHS": "3", "MODE": "fast"}
    again = parse_job_spec(Fields(job_to_mapping(job), origin="plan", error=JobSpecError), base_dir=Path("/elsewhere"))
    assert again == job


def test_image_id_in_skypilots_forms_is_the_boot_image_of_its_choice_and_round_trips():
    job = job_of("resources: {infra: aws/us-east-1, accelerators: A100:8, image_id: ami-0868a20f5a3bf9702}\nrun: x")
    [only] = job.constraints.resources
    assert (only.cloud, only.region, only.image) == ("aws", "us-east-1", "ami-0868a20f5a3bf9702")
    assert job.constraints.image_for(offer()) == "ami-0868a20f5a3bf9702"
    assert job.constraints.image_for(offer(region="us-west-2")) is None  # not a choice of the task
    per_region = job_of("resources:\n  accelerators: A100:8\n  image_id: {us-east-1: ami-0729d913a335efca7, "
                        "us-west-2: ami-050814f384259894c}\nrun: x")
    assert [(r.region, r.image) for r in per_region.constraints.resources] == [
        ("us-east-1", "ami-0729d913a335efca7"), ("us-west-2", "ami-050814f384259894c")]  # only those regions
    assert per_region.constraints.image_for(offer(region="us-west-2")) == "ami-050814f384259894c"
    gcp = "projects/deeplearning-platform-release/global/images/common-cpu-v20230615-debian-11-py310"
    branch = job_of(f"resources:\n  accelerators: A100:8\n  any_of:\n    - {{infra: gcp, image_id: {gcp}}}\n"
                    "    - {infra: aws}\nrun: x")
    assert [(r.cloud, r.image) for r in branch.constraints.resources] == [("gcp", gcp), ("aws", None)]
    assert branch.constraints.image_for(offer()) is None and branch.constraints.image_for(offer(cloud="gcp")) == gcp
    again = parse_job_spec(Fields(job_to_mapping(branch), origin="plan", error=JobSpecError), base_dir=Path("/x"))
    assert again.constraints.resources == branch.constraints.resources  # the plan file keeps each choice's image
    azure = job_of("resources: {image_id: 'microsoft-dsvm:ubuntu-2004:2004-gen2:21.11.04'}\nrun: x")
    assert azure.constraints.resources[0].cloud == "azure"


@pytest.mark.parametrize("text, said", [
    ("resources: {image_id: ami-0868a20f5a3bf9702}\nrun: x", "an AMI exists in one region"),
    ("resources: {infra: gcp/us-east1, image_id: ami-0868a20f5a3bf9702}\nrun: x", "an image of aws"),
    ("resources: {image_id: ubuntu-latest}\nrun: x", "is not an AMI id"),
    ("resources: {region: us-east-1, image_id: {us-west-2: ami-050814f384259894c}}\nrun: x", "an image for us-west-2"),
])
def test_an_image_id_geotrain_cannot_boot_says_why(text, said):
    with pytest.raises(JobSpecError, match=said):
        job_of(text)
