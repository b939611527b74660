"""``geotrain launch`` towards the clouds as a user types it: ``--dry-run`` shows every call without
credentials or any call made; a plan the providers cannot serve, or a checkpoint directory the nodes
cannot reach, is refused before any VM is bought."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from tests.cli.test_refresh_cli import no_clouds  # noqa: F401 - a fixture

runner = CliRunner()
NODES = "aws/usw2-az1/g4dn.xlarge,gcp/us-west1-b/n1-standard-8+T4,azure/eastus/Standard_NC4as_T4_v3"


@pytest.fixture
def mix(tmp_path: Path, geotrain_home: Path) -> Path:
    out = tmp_path / "mix.json"
    result = runner.invoke(app, ["plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local",
                                 "--target-sps", "1", "--nodes", NODES, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_a_dry_run_shows_each_clouds_calls_and_the_startup_script_but_not_the_token(mix, no_clouds) -> None:  # noqa: F811
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--dry-run", "--json",
                                 "--control-address", "203.0.113.7"])
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    assert [n["provider"] for n in nodes] == ["aws", "gcp", "azure"]
    calls = {n["provider"]: [c["call"] for c in n["calls"]] for n in nodes}
    assert "ec2.run_instances" in calls["aws"] and "compute.instances.insert" in calls["gcp"]
    assert any("virtual_machines" in c for c in calls["azure"])
    run = next(c for c in nodes[0]["calls"] if c["call"] == "ec2.run_instances")["params"]
    assert run["InstanceMarketOptions"]["MarketType"] == "spot" and "/usr/sbin/sshd" in run["UserData"]
    assert "<this node's host key>" in run["UserData"] and "BEGIN OPENSSH PRIVATE KEY" not in run["UserData"]
    assert "203.0.113.7/32" in json.dumps(nodes)  # the one address the firewall opens SSH (AWS) or the agents to
    insert = next(c for c in nodes[1]["calls"] if c["call"] == "compute.instances.insert")["params"]
    gcp_script = next(i["value"] for i in insert["instance_resource"]["metadata"]["items"]
                      if i["key"] == "startup-script")
    assert "/usr/sbin/sshd" in gcp_script and "<this node's host key>" in gcp_script
    assert "BEGIN OPENSSH PRIVATE KEY" not in gcp_script and "geotrain.node.agent" not in gcp_script
    create = next(c for c in nodes[2]["calls"] if c["call"] == "compute.virtual_machines.begin_create_or_update")
    azure_script = create["params"]["startup_script"]  # Azure: the same sshd, the run's key for its admin user too
    assert "/usr/sbin/sshd" in azure_script and "<this node's host key>" in azure_script
    assert "BEGIN OPENSSH PRIVATE KEY" not in azure_script and "geotrain.node.agent" not in azure_script
    clear = json.loads(result.stdout)["in_the_clear"]  # three clouds: their training traffic crosses the internet
    assert "crosses the internet unencrypted" in clear
    assert not re.search(r"gcp[^;]*node agents over plain HTTP", clear)  # GCP's control traffic rides SSH
    assert not re.search(r"azure[^;]*node agents over plain HTTP", clear)  # Azure's too


def test_a_plan_with_nodes_on_a_cloud_the_providers_lack_is_refused(mix) -> None:
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws", "--train-workload", "tiny-cnn",
                                 "--checkpoint-url", "s3://bucket/run"])
    assert result.exit_code == 2, result.output
    assert "azure, gcp" in result.output and "--provider aws,azure,gcp" in result.output
    assert "Traceback" not in result.output


def test_cloud_nodes_need_a_checkpoint_location_they_can_reach(mix) -> None:
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--train-workload", "tiny-cnn"])
    assert result.exit_code == 2, result.output
    assert "--checkpoint-url s3://" in result.output and "Traceback" not in result.output


def test_an_unknown_provider_is_named(mix) -> None:
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,ibm", "--dry-run"])
    assert result.exit_code == 2 and "ibm is not a provider" in result.output, result.output


AWS_ROLE = "arn:aws:iam::123456789012:instance-profile/geotrain-nodes"
GCP_ROLE = "trainer@my-project.iam.gserviceaccount.com"
AZURE_ROLE = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ml/providers/"
              "Microsoft.ManagedIdentity/userAssignedIdentities/trainer")


def test_each_clouds_nodes_get_the_identity_named_for_that_cloud(mix, no_clouds) -> None:  # noqa: F811
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--dry-run", "--json",
                                 "--instance-role", GCP_ROLE, "--instance-role", AZURE_ROLE,
                                 "--instance-role", AWS_ROLE])
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    run = next(c for c in nodes[0]["calls"] if c["call"] == "ec2.run_instances")["params"]
    assert run["IamInstanceProfile"] == {"Arn": AWS_ROLE}
    insert = next(c for c in nodes[1]["calls"] if c["call"] == "compute.instances.insert")["params"]
    assert insert["instance_resource"]["serviceAccounts"][0]["email"] == GCP_ROLE
    create = next(c for c in nodes[2]["calls"] if c["call"] == "compute.virtual_machines.begin_create_or_update")
    assert AZURE_ROLE in json.dumps(create) and GCP_ROLE not in json.dumps(nodes[2])


def test_an_identity_of_no_known_form_is_refused(mix) -> None:
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--dry-run",
                                 "--instance-role", "someone@example.com"])
    assert result.exit_code == 2 and "instance profile" in result.output, result.output


def test_an_object_store_the_cloud_nodes_have_no_credentials_for_is_refused_before_anything_is_bought(
        mix, geotrain_home) -> None:
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--train-workload", "tiny-cnn",
                                 "--checkpoint-url", "s3://bucket/run", "--instance-role", AWS_ROLE])
    assert result.exit_code == 2, result.output
    assert "nodes on azure could not write the checkpoint store s3://bucket/run" in result.output
    assert "AWS_ACCESS_KEY_ID" in result.output and "Traceback" not in result.output
    assert not (geotrain_home / "ledger.sqlite").exists()  # no run began, no provider was asked for anything


def test_each_clouds_nodes_boot_the_image_named_for_that_cloud(mix, no_clouds) -> None:  # noqa: F811
    gcp = "projects/my-project/global/images/family/my-trainer"
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--dry-run", "--json",
                                 "--image", "us-west-2=ami-0868a20f5a3bf9702", "--image", gcp,
                                 "--image", "microsoft-dsvm:ubuntu-2004:2004-gen2:21.11.04"])
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    calls = [c["call"] for c in nodes[0]["calls"]]
    run = next(c for c in nodes[0]["calls"] if c["call"] == "ec2.run_instances")["params"]
    assert run["ImageId"] == "ami-0868a20f5a3bf9702" and "ssm.get_parameter" not in calls  # no default to look up
    insert = next(c for c in nodes[1]["calls"] if c["call"] == "compute.instances.insert")["params"]
    assert insert["instance_resource"]["disks"][0]["initializeParams"]["sourceImage"] == gcp
    create = next(c for c in nodes[2]["calls"] if c["call"] == "compute.virtual_machines.begin_create_or_update")
    assert '"sku": "2004-gen2"' in json.dumps(create)
    other_region = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--dry-run", "--json",
                                       "--image", "us-east-1=ami-0868a20f5a3bf9702"])
    run = next(c for c in json.loads(other_region.stdout)["nodes"][0]["calls"] if c["call"] == "ec2.run_instances")
    assert run["params"]["ImageId"].startswith("<value of SSM parameter")  # that AMI is for another region


def test_an_image_of_no_known_form_is_refused(mix) -> None:
    result = runner.invoke(app, ["launch", str(mix), "--provider", "aws,gcp,azure", "--dry-run", "--image", "ubuntu"])
    assert result.exit_code == 2 and "is not an AMI id" in result.output, result.output


def test_a_tasks_image_id_is_what_its_nodes_boot(tmp_path: Path, geotrain_home: Path, no_clouds) -> None:  # noqa: F811
    task = tmp_path / "task.yaml"
    task.write_text("resources:\n  accelerators: T4:1\n  use_spot: true\n"
                    "  image_id: {us-west-2: ami-0868a20f5a3bf9702}\nrun: nvidia-smi\n")
    result = runner.invoke(app, ["launch", str(task), "--provider", "aws", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    [node] = json.loads(result.stdout)["nodes"]
    run = next(c for c in node["calls"] if c["call"] == "ec2.run_instances")["params"]
    assert run["ImageId"] == "ami-0868a20f5a3bf9702" and node["offer"].startswith("aws/us-west-2/")


def test_a_plan_across_networks_no_rule_joins_is_refused_before_anything_is_bought(tmp_path, geotrain_home) -> None:
    sites = Path(__file__).resolve().parents[2] / "examples" / "sites.yaml"
    mixed = tmp_path / "mixed.json"
    planned = runner.invoke(app, ["plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local",
                                  "--target-sps", "1", "--onprem", str(sites), "-o", str(mixed),
                                  "--nodes", "gcp/us-west1-b/n1-standard-8+T4,onprem/munich-lab/rtx8000-ws"])
    assert planned.exit_code == 0, planned.output
    result = runner.invoke(app, ["launch", str(mixed), "--provider", "gcp,onprem", "--train-workload", "tiny-cnn",
                                 "--checkpoint-url", "file:///mnt/share/run"])
    assert result.exit_code == 2, result.output
    assert "2 private networks (gcp, onprem/munich-lab)" in result.output and "Traceback" not in result.output
    assert not (geotrain_home / "ledger.sqlite").exists()
