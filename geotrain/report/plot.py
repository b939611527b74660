"""``cost-report --plot``: cumulative cost by cloud and egress, samples/s with preemptions, plan vs actual."""

from __future__ import annotations

from pathlib import Path

from geotrain.errors import InputError
from geotrain.files import write_png
from geotrain.billing import node_usage
from geotrain.ledger import EventKind, Ledger
from geotrain.report.compare import PlanComparison
from geotrain.report.costs import CostReport


def draw(report: CostReport, comparison: PlanComparison, ledger: Ledger, path: str | Path, points: int = 200) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InputError("--plot needs matplotlib: pip install 'geotrain[plot]'") from exc
    run_id = report.run_id
    start, end = report.started_at, max(report.ended_at, report.started_at + 1e-3)
    times = [start + (end - start) * k / (points - 1) for k in range(points)]
    rows = ledger.nodes(run_id)
    clouds = sorted({r.cloud for r in rows})
    stacks = []
    for cloud in clouds:
        series = []
        for t in times:
            series.append(sum(node_usage(r, ledger.prices(r.offer_id), t).compute_usd for r in rows
                              if r.cloud == cloud and r.launched_at < t))
        stacks.append(series)
    # egress accrues with the bytes; spread each generation's bytes over the training time
    egress_total = report.egress_usd + report.storage_usd
    train_start = start + (end - start - report.training_s) if report.training_s else start
    stacks.append([egress_total * min(1.0, max(0.0, (t - train_start) / max(end - train_start, 1e-9)))
                   for t in times])
    minutes = [(t - start) / 60 for t in times]

    fig, axes = plt.subplots(3, 1, figsize=(8, 9), dpi=100)
    ax = axes[0]
    ax.stackplot(minutes, *stacks, labels=[f"{c} compute" for c in clouds] + ["egress + storage"], alpha=0.85)
    ax.set_ylabel("cumulative $")
    ax.set_title(f"{run_id}: ${report.total_usd:,.4f}" + (" so far" if report.running else ""))
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)

    ax = axes[1]
    progress = [row for row in ledger.progress_rows(run_id) if row.samples_per_s is not None]
    for n, generation in enumerate(sorted({row.generation for row in progress})):
        rows = [row for row in progress if row.generation == generation]  # one line per generation: gaps stay gaps
        ax.plot([(row.at - start) / 60 for row in rows], [row.samples_per_s for row in rows], color="#4a7ab0",
                label="samples/s" if n == 0 else None)
    ax.axhline(comparison.predicted_samples_per_s, color="#edae49", linestyle=":", label="plan")
    for e in ledger.events(run_id, kinds=(EventKind.PREEMPTED,)):
        ax.axvline((e.at - start) / 60, color="#d1495b", linestyle="--", alpha=0.8)
    ax.plot([], [], color="#d1495b", linestyle="--", label="preemption")
    ax.set_ylabel("samples/s")
    ax.set_xlabel("minutes since launch")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3)

    ax = axes[2]
    labels = ["$/h", "samples/s (÷1000)", "$/1M samples"]
    planned = [comparison.predicted_usd_per_hour, comparison.predicted_samples_per_s / 1000,
               comparison.predicted_usd_per_million_samples]
    actual = [comparison.actual_usd_per_hour, (comparison.actual_samples_per_s or 0) / 1000,
              comparison.actual_usd_per_million_samples or 0]
    idx = range(len(labels))
    ax.bar([i - 0.2 for i in idx], planned, width=0.4, label=f"plan ({comparison.planned_workload})", color="#edae49")
    ax.bar([i + 0.2 for i in idx], actual, width=0.4, label=f"actual ({comparison.trained_workload})", color="#00798c")
    ax.set_xticks(list(idx), labels)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend(fontsize=8)
    ax.set_title("plan vs actual")
    fig.tight_layout()
    write_png(fig, path)
