"""Which offers a launch has an image for.

geotrain's nodes boot each cloud's x86-64 deep-learning image with NVIDIA's driver (AWS's Deep
Learning Base OSS Nvidia Driver AMI, GCP's Deep Learning VM, Azure's Ubuntu HPC image). An offer whose
accelerator needs another software stack would boot an image that cannot use it: such offers are priced
in the catalog but left out of plans, with the reason, unless the task names an image for them
(``resources.image_id``: ``Constraints.image_for``, which ``planning.candidates`` asks).
"""

from __future__ import annotations

from geotrain.domain import Market, Offer

# accelerator (the offer schema's name) -> the software stack its image needs
OTHER_STACK = {
    "Inferentia": "AWS Neuron", "Inferentia2": "AWS Neuron", "Trainium": "AWS Neuron", "Trainium2": "AWS Neuron",
    "QualcommAI100": "Qualcomm Cloud AI", "MI25": "AMD ROCm", "MI300X": "AMD ROCm", "RadeonProV520": "AMD ROCm",
}


def image_gap(offer: Offer) -> str | None:
    """Why no node of ``offer`` can be launched with an image geotrain boots, or None. The user's own
    machines (market ``owned``) bring their own software."""
    if offer.market == Market.OWNED or offer.shape.accelerator is None:
        return None
    stack = OTHER_STACK.get(offer.shape.accelerator)
    return None if stack is None else (f"{offer.shape.accelerator} needs an {stack} image, which geotrain does not "
                                       "boot yet (its images are x86-64 with NVIDIA's driver)")
