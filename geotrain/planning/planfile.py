"""A plan as JSON (``plan.json``): everything launch and cost-report need, self-contained.

The file holds the job spec (in the job spec file's own form, with its ``sync`` settings written out
in full; re-validated on load), each item's offer as a record of the offer schema (re-validated on
load), the snapshot id the prices came from, what the plan was made for (``provider``: ``local`` for
this machine's processes, none for the offers' own hardware), the perf model's predicted totals, the
solver's report, the frontier and the baseline. Writes are atomic; a damaged or foreign file is
refused with the field that is wrong.

This module is the one reader of plans: launch reads plan files with :func:`load_plan`, the ledger
keeps :func:`plan_to_dict`'s JSON, and cost-report reads it back with :func:`plan_from_dict`.
``geotrain-plan/1`` files (sync knobs in ``strategy_options``) still load.

The document carries ``"schema": "geotrain.plan.v1"`` (what ``plan --json`` prints is this document);
files written before it, and before ``completion``, ``budget`` and ``misses``, still load.

A plan is compared with a baseline only where both meet the job's goal (:func:`advantage`): a given
mix that misses it (``--allow-below-target``) has no comparable baseline, and a mix that costs more
says how many times as much, never a share below -100%.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from geotrain.config import job_to_mapping, parse_job_spec
from geotrain.domain import (
    Baseline, BaselineKind, BudgetUse, Completion, Fallback, NodeGroup, Objective, Plan, PlanItem, PlanTotals, SolverReport,
)
from geotrain.errors import InputError
from geotrain.files import atomic_write_text
from geotrain.pricing.records import offer_record, offers_from_records
from geotrain.specfile import Fields, parse_json, read_text

FORMAT = "geotrain-plan/2"
_OLD_FORMAT = "geotrain-plan/1"
SCHEMA = "geotrain.plan.v1"  # as every --json document names its kind (``cli.render.schema_name("plan")``)


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    t = plan.totals
    base = plan.baseline
    return {
        "schema": SCHEMA,
        "format": FORMAT,
        "plan_id": plan.plan_id,
        "created_at": plan.created_at.isoformat(),
        "snapshot_id": plan.snapshot_id,
        "job": job_to_mapping(plan.job),
        "planning": {"recovery_h": plan.recovery_h, "provider": plan.provider},
        "items": [{"offer": offer_record(i.offer), "count": i.count, "samples_per_s": i.samples_per_s}
                  for i in plan.items],
        "totals": {
            "nodes": plan.nodes, "samples_per_s": t.samples_per_s, "goodput_samples_per_s": t.goodput_samples_per_s,
            "time_per_round_s": t.time_per_round_s, "granularity": t.granularity,
            "compute_usd_per_hour": t.compute_usd_per_hour, "egress_usd_per_hour": t.egress_usd_per_hour,
            "data_egress_usd_per_hour": t.data_egress_usd_per_hour, "usd_per_hour": t.usd_per_hour,
            "usd_per_million_samples": t.usd_per_million_samples,
            "interruptions_per_hour": t.interruptions_per_hour, "bottleneck": t.bottleneck,
        },
        "solver": {
            "objective": plan.solver.objective.value, "status": plan.solver.status, "gap": plan.solver.gap,
            "wall_s": plan.solver.wall_s, "solves": plan.solver.solves, "backend": plan.solver.backend,
            "candidates": plan.solver.candidates, "dominated": plan.solver.dominated,
            "total_s": plan.solver.total_s, "frontier_s": plan.solver.frontier_s,
            "baselines_s": plan.solver.baselines_s,
            "bound": plan.solver.bound, "bound_unit": plan.solver.bound_unit,
        },
        "frontier": [list(point) for point in plan.frontier],
        "baselines": [{
            "kind": b.kind.value, "groups": [{"offer": offer_record(g.offer), "count": g.count} for g in b.groups],
            "samples_per_s": b.samples_per_s, "usd_per_hour": b.usd_per_hour,
            "usd_per_million_samples": b.usd_per_million_samples, "savings": savings(plan, b),
            "comparison": advantage(plan, b)[1],
        } for b in plan.baselines],
        "missing_baselines": [[kind.value, why] for kind, why in plan.missing_baselines],
        "fallbacks": [{
            "replaces": f.replaces, "moves": [{"from": key, "offer": offer_record(o)} for key, o in f.moves],
            "samples_per_s": f.samples_per_s, "usd_per_hour": f.usd_per_hour, "launch_chance": f.launch_chance,
        } for f in plan.fallbacks],
        "savings_vs_baseline": savings(plan, base),
        "completion": _completion_dict(plan),
        "budget": _budget_dict(plan.budget_use),
        "misses": list(plan.misses),
        "assumptions": list(plan.assumptions),
        "tradeoff": plan.tradeoff,
    }


def finishes_at(plan: Plan, hours: float) -> datetime:
    """When training that starts as the plan is made ends after ``hours`` (UTC)."""
    return plan.created_at + timedelta(hours=hours)


def _completion_dict(plan: Plan) -> dict[str, Any] | None:
    c = plan.completion
    if c is None:
        return None
    return {"samples": c.samples, "hours": c.hours, "usd": c.usd,
            "finishes_at": finishes_at(plan, c.hours).isoformat(), "raw_hours": c.raw_hours, "raw_usd": c.raw_usd,
            "raw_finishes_at": finishes_at(plan, c.raw_hours).isoformat()}


def _budget_dict(use: BudgetUse | None) -> dict[str, Any] | None:
    if use is None:
        return None
    return {"budget_usd_per_hour": use.budget_usd_per_hour, "unused_usd_per_hour": use.unused_usd_per_hour,
            "unused_share": use.unused_share,
            "limits": [{"limit": name, "candidates": n} for name, n in use.limits], "words": use.words}


def advantage(plan: Plan, baseline: Baseline) -> tuple[float | None, str]:
    """How the plan compares with ``baseline`` by the job's objective: the share (more samples/s for
    max_throughput, within the same budget; else the share of $/1M samples saved, negative when it
    costs more) and the comparison in words. (None, why) where the two are not comparable: the plan
    misses the goal the baseline meets, or a figure is missing."""
    if plan.misses:
        return None, "no comparable baseline: the mix misses the job's goal, the baseline meets it"
    if plan.job.objective is Objective.MAX_THROUGHPUT:
        if not baseline.samples_per_s:
            return None, "no comparable baseline: it trains nothing"
        # like with like: a baseline records the perf model's samples/s before interruptions, as the plan's totals do
        ratio = plan.totals.samples_per_s / baseline.samples_per_s
        if abs(ratio - 1) < 0.005 and baseline.usd_per_hour:  # as fast: the price tells them apart
            cost = plan.totals.usd_per_hour / baseline.usd_per_hour
            return ratio - 1, (f"the mix trains as many samples/s for {_share(1 - cost)} less per hour" if cost <= 1
                               else f"the mix trains as many samples/s for {_share(cost - 1)} more per hour")
        if ratio >= 1:
            return ratio - 1, f"the mix trains {_share(ratio - 1)} more samples/s"
        if ratio > 0.5:
            return ratio - 1, f"the mix trains {_share(1 - ratio)} fewer samples/s"
        return ratio - 1, f"the baseline trains {1 / ratio:,.1f}× as many samples/s" if ratio else "the mix trains nothing"
    share = savings(plan, baseline)
    if share is None:
        return None, "no comparable baseline: no cost per 1M samples to compare"
    ratio = 1 - share
    if ratio <= 1:
        return share, f"the mix saves {_share(share)}"
    if ratio < 2:
        return share, f"the mix costs {_share(ratio - 1)} more per 1M samples"
    return share, f"the mix costs {ratio:,.1f}× as much per 1M samples"


def _share(value: float) -> str:
    return f"{value * 100:.0f}%" if value >= 0.01 or value == 0 else f"{value * 100:.2f}%"


def savings(plan: Plan, baseline: Baseline | None = None) -> float | None:
    """Share of a baseline's $/1M samples the plan saves (negative: it costs more); by default the
    plan's single-region baseline. None where they are not comparable (the plan misses the job's goal)
    or a figure is missing."""
    baseline = plan.baseline if baseline is None else baseline
    if baseline is None or not baseline.usd_per_million_samples or plan.misses:
        return None
    mine = plan.totals.usd_per_million_samples
    return None if mine is None else 1 - mine / baseline.usd_per_million_samples


def save_plan(plan: Plan, path: str | Path) -> None:
    atomic_write_text(Path(path), json.dumps(plan_to_dict(plan), indent=2) + "\n")


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    data = parse_json(read_text(path, InputError), path, InputError)
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: not a geotrain plan (the top level is not an object)")
    return plan_from_dict(data, str(path))


def plan_from_dict(data: Mapping[str, Any], origin: str) -> Plan:
    if "schema" in data and data["schema"] != SCHEMA:
        raise InputError(f"{origin}: schema {data['schema']!r} is not {SCHEMA!r}; is this a plan from `geotrain plan -o`?")
    if data.get("format") == _OLD_FORMAT:
        data = _upgrade(data)
    if data.get("format") != FORMAT:
        raise InputError(f"{origin}: format {data.get('format')!r} is not {FORMAT!r}; is this a plan from `geotrain plan -o`?")
    top = Fields(data, origin=origin, error=InputError)
    job_fields = top.section("job", required=True)
    job = parse_job_spec(job_fields, base_dir=Path(origin).parent)
    options = top.section("planning", required=True)
    item_fields = top.sections("items")
    offers = offers_from_records([f.mapping("offer") for f in item_fields], f"{origin}: items")
    items = [PlanItem(offer, f.whole("count", minimum=1), f.number("samples_per_s", minimum=0))
             for f, offer in zip(item_fields, offers, strict=True)]
    totals = top.section("totals", required=True)
    solver = top.section("solver", required=True)
    baselines = _baselines(data, top, origin)
    missing = _missing(data.get("missing_baselines") or [], origin)
    plan = Plan(
        plan_id=top.text("plan_id"), created_at=_time(top, "created_at"), snapshot_id=top.text("snapshot_id"),
        job=job, items=tuple(items),
        totals=PlanTotals(
            samples_per_s=totals.number("samples_per_s", minimum=0),
            goodput_samples_per_s=totals.number("goodput_samples_per_s", minimum=0),
            time_per_round_s=totals.number("time_per_round_s", minimum=0),
            granularity=totals.number("granularity", None, minimum=0),
            compute_usd_per_hour=totals.number("compute_usd_per_hour", minimum=0),
            egress_usd_per_hour=totals.number("egress_usd_per_hour", minimum=0),
            data_egress_usd_per_hour=totals.number("data_egress_usd_per_hour", 0.0, minimum=0),
            usd_per_million_samples=totals.number("usd_per_million_samples", None, minimum=0),
            interruptions_per_hour=totals.number("interruptions_per_hour", 0.0, minimum=0),
            bottleneck=totals.text("bottleneck", ""),
        ),
        solver=SolverReport(
            objective=Objective(solver.choice("objective", [o.value for o in Objective])),
            status=solver.text("status"), gap=solver.number("gap", 0.0, minimum=0),
            wall_s=solver.number("wall_s", 0.0, minimum=0), solves=solver.whole("solves", 0, minimum=0),
            backend=solver.text("backend", "CBC"), candidates=solver.whole("candidates", 0, minimum=0),
            dominated=solver.whole("dominated", 0, minimum=0),
            total_s=solver.number("total_s", 0.0, minimum=0), frontier_s=solver.number("frontier_s", 0.0, minimum=0),
            baselines_s=solver.number("baselines_s", 0.0, minimum=0),
            bound=solver.number("bound", None, minimum=0), bound_unit=solver.text("bound_unit", ""),
        ),
        recovery_h=options.number("recovery_h", minimum=0),
        provider=options.text("provider", None),
        frontier=_frontier(data.get("frontier") or [], origin),
        baselines=baselines, missing_baselines=missing, fallbacks=_fallbacks(data, top, origin),
        assumptions=_assumptions(data.get("assumptions"), origin),
        completion=_completion(top), budget_use=_budget(top),
        misses=_texts(data.get("misses"), origin, "misses"),
        tradeoff=top.text("tradeoff", ""),
    )
    return plan


def _completion(top: Fields) -> Completion | None:
    f = top.section("completion")
    if f is None:
        return None
    return Completion(f.whole("samples", minimum=1), f.number("hours", minimum=0), f.number("usd", minimum=0),
                      f.number("raw_hours", minimum=0), f.number("raw_usd", minimum=0))


def _budget(top: Fields) -> BudgetUse | None:
    f = top.section("budget")
    if f is None:
        return None
    limits = tuple((g.text("limit"), g.whole("candidates", minimum=0))
                   for g in (f.sections("limits") if f.value_or_none("limits") else ()))
    return BudgetUse(f.number("budget_usd_per_hour", minimum=0), f.number("unused_usd_per_hour", minimum=0),
                     limits, f.text("words", ""))


def _upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A ``geotrain-plan/1`` mapping in the current form: its sync knobs move into the job."""
    out = dict(data)
    old = dict(out.pop("strategy_options", None) or {})
    job = dict(out.get("job") or {})
    sync = {k: old[k] for k in ("target_batch_size", "local_steps", "accumulation_steps", "precision") if k in old}
    if sync:
        job["sync"] = sync
    out["job"] = job
    out["planning"] = {"recovery_h": old.get("recovery_h", 0.25)}
    out["format"] = FORMAT
    return out


def _assumptions(value: Any, origin: str) -> tuple[str, ...]:
    return _texts(value, origin, "assumptions")


def _texts(value: Any, origin: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise InputError(f"{origin}: {key}: must be a list of texts")
    return tuple(value)


def _time(fields: Fields, key: str) -> datetime:
    text = fields.text(key)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise fields.fail(key, f"{text!r} is not an ISO 8601 date-time") from None


def _frontier(points: Any, origin: str) -> tuple[tuple[float, float], ...]:
    try:
        return tuple((float(a), float(b)) for a, b in points)
    except (TypeError, ValueError):
        raise InputError(f"{origin}: frontier: must be a list of [samples_per_s, usd_per_hour] pairs") from None


def _baselines(data: Mapping[str, Any], top: Fields, origin: str) -> tuple[Baseline, ...]:
    """``baselines`` (a list, one per kind); files written before it have one ``baseline``: n nodes of
    one offer, the single-zone kind."""
    if "baselines" not in data:
        fields = top.section("baseline")
        if fields is None:
            return ()
        offer = offers_from_records([fields.mapping("offer")], f"{origin}: baseline")[0]
        return (Baseline((NodeGroup(offer, fields.whole("count", minimum=1)),),
                         fields.number("samples_per_s", minimum=0), fields.number("usd_per_hour", minimum=0),
                         fields.number("usd_per_million_samples", minimum=0), BaselineKind.SINGLE_ZONE),)
    if data["baselines"] == []:
        return ()
    out = []
    for fields in top.sections("baselines"):
        group_fields = fields.sections("groups")
        offers = offers_from_records([g.mapping("offer") for g in group_fields], f"{origin}: baselines")
        groups = tuple(NodeGroup(offer, g.whole("count", minimum=1))
                       for g, offer in zip(group_fields, offers, strict=True))
        if not groups:
            raise InputError(f"{origin}: baselines: a baseline needs at least one group of nodes")
        out.append(Baseline(groups, fields.number("samples_per_s", minimum=0), fields.number("usd_per_hour", minimum=0),
                            fields.number("usd_per_million_samples", minimum=0),
                            BaselineKind(fields.choice("kind", [k.value for k in BaselineKind]))))
    return tuple(out)


def _fallbacks(data: Mapping[str, Any], top: Fields, origin: str) -> tuple[Fallback, ...]:
    """``fallbacks`` (absent in files written before them, or empty: none)."""
    if data.get("fallbacks") in (None, []):
        return ()
    out = []
    for f in top.sections("fallbacks"):
        moves = f.sections("moves")
        offers = offers_from_records([m.mapping("offer") for m in moves], f"{origin}: fallbacks")
        out.append(Fallback(f.text("replaces"), tuple((m.text("from"), o) for m, o in zip(moves, offers, strict=True)),
                            f.number("samples_per_s", minimum=0), f.number("usd_per_hour", minimum=0),
                            f.number("launch_chance", minimum=0, maximum=1)))
    return tuple(out)


def _missing(value: Any, origin: str) -> tuple[tuple[BaselineKind, str], ...]:
    kinds = {k.value: k for k in BaselineKind}
    if not isinstance(value, list) or not all(
            isinstance(v, list) and len(v) == 2 and v[0] in kinds and isinstance(v[1], str) for v in value):
        raise InputError(f"{origin}: missing_baselines: must be a list of [kind, reason] pairs, kind one of "
                         f"{', '.join(kinds)}")
    return tuple((kinds[k], why) for k, why in value)
