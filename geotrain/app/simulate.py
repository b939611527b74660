"""``geotrain simulate``: replay spot-market traces under each policy (``geotrain.sim``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError
from geotrain.sim.compare import POLICIES, compare
from geotrain.sim.engine import Outcome
from geotrain.sim.job import SimJob, load_sim_job
from geotrain.sim.market import align
from geotrain.sim.traces import load_traces
from geotrain.sim.world import build_world


MAX_ZONES = 200  # the oracle's work grows with the zones; a price history of every type and region is thousands


@dataclass(frozen=True, slots=True)
class SimulationReport:
    job: SimJob
    traces: tuple[str, ...]
    zones: tuple[str, ...]
    tick_s: float
    start: str  # UTC of the job's start
    start_h: float  # hours after the traces' common start (the market's past before it)
    market_h: float
    work_samples: float
    outcomes: tuple[Outcome, ...]
    notes: tuple[str, ...]

    def outcome(self, policy: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.policy == policy), None)


def policies_of(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    if names in ((), ("all",)):
        return POLICIES
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise InputError(f"--policy: unknown {', '.join(unknown)}; known: all, {', '.join(POLICIES)}")
    return names


def simulate(traces: list[str], job_path: str | Path, *, policy: str = "all", deadline_h: float | None = None,
             start_h: float = 0.0, tick_s: float | None = None, kind: str | None = None, zone: str | None = None,
             instance_type: str | None = None, spot_prices: str = "trace", plot: Path | None = None) -> SimulationReport:
    if not traces:
        raise InputError("give at least one --trace file or folder")
    if deadline_h is not None and not (math.isfinite(deadline_h) and deadline_h > 0):
        raise InputError(f"--deadline: {deadline_h!r} is not a number of hours > 0")
    if not (math.isfinite(start_h) and start_h >= 0):
        raise InputError(f"--start: {start_h!r} is not a number of hours >= 0")
    names = policies_of(policy)
    job = load_sim_job(job_path).with_deadline(deadline_h)
    zones = load_traces(traces, kind=kind, zone=zone, instance_type=instance_type)
    if len(zones) > MAX_ZONES:
        raise InputError(f"{len(zones)} zone traces (zone x instance type) in {', '.join(traces)}: a replay takes at "
                         f"most {MAX_ZONES}; pick some with --instance-type and --zone")
    market = align(zones, tick_s=tick_s)
    start_tick = int(round(start_h * 3600 / market.tick_s))
    if start_tick >= market.ticks:
        raise InputError(f"--start {start_h:g} h is past the traces' end ({market.hours:.1f} h)")
    world = build_world(market, job, spot_prices=spot_prices)
    outcomes = compare(world, start_tick=start_tick, policies=names, record=plot is not None)
    notes = list(world.notes)
    if job.deadline_h * 3600 > (market.ticks - start_tick) * market.tick_s:
        notes.append(f"the deadline ({job.deadline_h:g} h) is past the traces' end "
                     f"({(market.ticks - start_tick) * market.tick_s / 3600:.1f} h after the start): no spot after it")
    if plot is not None:
        from geotrain.sim.plot import draw_replay

        draw_replay(outcomes, job.deadline_h, plot, f"{job.name}: {len(zones)} zone(s), deadline {job.deadline_h:g} h")
    return SimulationReport(job, tuple(market.sources), tuple(z.key for z in zones), market.tick_s,
                            market.time_of(start_tick).isoformat(), start_tick * market.tick_s / 3600,
                            market.hours, world.work_samples, tuple(outcomes), tuple(notes))


def to_record(report: SimulationReport) -> dict:
    od = report.outcome("on-demand")
    orc = report.outcome("oracle")
    rows = []
    for o in report.outcomes:
        rows.append({
            "policy": o.policy, "usd": _finite(o.usd), "finished": o.finished, "completion_h": o.completion_h,
            "deadline_met": o.deadline_met, "preemptions": o.preemptions, "restarts": o.restarts,
            "spot_node_h": o.spot_node_h, "on_demand_node_h": o.on_demand_node_h,
            "compute_usd": _finite(o.compute_usd), "traffic_usd": o.traffic_usd, "checkpoint_usd": o.checkpoint_usd,
            "vs_on_demand": _ratio(o.usd, od.usd if od else None),
            "vs_oracle": _ratio(o.usd, orc.usd if orc and orc.finished else None),
            "run_s": o.run_s, "notes": list(o.notes),
        })
    j = report.job
    return {"job": {"name": j.name, "workload": j.workload, "nodes": j.nodes, "deadline_h": j.deadline_h,
                    "work_samples": report.work_samples},
            "traces": list(report.traces), "zones": list(report.zones), "tick_s": report.tick_s,
            "start": report.start, "start_h": report.start_h, "policies": rows, "notes": list(report.notes)}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _ratio(a: float, b: float | None) -> float | None:
    if b is None or not math.isfinite(a) or not math.isfinite(b) or b <= 0:
        return None
    return a / b
