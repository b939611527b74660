"""Which image and boot disk a node boots: ``launch --image`` first, then the task's ``image_id`` for the node's resource
choice (``Constraints.image_for``), else the provider's own (each cloud's deep-learning image).

``--image`` takes an image in its cloud's form (``geotrain.domain.image_cloud``), once per cloud; an AMI
belongs to one region, so it may be given per region, ``REGION=ami-…`` (an AMI with no region is sent to
every AWS region of the plan, where AWS refuses it outside its own: a configuration error, no failover).
"""

from __future__ import annotations

from collections.abc import Iterable

from geotrain.domain import IMAGE_FORMS, BootDisk, Constraints, Offer, image_cloud
from geotrain.errors import InputError


def launch_images(values: Iterable[str]) -> dict[tuple[str, str | None], str]:
    """``--image`` values → (cloud, region or None) → image; one per cloud and region."""
    out: dict[tuple[str, str | None], str] = {}
    for value in values:
        region, _, image = value.strip().rpartition("=") if "=" in value else ("", "", value.strip())
        cloud = image_cloud(image)
        if cloud is None:
            raise InputError(f"--image {value!r} is not {IMAGE_FORMS}, optionally after REGION=")
        key = (cloud, region.strip() or None)
        if key in out and out[key] != image:
            raise InputError(f"--image: two images for {cloud}{' in ' + key[1] if key[1] else ''} "
                             f"({out[key]!r} and {image!r})")
        out[key] = image
    return out


def boot_image(offer: Offer, constraints: Constraints, images: Iterable[str] = ()) -> str | None:
    """The image ``offer``'s nodes boot, or None for the provider's own."""
    given = launch_images(images)
    cloud, region = offer.location.cloud, offer.location.region
    return given.get((cloud, region)) or given.get((cloud, None)) or constraints.image_for(offer)


# SkyPilot's disk tiers → each cloud's boot-disk type. The fastest tiers stop where a boot disk can go: AWS
# io2 needs IOPS tied to a size the image decides, so high and above are gp3 at its maximum (16,000 IOPS,
# 1,000 MiB/s; https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html); GCP boots from
# pd-ssd at most (pd-extreme is for data disks of a few machine types), and a machine series that boots only
# from Hyperdisk keeps hyperdisk-balanced; an Azure Ultra disk cannot be an OS disk, so Premium_LRS.
AWS_VOLUMES = {"low": {"VolumeType": "standard"}, "medium": {"VolumeType": "gp3"},
               **dict.fromkeys(("high", "ultra", "best"), {"VolumeType": "gp3", "Iops": 16_000, "Throughput": 1_000})}
GCP_DISK_TYPES = {"low": "pd-standard", "medium": "pd-balanced", "high": "pd-ssd", "ultra": "pd-ssd", "best": "pd-ssd"}
AZURE_DISK_TYPES = {"low": "Standard_LRS", "medium": "StandardSSD_LRS", "high": "Premium_LRS",
                    "ultra": "Premium_LRS", "best": "Premium_LRS"}


def boot_disk(offer: Offer, constraints: Constraints) -> BootDisk | None:
    """The boot disk ``offer``'s nodes get: the task's ``disk_size`` / ``disk_tier`` for the resource choice
    the offer matches (``Constraints.disk_for``), or None for the provider's default."""
    return constraints.disk_for(offer)


def aws_block_devices(disk: BootDisk, root_device: str) -> list[dict]:
    """RunInstances ``BlockDeviceMappings`` for the image's root device (``RootDeviceName``)."""
    ebs: dict = {"DeleteOnTermination": True, **(AWS_VOLUMES[disk.tier] if disk.tier else {})}
    if disk.size_gib is not None:
        ebs["VolumeSize"] = disk.size_gib
    return [{"DeviceName": root_device, "Ebs": ebs}]
