"""--instance-role values name one cloud's identity by their form; a checkpoint store the cloud nodes will
have no credentials for is named before anything is bought."""

import pytest

from geotrain.errors import InputError
from geotrain.providers.identity import identities_by_cloud, identity_cloud, store_access_problem

AZURE_ID = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ml/providers/"
            "Microsoft.ManagedIdentity/userAssignedIdentities/trainer")


@pytest.mark.parametrize(("value", "cloud"), [
    ("geotrain-nodes", "aws"),
    ("arn:aws:iam::123456789012:instance-profile/geotrain-nodes", "aws"),
    ("arn:aws:iam::123456789012:instance-profile/teams/ml/geotrain-nodes", "aws"),
    ("trainer@my-project.iam.gserviceaccount.com", "gcp"),
    ("123456789-compute@developer.gserviceaccount.com", "gcp"),
    (AZURE_ID, "azure"),
    (AZURE_ID.lower(), "azure"),
])
def test_each_form_names_its_cloud(value: str, cloud: str) -> None:
    assert identity_cloud(value) == cloud


@pytest.mark.parametrize("value", ["", "has space", "someone@example.com", "arn:aws:iam::123:role/x",
                                   "/subscriptions/x/resourceGroups/y/providers/Microsoft.Compute/virtualMachines/z"])
def test_other_values_are_refused_naming_the_forms(value: str) -> None:
    with pytest.raises(InputError, match="instance profile"):
        identity_cloud(value)


def test_one_identity_per_cloud() -> None:
    assert identities_by_cloud(["a", "trainer@p.iam.gserviceaccount.com", "a"]) == {
        "aws": "a", "gcp": "trainer@p.iam.gserviceaccount.com"}
    with pytest.raises(InputError, match="two identities for aws"):
        identities_by_cloud(["a", "b"])


def test_an_object_store_needs_the_nodes_own_clouds_identity() -> None:
    assert "--instance-role" in store_access_problem("s3://bucket/run", {"aws"}, {}, {})
    assert store_access_problem("s3://bucket/run", {"aws"}, {"aws": "p"}, {}) is None
    assert store_access_problem("gs://bucket/run", {"gcp"}, {"gcp": "t@p.iam.gserviceaccount.com"}, {}) is None
    assert "--instance-role" in store_access_problem("az://container/run", {"azure"}, {"gcp": "x"}, {})


def test_a_store_of_another_cloud_needs_credentials_in_the_tasks_envs() -> None:
    problem = store_access_problem("s3://bucket/run", {"aws", "gcp"}, {"aws": "p", "gcp": "x"}, {})
    assert "nodes on gcp" in problem and "AWS_ACCESS_KEY_ID" in problem
    keys = {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}
    assert store_access_problem("s3://bucket/run", {"aws", "gcp"}, {}, keys) is None
    assert store_access_problem("s3://bucket/run", {"gcp"}, {}, {"AWS_ACCESS_KEY_ID": "AKIA"}) is not None


def test_file_systems_and_other_providers_nodes_are_left_to_the_nodes_probe() -> None:
    assert store_access_problem("file:///mnt/efs/run", {"aws"}, {}, {}) is None
    assert store_access_problem("s3://bucket/run", {"onprem", "local"}, {}, {}) is None
