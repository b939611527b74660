from __future__ import annotations

import pytest

from geotrain.config import load_job_spec
from geotrain.domain import Continent, Objective, SyncStrategyName
from geotrain.errors import JobSpecError

SPEC = """
name: convnext-spot
workload: convnext-large
objective: min_cost
strategy: hivemind
target_samples_per_s: 500
constraints:
  clouds: [aws, GCP]
  continents: [north_america, europe]
  max_regions: 2
  max_nodes_per_zone: 4
onprem:
  inventory: sites.yaml
  required: true
dataset:
  cloud: gcp
  region: us-central1
  size_gib: 150
  samples: 1281167
"""


def write(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_valid_spec(tmp_path):
    spec = load_job_spec(write(tmp_path, SPEC))
    assert spec.objective is Objective.MIN_COST and spec.strategy is SyncStrategyName.HIVEMIND
    assert spec.target_samples_per_s == 500
    assert spec.constraints.clouds == frozenset({"aws", "gcp"})
    assert spec.constraints.continents == frozenset({Continent.NORTH_AMERICA, Continent.EUROPE})
    assert spec.constraints.onprem_required is True
    assert spec.onprem_inventory == str(tmp_path / "sites.yaml")
    assert spec.dataset is not None and spec.dataset.bytes_per_sample == 150 * 2**30 / 1281167
    assert spec.dataset.reads_per_sample == 1.0  # streamed every epoch unless the spec says otherwise
    cached = load_job_spec(write(tmp_path, SPEC.replace("size_gib: 150", "size_gib: 150\n  reads_per_sample: 0.1")))
    assert cached.dataset.fetched_bytes_per_trained_sample == pytest.approx(0.1 * spec.dataset.bytes_per_sample)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("max_regions: 2", "max_regions: 0"), "constraints.max_regions: must be a whole number >= 1, got 0"),
        (("target_samples_per_s: 500", "target_samples_per_s: -3"), "target_samples_per_s: must be > 0, got -3"),
        (("target_samples_per_s: 500", "budget_usd_per_hour: 20"),
         "target_samples_per_s: required when objective is min_cost"),
        (("objective: min_cost", "objective: cheapest"), "objective: 'cheapest' is not one of"),
        (("strategy: hivemind", "strategy: hivemnd"), "did you mean 'hivemind'"),
        (("max_regions: 2", "max_region: 2"), "constraints.max_region: unknown field (did you mean 'max_regions'?)"),
        (("name: convnext-spot", "nam: x"), "name: required field is missing"),
        (("continents: [north_america, europe]", "continents: [mars]"), "constraints.continents: 'mars' is not one of"),
        (("size_gib: 150", "size_gib: lots"), "dataset.size_gib: must be a number, got 'lots'"),
        (("size_gib: 150", "size_gib: 150\n  reads_per_sample: -1"), "dataset.reads_per_sample: must be >= 0"),
    ],
)
def test_errors_name_the_field(tmp_path, change, expected):
    with pytest.raises(JobSpecError) as info:
        load_job_spec(write(tmp_path, SPEC.replace(*change)))
    message = str(info.value)
    assert expected in message and message.startswith(str(tmp_path / "job.yaml"))
    assert info.value.exit_code == 2


def test_deadline_objective_needs_samples_and_deadline(tmp_path):
    text = SPEC.replace("objective: min_cost", "objective: min_cost_by_deadline")
    with pytest.raises(JobSpecError, match="total_samples: required when objective is min_cost_by_deadline"):
        load_job_spec(write(tmp_path, text))
    spec = load_job_spec(write(tmp_path, text + "total_samples: 1000000\ndeadline_h: 12\n"))
    assert spec.total_samples == 1_000_000 and spec.deadline_h == 12


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", "empty"), ("- a\n- b\n", "top level must be a mapping"), ("name: [unclosed\n", "not valid YAML at line")],
)
def test_unreadable_specs(tmp_path, text, expected):
    with pytest.raises(JobSpecError, match=expected):
        load_job_spec(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(JobSpecError, match="no such file"):
        load_job_spec(tmp_path / "nope.yaml")


def test_job_spec_round_trips_through_its_mapping(tmp_path):
    from geotrain.config import job_to_mapping, parse_job_spec
    from geotrain.specfile import Fields

    spec = load_job_spec(write(tmp_path, SPEC.replace("  max_nodes_per_zone: 4\n",
                                                      "  max_nodes_per_zone: 4\n  accelerators: [T4]\n  quotas: {aws: 8, gcp/us-central1: 4}\n")))
    again = parse_job_spec(Fields(job_to_mapping(spec), origin="x", error=JobSpecError), base_dir=tmp_path)
    assert again == spec
    assert spec.constraints.quotas == (("aws", 8), ("gcp/us-central1", 4))
