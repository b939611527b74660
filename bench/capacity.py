"""Capacity model: time to answer ``cap()`` for every offer of the bundled snapshot on a fresh model
(the planner asks once per offer; target < 50 ms in all), and what the answers rest on.

    .venv/bin/python bench/capacity.py
"""

from __future__ import annotations

import time
from collections import Counter

from geotrain.pricing.capacity import CapacityModel
from geotrain.pricing.snapshot import bundled_snapshot


def main() -> None:
    offers = bundled_snapshot().offers()
    timings = []
    for _ in range(3):
        model = CapacityModel.bundled()
        start = time.perf_counter()
        for offer in offers:
            model.cap(offer, 0.9)
        timings.append(time.perf_counter() - start)
    best = min(timings)
    print(f"cap() for {len(offers)} offers on a fresh model: best {best * 1e3:.1f} ms of 3 "
          f"(target < 50 ms: {'met' if best < 0.05 else 'MISSED'})")
    bases = Counter((o.location.cloud, o.market.value, model.basis(o)) for o in offers)
    print(f"{'cloud':<7} {'market':<10} {'basis':<12} {'offers':>6}")
    for (cloud, market, basis), n in sorted(bases.items()):
        print(f"{cloud:<7} {market:<10} {basis:<12} {n:>6}")


if __name__ == "__main__":
    main()
