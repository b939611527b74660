"""Offers whose accelerator needs an image geotrain does not boot are left out of plans, with the reason."""

from datetime import datetime, timezone

import pytest

from geotrain.domain import (Continent, InstanceShape, InterruptionSignal, JobSpec, Constraints, Location, Market,
                             Objective, Offer)
from geotrain.errors import InputError
from geotrain.planning.candidates import passes_filters
from geotrain.planning.names import check_names
from geotrain.pricing.images import image_gap

EAST = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)


def offer(accelerator: str | None, market: Market = Market.SPOT) -> Offer:
    return Offer(EAST, InstanceShape("x.large", 8, 32, accelerator, 1 if accelerator else 0), market, 1.0, None,
                 InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test")


def test_neuron_amd_and_qualcomm_offers_have_no_image_but_nvidia_cpu_and_owned_machines_do() -> None:
    assert "AWS Neuron" in (image_gap(offer("Trainium")) or "")
    assert "AMD ROCm" in (image_gap(offer("MI300X")) or "")
    assert image_gap(offer("T4")) is None and image_gap(offer(None)) is None
    assert image_gap(offer("Inferentia2", Market.OWNED)) is None  # your machine brings its own software
    job = JobSpec("j", "resnet50", Objective.MIN_COST, target_samples_per_s=1.0)
    assert passes_filters(offer("T4"), job, frozenset()) and not passes_filters(offer("Inferentia"), job, frozenset())


def test_asking_only_for_such_accelerators_says_why_by_name() -> None:
    job = JobSpec("j", "resnet50", Objective.MIN_COST, target_samples_per_s=1.0,
                  constraints=Constraints(accelerators=frozenset({"Trainium"})))
    with pytest.raises(InputError, match=r"Trainium \(AWS Neuron\): offers of these need an image"):
        check_names(job, [offer("Trainium"), offer("T4")])


def test_a_task_that_names_its_own_image_for_such_offers_gets_them() -> None:
    from geotrain.domain import ResourceFilter

    neuron = ResourceFilter(region="us-east-1", accelerator="Trainium", image="ami-0123456789abcdef0")
    job = JobSpec("j", "resnet50", Objective.MIN_COST, target_samples_per_s=1.0,
                  constraints=Constraints(resources=(neuron, ResourceFilter(accelerator="Inferentia"))))
    assert passes_filters(offer("Trainium"), job, frozenset())  # the Neuron AMI the task names boots them
    assert not passes_filters(offer("Inferentia"), job, frozenset())  # no image named for these
