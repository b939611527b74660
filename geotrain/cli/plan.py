"""``geotrain plan``: the cost/throughput-optimal mix for a job, from a spec file and/or flags."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from geotrain.cli.render import ENV_FILE_HELP, ENV_HELP, SECRET_HELP, console, finite, print_document, split_values, usd
from geotrain.domain import BASELINE_WORDS, PRECISIONS, Objective, SyncSettings, SyncStrategyName

_OBJECTIVES = tuple(o.value for o in Objective)
_STRATEGIES = tuple(s.value for s in SyncStrategyName)
_SYNC = SyncSettings()  # the defaults, for the help texts


def plan(
    spec: Path = typer.Argument(None, help="Job spec file (YAML); flags override its fields."),
    name: str = typer.Option(None, "--name", help="Job name (default: the spec's, else 'job')."),
    workload: str = typer.Option(None, "--workload", help="Workload, e.g. convnext-large, roberta-xlm."),
    objective: str = typer.Option(None, "--objective", help=f"One of {', '.join(_OBJECTIVES)} (default: from what is given)."),
    target_sps: float = typer.Option(None, "--target-sps", help="Target samples/s (objective min_cost)."),
    budget: float = typer.Option(None, "--budget", help="Budget in $/h (objective max_throughput, or a limit)."),
    samples: float = typer.Option(None, "--samples", callback=finite(1, 1e18),
                                  help="Samples to train (objective min_cost_by_deadline), e.g. 1e8."),
    deadline: float = typer.Option(None, "--deadline", help="Hours to train them in."),
    strategy: str = typer.Option(None, "--strategy", help=f"One of {', '.join(_STRATEGIES)} (default {_SYNC.strategy.value})."),
    provider: str = typer.Option(None, "--provider",
                                 help="local: plan for the local provider (nodes are processes on this machine)."),
    clouds: list[str] = typer.Option(None, "--clouds", help="Allowed clouds (comma-separated or repeated)."),
    regions: list[str] = typer.Option(None, "--regions", help="Allowed regions (region or cloud/region)."),
    continents: list[str] = typer.Option(None, "--continents", help="Allowed continents."),
    accelerators: list[str] = typer.Option(None, "--accelerators", help="Allowed accelerator models, e.g. T4,A10G."),
    max_regions: int = typer.Option(None, "--max-regions", min=1, help="At most this many regions."),
    max_nodes: int = typer.Option(None, "--max-nodes", min=1, help="At most this many nodes (default 64)."),
    max_per_zone: int = typer.Option(None, "--max-per-zone", min=1, help="At most this many nodes in one zone."),
    max_gpus_per_zone: int = typer.Option(None, "--max-gpus-per-zone", min=1,
                                          help="At most this many GPUs in one zone, whatever the node sizes."),
    zone_share: float = typer.Option(None, "--zone-share", min=0, max=1, help="At most this share of nodes in one zone."),
    spot_share: float = typer.Option(None, "--spot-share", min=0, max=1, help="At most this share of spot nodes."),
    spot_only: bool = typer.Option(None, "--spot-only", help="No on-demand nodes (owned on-prem ones still count)."),
    quota: list[str] = typer.Option(None, "--quota", help="SCOPE=N accelerators at most, e.g. aws=16, gcp/us-central1=8."),
    onprem: Path = typer.Option(None, "--onprem", help="On-prem inventory (YAML): your machines join the mix."),
    onprem_required: bool = typer.Option(None, "--onprem-required", help="Use every on-prem machine."),
    capacity_confidence: float = typer.Option(
        None, "--capacity-confidence", callback=finite(0.01, 1),
        help="Plan at most the nodes of an offer that the capacity model gives at once with this chance (e.g. 0.5)."),
    rates: Path = typer.Option(None, "--rates",
                               help="CSV of your own compute rates (workload,accelerator,samples_per_s[,accelerator_count]); "
                                    "they win over the bundled ones."),
    tbs: int = typer.Option(None, "--tbs", min=1, help=f"hivemind: samples per averaging round (default {_SYNC.target_batch_size})."),
    group_size: int = typer.Option(None, "--group-size", min=1,
                                   help=f"hivemind: the most peers in one averaging group (default {_SYNC.group_size})."),
    local_steps: int = typer.Option(None, "--local-steps", min=1, help=f"local-sgd: steps between averaging (default {_SYNC.local_steps})."),
    accumulation_steps: int = typer.Option(None, "--accumulation-steps", min=1,
                                           help=f"asgd-ga: steps per push (default {_SYNC.accumulation_steps})."),
    staleness: int = typer.Option(None, "--staleness", min=1,
                                  help=f"asgd-ga: pushes a region may run ahead of the home model (default {_SYNC.staleness})."),
    averaging_pushes: int = typer.Option(None, "--averaging-pushes", min=1,
                                         help=f"ma: pushes between averages of the regions' servers (default {_SYNC.averaging_pushes})."),
    precision: str = typer.Option(None, "--precision", help=f"On the wire: {', '.join(PRECISIONS)} (default {_SYNC.precision})."),
    micro_batches: int = typer.Option(None, "--micro-batches", min=1,
                                      help=f"Micro-batches each node trains per step (default {_SYNC.micro_batches})."),
    recovery_min: float = typer.Option(15.0, "--recovery-min", callback=finite(0, 10_080), help="Minutes of work an interruption costs."),
    backend: str = typer.Option("CBC", "--backend", help="MIP back end: CBC or SCIP."),
    time_limit: float = typer.Option(60.0, "--time-limit", callback=finite(1, 86_400), help="Seconds the search may take (then: best found, with its gap)."),
    nodes: str = typer.Option(None, "--nodes", help="Skip the solver: plan exactly this mix (syntax of `geotrain estimate --nodes`)."),
    allow_below_target: bool = typer.Option(
        False, "--allow-below-target",
        help="With --nodes: plan the mix even where it misses the target, budget or deadline (a warning; else exit 3)."),
    egress: Path = typer.Option(None, "--egress", help="CSV of your own egress rates, in the egress table's format "
                                "(cloud,link_class,src_continent,dst_continent,usd_per_gb[,payer][,source])."),
    snapshot_id: str = typer.Option(None, "--snapshot", help="Price snapshot id (default: the current one)."),
    raw_prices: bool = typer.Option(
        False, "--raw-prices",
        help="Plan on the listed prices, even a listing far below its type's price elsewhere that nothing recent "
             "confirms (by default such an offer is planned at its type's price)."),
    output: Path = typer.Option(None, "-o", "--output", help="Write the plan as JSON (for launch and cost-report)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    plot: Path = typer.Option(None, "--plot", help="Draw the cost/throughput frontier to this PNG file."),
    env: list[str] = typer.Option(None, "--env", metavar="NAME[=VALUE]", help=ENV_HELP),
    env_file: list[Path] = typer.Option(None, "--env-file", help=ENV_FILE_HELP),
    secret: list[str] = typer.Option(None, "--secret", metavar="NAME[=VALUE]", help=SECRET_HELP),
) -> None:
    """Choose the cost/throughput-optimal mix of spot, on-demand and on-prem nodes for a job."""
    from geotrain.app.plan import PlanRequest, pipeline_of, plan_record, run_pipeline, run_plan
    from geotrain.errors import InputError
    from geotrain.app.plan import task_envs as app_task_envs
    from geotrain.cli.render import checked

    if objective:
        checked((objective,), _OBJECTIVES, "--objective")
    if strategy:
        checked((strategy,), _STRATEGIES, "--strategy")
    flags: dict[str, Any] = {
        "name": name, "workload": workload, "objective": objective,
        "target_samples_per_s": target_sps, "budget_usd_per_hour": budget, "total_samples": _whole(samples, "--samples"),
        "deadline_h": deadline,
    }
    sync_flags: dict[str, Any] = {
        "strategy": strategy, "target_batch_size": tbs, "group_size": group_size, "local_steps": local_steps,
        "accumulation_steps": accumulation_steps, "staleness": staleness, "averaging_pushes": averaging_pushes,
        "precision": precision, "micro_batches": micro_batches,
    }
    constraints: dict[str, Any] = {
        "clouds": list(split_values(clouds)) or None, "regions": list(split_values(regions)) or None,
        "continents": list(split_values(continents)) or None,
        "accelerators": list(split_values(accelerators)) or None,
        "max_regions": max_regions, "max_nodes": max_nodes, "max_nodes_per_zone": max_per_zone,
        "max_gpus_per_zone": max_gpus_per_zone,
        "max_zone_share": zone_share, "max_spot_share": spot_share, "spot_only": spot_only,
        "quotas": _quotas(quota), "capacity_confidence": capacity_confidence,
    }
    request = PlanRequest(
        spec=spec, flags=flags, sync_flags=sync_flags, constraint_flags=constraints, onprem=onprem,
        onprem_required=onprem_required, snapshot_id=snapshot_id, backend=backend.upper(),
        recovery_h=recovery_min / 60, time_limit_s=time_limit, nodes=nodes, provider=provider, rates_file=rates,
        egress_file=egress, allow_below_target=allow_below_target, raw_prices=raw_prices,
        envs=app_task_envs(env, env_file, secret),
    )
    tasks = pipeline_of(spec) if spec is not None else None
    if tasks is not None:  # a SkyPilot pipeline: each task planned in turn
        if output is not None or plot is not None or nodes:
            raise InputError("a pipeline's tasks are planned one by one: -o, --plot and --nodes go with one task "
                             "(launch the pipeline file itself)")
        plans = run_pipeline(request, tasks)
        if as_json:
            print_document("pipeline", {"name": spec.stem, "plans": [plan_record(p) for p in plans]})
            return
        for i, ((name, _), one) in enumerate(zip(tasks, plans, strict=True), start=1):
            console().print(f"[bold]task {i} of {len(plans)}: {name}[/bold] (a pipeline's tasks run one after "
                            "the other)")
            render(one, output=None, plot=None)
        return
    if as_json or not sys.stderr.isatty():
        outcome = run_plan(request, output=output, plot=plot)
    else:  # a terminal: a live line on stderr while the search runs
        with SearchDisplay() as display:
            outcome = run_plan(replace(request, progress=display), output=output, plot=plot)
    for miss in outcome.misses:
        sys.stderr.write(f"warning: the given mix misses the job's goal: {miss}; planned anyway (--allow-below-target)\n")
    if as_json:
        print_document("plan", plan_record(outcome))
        return
    render(outcome, output=output, plot=plot)


class SearchDisplay:
    """The search's progress as one line on stderr, redrawn in place (rich), gone when planning ends."""

    def __enter__(self) -> SearchDisplay:
        from rich.live import Live

        self._live = Live("planning: reading offers …", console=console(err=True), transient=True,
                          refresh_per_second=8)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(*exc)

    def __call__(self, progress) -> None:  # noqa: ANN001 - app.plan.SearchProgress
        from rich.text import Text

        self._live.update(Text(progress_words(progress), no_wrap=True, overflow="ellipsis"))


_BOUND_WORDS = {"usd_per_hour": "no mix costs less than {}/h", "samples_per_s": "none trains faster than {}/s",
                "usd_per_million_samples": "none costs less than {} per 1M samples"}


def progress_words(p) -> str:  # noqa: ANN001 - app.plan.SearchProgress
    """One line: the stage, candidates, MIP solves so far, the best mix and the bound proven so far."""
    parts = [f"planning: {p.phase.replace('_', ' ') or 'starting'}", f"{p.candidates} candidates", f"{p.solves} MIP solves"]
    if p.best:
        nodes = sum(n for _, n in p.best)
        mix = " + ".join(f"{n} x {key}" for key, n in p.best) if len(p.best) <= 2 else f"{nodes} nodes of {len(p.best)} offers"
        parts.append(f"best {mix} ({usd(p.best_usd_per_hour, 2)}/h, {p.best_samples_per_s or 0:,.0f} samples/s)")
    if p.bound is not None and p.bound_unit in _BOUND_WORDS:
        value = f"{p.bound:,.0f}" if p.bound_unit == "samples_per_s" else usd(p.bound, 3)
        parts.append(_BOUND_WORDS[p.bound_unit].format(value))
    parts.append(f"{p.elapsed_s:.0f} s")
    return " · ".join(parts)


def _whole(value: float | None, option: str) -> int | None:
    from geotrain.errors import InputError

    if value is None:
        return None
    if value != int(value):
        raise InputError(f"{option}: {value:g} is not a whole number")
    return int(value)


def _seconds(value: float) -> str:
    return f"{value:,.1f} s" if value >= 1 else f"{value * 1000:,.1f} ms"


def _quotas(items: list[str] | None) -> dict[str, int] | None:
    from geotrain.errors import InputError

    out = {}
    for item in split_values(items):
        scope, _, value = item.partition("=")
        try:
            out[scope.strip()] = int(value)
        except ValueError:
            raise InputError(f"--quota: {item!r} is not SCOPE=N (e.g. aws=16 or gcp/us-central1=8)") from None
    return out or None


def answers(out, plan) -> None:  # noqa: ANN001
    """The answers to the job's question: when the samples are trained and for how much, what is left
    of the budget and what limited the mix, the goals a given mix misses."""
    from geotrain.app.plan import finishes_at

    job, done, use = plan.job, plan.completion, plan.budget_use
    if done is not None:
        def at(hours: float) -> str:
            return f"{hours:,.1f} h, at {finishes_at(plan, hours):%Y-%m-%d %H:%M} UTC"

        deadline = f" (deadline {job.deadline_h:g} h)" if job.deadline_h is not None else ""
        out.print(f"finish         {done.samples:,} samples in {at(done.hours)}, for {usd(done.usd, 2)} in all with "
                  f"expected interruptions{deadline}; without them in {at(done.raw_hours)}, for {usd(done.raw_usd, 2)}")
    if use is not None:
        out.print(f"budget         {usd(use.budget_usd_per_hour, 2)}/h: {usd(use.unused_usd_per_hour, 2)}/h "
                  f"({use.unused_share:.0%}) unused; limited by {use.words}")
    for miss in plan.misses:
        out.print(f"goal missed    {miss}")


def _render_task(out, plan) -> None:  # noqa: ANN001
    """A task without a workload: its price and risk; no throughput is claimed."""
    t, task = plan.totals, plan.job.task
    out.print(f"cost           {usd(t.usd_per_hour, 3)}/h for {plan.nodes} node(s); throughput not modelled (the task "
              "names no workload)")
    out.print(f"interruptions  {t.interruptions_per_hour:.4f} expected per hour")
    if task is not None:
        out.print(f"runs           setup {'yes' if task.setup else 'none'}; run {'yes' if task.run else 'none'}"
                  + (f"; workdir {task.workdir}" if task.workdir else "")
                  + (f"; {len(task.file_mounts)} file mount(s)" if task.file_mounts else "")
                  + (f"; envs {', '.join(k for k, _ in task.envs)}" if task.envs else ""))
    for line in plan.assumptions:
        out.print(f"assumption     {line}")


def render(plan, *, output: Path | None, plot: Path | None) -> None:  # noqa: ANN001
    from rich.table import Table

    from geotrain.app.plan import advantage, prices_line

    out = console()
    job = plan.job
    where = " on this machine (local provider)" if plan.provider == "local" else ""
    title = f"{plan.plan_id}: {job.workload} with {job.strategy.value}{where}, objective {plan.solver.objective.value}"
    if not job.modelled:
        title = f"{plan.plan_id}: task {job.name}, {plan.nodes} node(s), the cheapest that match its resources{where}"
    table = Table(title=title, title_justify="left")
    for col in ("cloud/region/zone", "instance", "accel", "market", "nodes", "$/h each", "samples/s"):
        table.add_column(col, justify="right" if col in ("nodes", "$/h each", "samples/s") else "left")
    for item in plan.items:
        o = item.offer
        accel = "-" if not o.shape.accelerator_count else f"{o.shape.accelerator_count}x{o.shape.accelerator}"
        table.add_row(f"{o.location.cloud}/{o.location.region}/{o.location.zone or '*'}", o.shape.instance_type, accel,
                      o.market.value, str(item.count), usd(o.price_usd_per_hour),
                      f"{item.samples_per_s:,.1f}" if job.modelled else "-")
    out.print(table)
    out.print(f"prices         {prices_line(plan)}")
    t = plan.totals
    if not job.modelled:
        _render_task(out, plan)
        _wrote(out, plan, output, plot)
        return
    gran = "-" if t.granularity is None else f"{t.granularity:.2f}"
    out.print(f"throughput     {t.samples_per_s:,.1f} samples/s ({t.goodput_samples_per_s:,.1f} after expected "
              f"interruptions); round {_seconds(t.time_per_round_s)}, granularity {gran}")
    out.print(f"cost           {usd(t.usd_per_hour, 3)}/h = compute {usd(t.compute_usd_per_hour, 3)}/h + egress "
              f"{usd(t.egress_usd_per_hour, 3)}/h + data {usd(t.data_egress_usd_per_hour, 3)}/h; "
              f"{usd(t.usd_per_million_samples, 3)} per 1M samples")
    out.print(f"sync           {job.sync.describe()}")
    out.print(f"interruptions  {t.interruptions_per_hour:.4f} expected per hour")
    out.print(f"bottleneck     {t.bottleneck}")
    answers(out, plan)
    for b in plan.baselines:
        _, words = advantage(plan, b)
        out.print(f"baseline       {BASELINE_WORDS[b.kind]}: {b.describe()}: "
                  f"{b.samples_per_s:,.1f} samples/s, {usd(b.usd_per_hour, 3)}/h, "
                  f"{usd(b.usd_per_million_samples, 3)} per 1M samples; {words}")
    for kind, why in plan.missing_baselines:
        out.print(f"baseline       {BASELINE_WORDS[kind]}: none ({why})")
    for zone in sorted({f.replaces for f in plan.fallbacks}):
        options = "; then ".join(
            f"{', '.join(sorted({o.location.zone_scope for _, o in f.moves}))} ({usd(f.usd_per_hour, 3)}/h, "
            f"{f.samples_per_s:,.0f}/s, chance {f.launch_chance:.0%})" for f in plan.fallbacks_for(zone))
        out.print(f"fallback       without {zone}: {options}")
    if plan.tradeoff:
        out.print(f"one choice     {plan.tradeoff}")
    if plan.frontier:
        points = ", ".join(f"{sps:,.0f}/s for {usd(cost, 2)}/h" for sps, cost in plan.frontier)
        out.print(f"frontier       {points}")
    s = plan.solver
    out.print(f"solver         {s.status} (gap {s.gap:.2%}{_bound_words(s)}), {s.solves} MIP solves in {s.wall_s:.2f} s, "
              f"{s.candidates} candidates ({s.dominated} dominated offers dropped), {s.backend}")
    if s.total_s:
        out.print(f"time           planning took {s.total_s:.2f} s in all: the search {s.wall_s:.2f} s, the frontier "
                  f"{s.frontier_s:.2f} s, the baselines {s.baselines_s:.2f} s")
    for line in plan.assumptions:
        out.print(f"assumption     {line}")
    _wrote(out, plan, output, plot)


def _bound_words(s) -> str:  # noqa: ANN001
    """What certifies the gap: the bound no mix that keeps the limits can beat."""
    if s.bound is None:
        return ""
    if s.bound_unit == "usd_per_hour":
        return f"; no mix meeting the goal costs less than {usd(s.bound, 3)}/h"
    if s.bound_unit == "samples_per_s":
        return f"; no mix within the limits trains faster than {s.bound:,.1f} samples/s"
    if s.bound_unit == "usd_per_million_samples":
        return f"; no mix within the limits trains for less than {usd(s.bound, 3)} per 1M samples"
    return ""


def _wrote(out, plan, output: Path | None, plot: Path | None) -> None:  # noqa: ANN001
    if output:
        out.print(f"wrote {output} (snapshot {plan.snapshot_id})")
    if plot:
        out.print(f"wrote {plot}")
