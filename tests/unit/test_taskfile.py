"""SkyPilot task files → geotrain job specs: every supported field has its meaning, what is not
supported is refused by name, and the result round-trips through the plan file's job mapping."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from geotrain.config import job_to_mapping, parse_job_spec
from geotrain.domain import (
    UNMODELLED_WORKLOAD, BootDisk, Continent, InstanceShape, InterruptionSignal, Location, Market, Offer, ResourceFilter,
)
from geotrain.errors import JobSpecError
from geotrain.specfile import Fields
from geotrain.taskfile import is_task, task_to_job


def job_of(text: str, base: Path = Path("/work/tasks")):
    data = yaml.safe_load(text)
    mapping = task_to_job(data, "task.yaml")
    return parse_job_spec(Fields(mapping, origin="task.yaml", error=JobSpecError), base_dir=base)


def round_trip(job):
    return parse_job_spec(Fields(job_to_mapping(job), origin="plan", error=JobSpecError), base_dir=Path("/"))


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
    # use_spot absent is on-demand, as in SkyPilot; with geotrain's workload the perf model chooses the market
    assert job_of("resources: {accelerators: T4}\nrun: x").constraints.resources[0].market == Market.ON_DEMAND
    assert job_of("workload: resnet50\nresources: {accelerators: T4}\nrun: x").constraints.resources[0].market is None


def test_a_task_without_accelerators_gets_skypilots_default_cpu_vm_or_what_its_cpus_and_memory_say():
    bare = job_of("run: echo hi").constraints.resources
    assert [(r.accelerator, r.min_vcpus, r.max_vcpus, r.min_memory_gib, r.market) for r in bare] == [
        ("CPU", 8, None, 32, Market.ON_DEMAND)]
    four = job_of("resources: {cpus: '4+', infra: gcp}\nrun: x").constraints.resources[0]
    assert (four.accelerator, four.min_vcpus, four.min_memory_gib, four.cloud) == ("CPU", 4, 16, "gcp")
    mem = job_of("resources: {memory: '64+'}\nrun: x").constraints.resources[0]
    assert (mem.accelerator, mem.min_vcpus, mem.min_memory_gib) == ("CPU", None, 64)
    typed = job_of("resources: {instance_type: m6i.2xlarge}\nrun: x").constraints.resources[0]
    assert typed.accelerator is None  # an instance type names its own hardware


def test_disk_fields_are_the_boot_disk_of_their_choice_and_round_trip():
    job = job_of("resources: {accelerators: A100:8, disk_size: 1024, disk_tier: best, any_of: [{infra: aws}, "
                 "{infra: gcp, disk_size: 500}]}\nrun: x")
    assert [(r.cloud, r.disk) for r in job.constraints.resources] == [
        ("aws", BootDisk(1024, "best")), ("gcp", BootDisk(500, "best"))]
    assert round_trip(job).constraints.resources == job.constraints.resources
    with pytest.raises(JobSpecError, match="disk_tier"):
        job_of("resources: {disk_tier: fastest}\nrun: x")


def test_recovery_and_other_fields_geotrain_reads_its_own_way_are_accepted_and_said_in_the_plan():
    job = job_of("resources: {accelerators: V100, use_spot: true, job_recovery: {strategy: FAILOVER, "
                 "max_restarts_on_errors: 3}, autostop: 10}\nrun: x")
    assert any("job_recovery" in n and "always recovers" in n for n in job.notes)
    assert any("autostop" in n for n in job.notes)
    assert round_trip(job).notes == job.notes


def test_cloud_storage_in_copy_mode_is_copied_onto_the_nodes_and_mounts_are_refused_by_name():
    job = job_of("file_mounts: {~/data: s3://bucket/data, ~/ckpt: {source: 'gs://b/ckpt', mode: COPY}, "
                 "~/code: .}\nrun: x")
    assert dict(job.task.storage_mounts) == {"~/data": "s3://bucket/data", "~/ckpt": "gs://b/ckpt"}
    assert [d for d, _ in job.task.local_mounts] == ["~/code"]
    assert round_trip(job).task == job.task
    named = job_of("file_mounts: {~/a: {name: ckpts, store: gcs, mode: COPY}, ~/b: {name: x, source: ./b, mode: COPY}}"
                   "\nrun: x")
    assert dict(named.task.file_mounts) == {"~/a": "gs://ckpts", "~/b": "/work/tasks/b"}  # a local COPY: copied


def test_a_storage_mount_is_planned_and_refused_by_launch_before_anything_is_bought():
    from geotrain.errors import InputError
    from geotrain.launcher.task import check_task

    job = job_of("file_mounts: {/ckpt: {name: ckpts, store: gcs, mode: MOUNT_CACHED}, /data: {source: s3://b}}\n"
                 "run: x")
    assert job.task.storage_mounts_to_mount == (("/ckpt", "gs://ckpts", "MOUNT_CACHED"), ("/data", "s3://b", "MOUNT"))
    assert round_trip(job).task == job.task
    with pytest.raises(InputError, match="mode MOUNT_CACHED .*mode: COPY.*nothing was launched"):
        check_task(job.task, shared_host=True)


def test_a_container_image_is_planned_and_refused_by_launch_before_anything_is_bought():
    from geotrain.errors import InputError
    from geotrain.launcher.task import check_task

    job = job_of("resources:\n  accelerators: H100:8\n  any_of: [{infra: aws}, {infra: gcp, image_id: "
                 "'docker:nvcr.io/nvidia/pytorch:25.09-py3'}]\nrun: x")
    assert job.task.container == "docker:nvcr.io/nvidia/pytorch:25.09-py3"
    assert all(r.image is None for r in job.constraints.resources) and round_trip(job).task == job.task
    with pytest.raises(InputError, match="not in a container.*nothing was launched"):
        check_task(job.task, shared_host=True)


def test_skypilot_habits_read_as_skypilot_means_them():
    job = job_of("secrets: {HF_TOKEN: abc}\nenvs: {A: 1}\nresources:\n  ports: 8888\n  accelerators: {A10:1, L4:1}\n"
                 "  any_of: [{infra: aws}, {infra: lambda}, {infra: runpod}]\n  image_id: skypilot:gpu-ubuntu-2004\n"
                 "run: x")
    assert dict(job.task.envs) == {"A": "1", "HF_TOKEN": "abc"}  # secrets are envs (given, not shown)
    assert sorted((r.cloud, r.accelerator) for r in job.constraints.resources) == [("aws", "A10"), ("aws", "L4")]
    assert all(r.image is None for r in job.constraints.resources)
    assert any("lambda, runpod" in n for n in job.notes) and any("ports" in n for n in job.notes)
    assert any("SkyPilot's own image" in n for n in job.notes)


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
    ("resources: {accelerator_args: {runtime_version: x}}\nrun: x", "resources.accelerator_args"),
    ("resources: {disk_size: 12.5}\nrun: x", "resources.disk_size"),
    ("resources: {any_of: [{infra: aws, priority: 2}]}\nrun: x", "resources.any_of[0].priority"),
    ("resources: {acelerators: T4}\nrun: x", "resources.acelerators"),
    ("file_mounts: {/data: {source: s3://b, mode: MOUNTED}}\nrun: x", "file_mounts./data"),
    ("file_mounts: {/data: {name: my-bucket, mode: COPY}}\nrun: x", "creates no"),
    ("file_mounts: {/data: 'r2://b/x'}\nrun: x", "file_mounts./data"),
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
    job = job_of("resources: {infra: aws/us-east-1, accelerators: A100:8, use_spot: true, image_id: ami-0868a20f5a3bf9702}\nrun: x")
    [only] = job.constraints.resources
    assert (only.cloud, only.region, only.image) == ("aws", "us-east-1", "ami-0868a20f5a3bf9702")
    assert job.constraints.image_for(offer()) == "ami-0868a20f5a3bf9702"
    assert job.constraints.image_for(offer(region="us-west-2")) is None  # not a choice of the task
    per_region = job_of("resources:\n  accelerators: A100:8\n  use_spot: true\n  image_id: {us-east-1: ami-0729d913a335efca7, "
                        "us-west-2: ami-050814f384259894c}\nrun: x")
    assert [(r.region, r.image) for r in per_region.constraints.resources] == [
        ("us-east-1", "ami-0729d913a335efca7"), ("us-west-2", "ami-050814f384259894c")]  # only those regions
    assert per_region.constraints.image_for(offer(region="us-west-2")) == "ami-050814f384259894c"
    gcp = "projects/deeplearning-platform-release/global/images/common-cpu-v20230615-debian-11-py310"
    branch = job_of(f"resources:\n  accelerators: A100:8\n  use_spot: true\n  any_of:\n    - {{infra: gcp, image_id: {gcp}}}\n"
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
