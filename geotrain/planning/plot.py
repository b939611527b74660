"""``--plot``: the cost/throughput frontier with the chosen plan and the single-region baseline."""

from __future__ import annotations

from pathlib import Path

from geotrain.domain import Plan
from geotrain.errors import InputError
from geotrain.files import write_png


def draw_frontier(plan: Plan, path: str | Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InputError("--plot needs matplotlib: pip install 'geotrain[plot]'") from exc
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    if plan.frontier:
        xs, ys = zip(*sorted(plan.frontier), strict=True)
        ax.plot(xs, ys, "-o", color="#4a7ab0", label="cheapest mix at each throughput (frontier)")
    t = plan.totals
    ax.scatter([t.samples_per_s], [t.usd_per_hour], s=120, marker="*", color="#d1495b", zorder=5,
               label=f"plan: {plan.nodes} nodes, ${t.usd_per_million_samples:.3f}/1M samples")
    if plan.baseline is not None:
        b = plan.baseline
        ax.scatter([b.samples_per_s], [b.usd_per_hour], s=70, marker="s", color="#edae49", zorder=5,
                   label=f"single-region baseline: {b.count} x {b.offer.shape.instance_type}, "
                         f"${b.usd_per_million_samples:.3f}/1M")
    ax.set_xlabel("samples/s")
    ax.set_ylabel("$/h")
    ax.set_title(f"{plan.job.workload} ({plan.job.strategy.value}): cost vs throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    write_png(fig, path)
