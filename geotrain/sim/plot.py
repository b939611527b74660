"""``simulate --plot``: each policy's progress and spend over the replay."""

from __future__ import annotations

from pathlib import Path

from geotrain.errors import InputError
from geotrain.files import write_png
from geotrain.sim.engine import Outcome


def draw_replay(outcomes: list[Outcome], deadline_h: float, path: str | Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InputError("--plot needs matplotlib: pip install 'geotrain[plot]'") from exc
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), dpi=110, sharex=True)
    for out in outcomes:
        t = out.timeline
        if t is None:
            continue
        hours = [0.0, *t.hours]  # every run starts from nothing at hour 0
        top.plot(hours, [0.0, *(100 * t.progress)], marker=".", label=out.policy)
        bottom.plot(hours, [0.0, *t.usd], marker=".", label=f"{out.policy} (${out.usd:,.2f})")
    for ax in (top, bottom):
        ax.axvline(deadline_h, color="#888", linestyle="--", linewidth=1)
        ax.grid(True, alpha=0.3)
    top.set_ylabel("work trained (%)")
    bottom.set_ylabel("spent ($)")
    bottom.set_xlabel("hours since the start (dashed: the deadline)")
    top.set_title(title)
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    write_png(fig, path)
