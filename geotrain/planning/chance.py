"""The chance that a whole mix can be had at once, in words (the capacity model's, and what it rests on)."""

from __future__ import annotations

from geotrain.pricing.capacity import CapacityModel


def launch_chance_words(groups, model: CapacityModel | None = None) -> str:  # noqa: ANN001
    """The chance that the whole mix can be had at once, by the capacity model, and what it rests on."""
    model = model or CapacityModel.bundled()
    chance = model.launch_probability((g.offer, g.count) for g in groups)
    bases: dict[str, int] = {}
    for g in groups:
        basis = model.basis(g.offer)
        bases[basis] = bases.get(basis, 0) + g.count
    rests = ", ".join(f"{n} node{'s' if n > 1 else ''} {basis}" for basis, n in sorted(bases.items()))
    return (f"capacity: the whole mix can be had at once with a chance of {chance:.0%} by the capacity model "
            f"({rests}; spot nodes of one zone and GPU share one pool)")
