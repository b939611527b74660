"""Which image a node boots: ``launch --image`` first, then the task's ``image_id`` for the node's resource
choice (``Constraints.image_for``), else the provider's own (each cloud's deep-learning image).

``--image`` takes an image in its cloud's form (``geotrain.domain.image_cloud``), once per cloud; an AMI
belongs to one region, so it may be given per region, ``REGION=ami-…`` (an AMI with no region is sent to
every AWS region of the plan, where AWS refuses it outside its own: a configuration error, no failover).
"""

from __future__ import annotations

from collections.abc import Iterable

from geotrain.domain import IMAGE_FORMS, Constraints, Offer, image_cloud
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
