"""``geotrain launch``, ``geotrain status``, ``geotrain stop``, ``geotrain cleanup``."""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path

import typer

from geotrain.cli.render import ENV_FILE_HELP, ENV_HELP, SECRET_HELP, console, finite, print_document, usd


def launch(
    ctx: typer.Context,
    plan_path: Path = typer.Argument(None, help="Plan file from `geotrain plan -o`, or a task file / job spec "
                                                "(YAML: planned first, launched after you confirm; not with --resume)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Launch a task file's plan without asking."),
    provider: str = typer.Option(None, "--provider",
                                 help="Where nodes come from (default: the plan's; local: processes here)."),
    train_workload: str = typer.Option(None, "--train-workload",
                                       help="Train this built-in workload (tiny-cnn, tiny-lm) instead of the plan's "
                                            "(recorded as a substitution)."),
    steps: int = typer.Option(200, "--steps", min=1, max=10**10 - 1, help="Train this many steps (global batches)."),
    checkpoint_url: str = typer.Option(None, "--checkpoint-url", help="Where checkpoints go (any fsspec URL)."),
    data: str = typer.Option(None, "--data", metavar="LOCATION",
                             help="Train the built-in workload on your data instead of synthetic data: an image "
                                  "folder (one subfolder per class) for the vision models, a .npy file of token "
                                  "ids for the language models; a path on every node, or a URL (s3://, gs://, "
                                  "az://) each node copies."),
    checkpoint_every: int = typer.Option(20, "--checkpoint-every", min=1, max=10**10 - 1, help="Steps between checkpoints."),
    checkpoint_region: str = typer.Option(None, "--checkpoint-region",
                                          help="cloud/region of the checkpoint storage (prices its traffic)."),
    sync: str = typer.Option(None, "--sync", help="Run allreduce or local-sgd instead of the plan's strategy "
                                                  "(recorded as a substitution)."),
    deterministic: bool = typer.Option(False, "--deterministic",
                                       help="Bit-identical results whatever the node count (slower sync)."),
    preempt_rate: float = typer.Option(None, "--preempt-rate", callback=finite(0, 3600), help="Inject preemptions: this many per node-hour."),
    preempt_trace: Path = typer.Option(None, "--preempt-trace", help="Inject preemptions from a trace file."),
    preempt_at: str = typer.Option(None, "--preempt-at", help="Inject preemptions at these seconds, e.g. 10,25."),
    notice: float = typer.Option(0.0, "--notice", callback=finite(0, 86_400), help="Seconds of notice before an injected preemption."),
    block_min: float = typer.Option(10.0, "--block-min", callback=finite(0, 525_600), help="Minutes a preempted zone is left out before its own down spells are known (then: the expected rest of its down spell)."),
    max_restarts: int = typer.Option(3, "--max-restarts", min=0, max=10_000, help="Worker failures (not preemptions) allowed."),
    max_spend_usd: float = typer.Option(None, "--max-spend-usd", callback=finite(0, 1e9),
                                        help="Stop when the run has cost this many dollars in all."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**31 - 1, help="Seed of the model, the data and the injected preemptions."),
    resume_id: str = typer.Option(None, "--resume", help="Adopt the live nodes of a run whose launcher died and go on."),
    control_address: str = typer.Option(None, "--control-address",
                                        help="Where cloud nodes reach this machine (its public IP behind NAT; "
                                             "default: its outbound address); the only address the run's "
                                             "firewall lets reach the node agents."),
    instance_role: list[str] = typer.Option(None, "--instance-role", metavar="IDENTITY",
                                            help="The identity the cloud nodes get, to reach the checkpoint store: an "
                                                 "AWS instance profile (name or ARN), a GCP service account (email) "
                                                 "or an Azure user-assigned identity (resource ID); once per cloud."),
    image: list[str] = typer.Option(None, "--image", metavar="IMAGE",
                                    help="Boot this image instead of the task's image_id or the cloud's "
                                         "deep-learning image: ami-… (AWS; REGION=ami-… per region), "
                                         "projects/…/global/images/… (GCP), PUBLISHER:OFFER:SKU:VERSION (Azure)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what each provider would call (VMs, zones, prices, "
                                                          "the startup script) without calling it."),
    emulate_wan: bool = typer.Option(False, "--emulate-wan",
                                     help="Local provider: each node in a network namespace of its own, linked "
                                          "to the others with the perf model's RTT and bandwidth for their "
                                          "planned locations (needs root; else plain local nodes)."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON (progress goes to stderr)."),
    env: list[str] = typer.Option(None, "--env", metavar="NAME[=VALUE]", help=ENV_HELP),
    env_file: list[Path] = typer.Option(None, "--env-file", help=ENV_FILE_HELP),
    secret: list[str] = typer.Option(None, "--secret", metavar="NAME[=VALUE]", help=SECRET_HELP),
    name: str = typer.Option(None, "--name", "-c", help="Name the run (SkyPilot's cluster name): status, queue, "
                                                        "logs, exec and down take it for the run id; a task "
                                                        "launched with the name of a live run runs on its nodes."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Return once the run has started; it goes on in a "
                                                              "process of its own (geotrain logs RUN -f follows it)."),
) -> None:
    """Boot the plan's nodes, train on them, survive preemptions. After `--`, a user's torchrun-style command."""
    from geotrain.errors import EXIT_INTERRUPTED, GeotrainError, InputError, RunError

    from geotrain.app import launch as app_launch

    if plan_path is not None and resume_id:
        raise InputError("give a plan file or --resume RUN_ID, not both")
    if detach and (resume_id or dry_run):
        raise InputError("--detach goes with a plan or task file to launch (not --resume or --dry-run)")
    if (env or env_file or secret) and (plan_path is None or not app_launch.is_spec(plan_path)):
        raise InputError("--env, --env-file and --secret set a task file's envs: give them with the task file "
                         "(a plan file already holds its task's envs)")
    if name is not None and plan_path is not None and not resume_id and not dry_run:
        from geotrain.app.reuse import live_run_named, run_task_on

        live = live_run_named(name)
        if live is not None:  # as `sky launch -c NAME`: the task runs on the named run's nodes
            if not app_launch.is_spec(plan_path):
                raise InputError(f"run {live} ({name}) is live: a plan file would start another run; give a task "
                                 f"file to run on its nodes, or `geotrain down {name}` first")
            from geotrain.app.plan import task_envs as app_task_envs
            from geotrain.cli.nodes import _Prefixer

            console(err=True).print(f"run {live} ({name}) is live: the task runs on its nodes (setup, then run)")
            code = run_task_on(live, plan_path, app_task_envs(env, env_file, secret), emit=_Prefixer(),
                               skipped=lambda node, why: typer.echo(f"{node}: {why}; skipped", err=True))
            raise typer.Exit(code)
    plan = None
    pipeline: list = []
    if plan_path is not None and app_launch.is_spec(plan_path):  # a task file: plan it, show it, ask
        if not dry_run:
            _require_train_extra()
        from geotrain.app.plan import pipeline_of
        from geotrain.app.plan import task_envs as app_task_envs

        tasks = pipeline_of(plan_path)
        if tasks is not None:  # a SkyPilot pipeline: its tasks, each planned, launched one after the other
            if detach or dry_run:
                raise InputError("a pipeline's tasks run one after the other: launch it without --detach and "
                                 "--dry-run (geotrain plan shows each task's plan)")
            pipeline = [app_launch.plan_of(plan_path, provider_name=provider, envs=app_task_envs(env, env_file, secret),
                                           document=task) for _, task in tasks]
            for i, one in enumerate(pipeline, start=1):
                console(err=as_json).print(f"[bold]task {i} of {len(pipeline)}: {tasks[i - 1][0]}[/bold]")
                _show_plan(one, err=as_json)
            _confirm(yes)
        else:
            plan = app_launch.plan_of(plan_path, provider_name=provider, envs=app_task_envs(env, env_file, secret))
            _show_plan(plan, err=as_json)
            if not dry_run:
                _confirm(yes)
    if dry_run:
        if plan_path is None:
            raise InputError("--dry-run needs a plan file or task file (and no --resume)")
        options = app_launch.launch_options(steps=steps, command=tuple(ctx.args), train_workload=train_workload,
                                            sync=sync, control_address=control_address,
                                            instance_roles=tuple(instance_role or ()), images=tuple(image or ()))
        shown = plan or plan_path
        _show_dry_run(app_launch.dry_run(shown, options, provider_name=provider), as_json,
                      app_launch.in_the_clear(shown, provider_name=provider))
        return
    _require_train_extra()

    show = _display(err=as_json)  # with --json, stdout carries the document alone
    if resume_id:
        outcome = app_launch.resume(resume_id, on_status=show)
    else:
        if plan_path is None:
            raise InputError("give a plan file (geotrain plan ... -o plan.json), or --resume RUN_ID")
        options = app_launch.launch_options(
            train_workload=train_workload, sync=sync, command=tuple(ctx.args), steps=steps,
            checkpoint_url=checkpoint_url, checkpoint_region=checkpoint_region, data=data,
            checkpoint_every=checkpoint_every, deterministic=deterministic, max_restarts=max_restarts,
            block_min=block_min, max_spend_usd=max_spend_usd, seed=seed, preempt_rate=preempt_rate,
            preempt_trace=preempt_trace, preempt_at=preempt_at, notice_s=notice, control_address=control_address,
            instance_roles=tuple(instance_role or ()), images=tuple(image or ()), name=name,
        )
        if detach:
            from geotrain.app.detach import detach as start_detached

            run_id, log = start_detached(plan or app_launch.load_plan(plan_path), options, provider_name=provider)
            console().print(f"run {run_id} started, detached (its launcher's output: {log}); follow it with "
                            f"`geotrain logs {run_id} -f`, see it with `geotrain status`, end it with "
                            f"`geotrain down {name or run_id}`")
            return
        def launch_one(what):  # noqa: ANN001, ANN202 - a plan or a plan file
            streams: list = []
            try:
                return app_launch.launch(what, options, provider_name=provider, on_status=show,
                                         on_start=partial(_started, err=as_json, streams=streams),
                                         emulate_wan=emulate_wan, on_note=lambda note: console(err=True).print(note))
            finally:
                for stop in streams:
                    stop()

        for i, one in enumerate(pipeline[:-1], start=1):  # a pipeline's tasks before its last: each must complete
            try:
                done = launch_one(one)
            except GeotrainError as exc:
                stopped = RunError(f"the pipeline stops at task {i} of {len(pipeline)} ({one.job.name}): {exc}; the "
                                   "tasks after it were not launched")
                stopped.exit_code = exc.exit_code
                raise stopped from exc
            console(err=as_json).print(f"task {i} of {len(pipeline)} ({one.job.name}): run {done.run_id} "
                                       f"{done.status}: {done.reason}")
            if done.status != "completed":
                raise RunError(f"the pipeline stops at task {i} of {len(pipeline)} ({one.job.name}): run "
                               f"{done.run_id} {done.status} ({done.reason}); the tasks after it were not launched")
        outcome = launch_one(pipeline[-1] if pipeline else (plan or plan_path))
    if as_json:
        print_document("launch", _fields(outcome))
    else:
        steps = "" if outcome.reason.startswith("the script") else f"{outcome.steps} steps in "
        console().print(f"run {outcome.run_id} {outcome.status}: {outcome.reason}; {steps}"
                        f"{outcome.generations} generation(s), {outcome.preemptions} preemption(s), "
                        f"{outcome.restarts} restart(s), {usd(outcome.usd, 4)} in {outcome.wall_s:.1f} s; "
                        f"checkpoints in {outcome.checkpoint_url}"
                        + (f"; output: geotrain logs {outcome.run_id}" if steps == "" else ""))
    if outcome.status == "stopped" and outcome.reason == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)


def _show_plan(plan, *, err: bool) -> None:  # noqa: ANN001
    """A task file's plan before it is launched: the whole plan, or one line on stderr under --json."""
    from geotrain.cli.plan import render

    if err:
        typer.echo(f"plan {plan.plan_id}: {plan.nodes} node(s), "
                   + ", ".join(f"{i.count} x {i.offer.offer_id}" for i in plan.items)
                   + f"; {usd(plan.totals.usd_per_hour, 3)}/h", err=True)
        return
    render(plan, output=None, plot=None)


def _confirm(yes: bool) -> None:
    """Launch only when the user says so: --yes, or y at the prompt (a terminal only)."""
    from geotrain.errors import InputError

    if yes:
        return
    if not sys.stdin.isatty():
        raise InputError("launching a task file asks before it buys anything; give --yes to launch without asking")
    if not typer.confirm("Launch this plan?", default=False, err=True):
        typer.echo("not launched", err=True)
        raise typer.Exit(1)


def _show_dry_run(nodes: list[dict], as_json: bool, exposed: str | None = None) -> None:
    if as_json:
        print_document("launch-dry-run", {"nodes": nodes, "in_the_clear": exposed})
        return
    out = console()
    out.print(f"dry run: {len(nodes)} node(s) would be launched; nothing was called", markup=False)
    if exposed:
        out.print(f"in the clear: {exposed}", markup=False)
    for node in nodes:
        out.print(f"\n{node['node']} ({node['provider']}, {node['market']}, {usd(node['usd_per_hour'], 4)}/h)",
                  markup=False)
        for call in node["calls"]:
            out.print(f"  {call['call']}", markup=False)
            for key, value in (call.get("params") or {}).items():
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                if "\n" in text:
                    out.print(f"    {key}:", markup=False)
                    for line in text.splitlines():
                        out.print(f"      | {line}", markup=False)
                else:
                    out.print(f"    {key}: {text}", markup=False)


def _require_train_extra() -> None:
    """Training needs torch and fsspec; say how to get them before anything starts."""
    import importlib.util

    from geotrain.errors import InputError

    missing = [name for name in ("torch", "fsspec") if importlib.util.find_spec(name) is None]
    if missing:
        raise InputError(f"launch needs {' and '.join(missing)}: pip install 'geotrain[train]' "
                         "(see README, Installing torch)")


def _fields(obj) -> dict:  # noqa: ANN001
    return {name: getattr(obj, name) for name in obj.__slots__}


def _started(run_id: str, training, err: bool = False, streams: list | None = None) -> None:  # noqa: ANN001
    out = console(err)
    if training.workload.startswith("task "):  # a task file's setup and run (``launcher.task``)
        out.print(f"run {run_id} started: runs {training.workload} (setup once per node, then run on every node; "
                  f"their output follows, and stays in: geotrain logs {run_id})")
        if streams is not None:
            streams.append(_stream_output(run_id, err=True))
    else:
        out.print(f"run {run_id} started: trains {training.workload} with {training.sync.describe()}")
    for line in training.substitutions:
        out.print(f"  substituted: {line}")


def _stream_output(run_id: str, err: bool):  # noqa: ANN202 - the stop function
    """Print the task's output, each line after ``(node rankR)``, as ``sky launch`` streams it, on a thread
    until the returned function is called (which prints the rest)."""
    import threading

    from geotrain.app.logs import follow_output

    done = threading.Event()
    stream = sys.stderr if err else sys.stdout

    def emit(label: str, line: str) -> None:
        stream.write(f"({label}) {line}\n")
        stream.flush()

    thread = threading.Thread(target=follow_output, args=(run_id, emit, done.is_set), daemon=True,
                              name="geotrain-task-output")
    thread.start()

    def stop() -> None:
        done.set()
        thread.join(timeout=5)

    return stop


def _display(err: bool = False):  # noqa: ANN202
    """A line every couple of seconds (plain output), refreshed in place on a terminal; on stderr with ``err``."""
    out = console(err)
    stream = sys.stderr if err else sys.stdout
    last = {"t": 0.0, "key": None}

    def show(s) -> None:  # noqa: ANN001
        now = time.time()
        key = (s.generation, s.step, s.events[-1] if s.events else None)
        if key == last["key"] or now - last["t"] < (0.5 if stream.isatty() else 1.0):
            return
        last.update(t=now, key=key)
        nodes = ", ".join(f"{k} {v}" for k, v in sorted(s.nodes_by_region.items()))
        rate = "-" if s.samples_per_s is None else f"{s.samples_per_s:,.0f}/s"
        target = f"/{s.target_steps}" if s.target_steps else ""
        out.print(f"gen {s.generation} step {s.step}{target} samples {s.samples:,} {rate} "
                  f"nodes ({nodes}) {usd(s.usd_so_far, 4)} preemptions {s.preemptions}"
                  + (f" | {s.events[-1]}" if s.events else ""))

    return show


def status(
    run_id: str = typer.Argument(None, help="A run id or name (default: the live runs as a table)."),
    everything: bool = typer.Option(False, "--all", "-a", help="Every run, ended ones too (the table)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON (every run, or the one given)."),
) -> None:
    """The live runs, a line each (`--all`: every run); one run in full: progress, nodes up per region,
    cost so far, last events."""
    from geotrain.app.status import status as run_status

    if as_json:
        print_document("status", {"runs": [_fields(r) for r in run_status(run_id)]})
        return
    if run_id is not None:
        _status_in_full(run_status(run_id))
        return
    runs = run_status(everything=everything)
    if not runs:
        earlier = len(run_status()) if not everything else 0
        console().print("No live runs" + (f"; {earlier} earlier: geotrain status --all" if earlier else
                                          "; start one with `geotrain launch task.yaml`") + ".")
        return
    _status_table(runs)


def queue(name: str = typer.Argument(None, help="A run name (launch -c NAME); default: every named run.")) -> None:
    """SkyPilot's `sky queue`: the runs of a name (launch -c NAME), a line each, newest last."""
    from geotrain.app.status import status as run_status

    runs = [r for r in run_status() if r.name is not None and (name is None or r.name == name)]
    if not runs:
        console().print(f"No run named {name}." if name else "No named runs (launch -c NAME names one).")
        return
    _status_table(runs)


def _status_table(runs) -> None:  # noqa: ANN001 - RunSummary list
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("RUN", "NAME", "STATUS", "NODES", "STEP", "COST", "STARTED"):
        table.add_column(column, no_wrap=column != "STATUS")
    for r in runs:
        up = sum(r.nodes_up_by_region.values())
        table.add_row(r.run_id, r.name or "-", r.status.split(" (")[0], f"{up}/{r.nodes_total}",
                      f"{r.step}{f'/{r.target_steps}' if r.target_steps else ''}", usd(r.usd_so_far, 4),
                      r.created_at.replace("T", " ")[:19])
    console().print(table)


def _status_in_full(runs) -> None:  # noqa: ANN001 - RunSummary list
    out = console()
    for r in runs:
        nodes = ", ".join(f"{k}: {v}" for k, v in sorted(r.nodes_up_by_region.items())) or "none up"
        rate = "" if r.samples_per_s is None else f", {r.samples_per_s:,.0f} samples/s"
        workload = r.workload + (f" ({'; '.join(r.substitutions)})" if r.substitutions else "")
        out.print(f"[bold]{r.run_id}[/bold]{f' ({r.name})' if r.name else ''} {r.status}"
                  f"{f' ({r.reason})' if r.reason else ''} — {workload}, "
                  f"step {r.step}{f'/{r.target_steps}' if r.target_steps else ''}, {r.samples:,} samples{rate}, "
                  f"nodes {nodes} "
                  f"(of {r.nodes_total} launched), {r.preemptions} preemptions, {usd(r.usd_so_far, 4)}"
                  + (" so far" if r.status.startswith(("running", "orphaned")) else ""))
        for line in r.last_events:
            out.print(f"    {line}")


def stop(run_id: str = typer.Argument(..., help="The run to stop (its id or name).")) -> None:
    """Stop a run and terminate all of its nodes."""
    from geotrain.app.stop import stop as stop_run

    console().print(stop_run(run_id))


def down(run_id: str = typer.Argument(..., help="The run to stop (its id or name).")) -> None:
    """SkyPilot's `sky down`: stop a run and terminate all of its nodes (as `geotrain stop`)."""
    stop(run_id)


def cleanup(
    everything: bool = typer.Option(False, "--all", help="Also the namespaces of runs whose launcher still runs."),
    cloud: str = typer.Option(None, "--cloud", help="aws, gcp or azure: release the resources of geotrain runs "
                                                     "there, found by their tags from any machine (no local state)."),
    run_id: str = typer.Option(None, "--run", help="With --cloud: only this run's resources (default: every run's)."),
    regions: list[str] = typer.Option(None, "--region", help="With --cloud: only this region (repeatable; default: "
                                                             "every region the account has)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --cloud: release without asking."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --cloud: list what would be released; change nothing."),
) -> None:
    """Remove what emulated-WAN runs left behind (a crashed launcher); with --cloud, release a run's VMs, disks,
    addresses and firewall rules on that cloud, found by their tags (after a launcher was killed)."""
    if cloud is None:
        if run_id or regions or dry_run:
            from geotrain.errors import InputError

            raise InputError("--run, --region and --dry-run go with --cloud aws|gcp|azure")
        from geotrain.app.cleanup import cleanup as remove

        removed = remove(everything=everything)
        console().print(f"removed {len(removed)}: {', '.join(removed)}" if removed else "nothing to remove")
        return
    _cloud_cleanup(cloud, run_id, tuple(regions or ()), yes=yes, dry_run=dry_run)


def _cloud_cleanup(cloud: str, run_id: str | None, regions: tuple[str, ...], *, yes: bool, dry_run: bool) -> None:
    from geotrain.app.cleanup import cloud_cleanup
    from geotrain.errors import InputError, ProviderError

    out = console()
    what = f"run {run_id}" if run_id else "every geotrain run"
    where = ", ".join(regions) if regions else "every region"
    if not (yes or dry_run):  # list first, then ask
        found = cloud_cleanup(cloud, run_id=run_id, regions=regions, dry_run=True)
        for swept in found:
            out.print(swept.line(), markup=False)
        if not found:
            out.print(f"{cloud}: nothing of {what} found in {where}", markup=False)
            return
        if not sys.stdin.isatty():
            raise InputError("cleanup --cloud releases what it finds: give --yes (or --dry-run to list only)")
        if not typer.confirm(f"Release these {len(found)} resource(s)?", default=False, err=True):
            typer.echo("nothing released", err=True)
            raise typer.Exit(1)
    out.print(f"{cloud}: looking for the resources of {what} in {where} by their geotrain-run tag"
              + (" (dry run: nothing is changed)" if dry_run else ""), markup=False)
    swept = cloud_cleanup(cloud, run_id=run_id, regions=regions, dry_run=dry_run,
                          say=lambda s: out.print(s.line(), markup=False))
    left = [s for s in swept if not s.released]
    if not swept:
        out.print(f"{cloud}: nothing of {what} found", markup=False)
    elif dry_run:
        out.print(f"{cloud}: {len(swept)} resource(s) would be released", markup=False)
    elif left:
        raise ProviderError(f"{cloud}: {len(swept) - len(left)} of {len(swept)} resource(s) released; left: "
                            + "; ".join(s.line() for s in left) + "; run `geotrain cleanup --cloud "
                            f"{cloud}` again in a few minutes", scope=cloud)
    else:
        out.print(f"{cloud}: released all {len(swept)} resource(s)", markup=False)
