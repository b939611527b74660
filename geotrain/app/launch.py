"""``geotrain launch`` and ``geotrain launch --resume``: run a plan on a provider."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from geotrain.domain import Plan
from geotrain.errors import InputError
from geotrain.launcher.loop import Launcher
from geotrain.launcher.workers import check_checkpoint_url
from geotrain.launcher.options import LaunchOptions, RunOutcome, Status
from geotrain.launcher.preemptions import PreemptionSchedule, load_trace, parse_times
from geotrain.launcher.training import Training, resolve_training
from geotrain.ledger import Ledger, RunStatus
from geotrain.planning.exposure import unjoined_networks
from geotrain.planning.planfile import load_plan, plan_from_dict
from geotrain.procs import pid_alive
from geotrain.providers.base import LOCAL_PROVIDER, Provider
from geotrain.providers.base import LaunchRequest
from geotrain.providers.bootimage import boot_disk, boot_image, launch_images
from geotrain.providers.identity import identities_by_cloud, store_access_problem
from geotrain.providers.registry import PROVIDER_NAMES, ProviderSettings, dry_run_calls, make_provider, parse_names
from geotrain.train.worker_env import outbound_address

PROVIDERS = PROVIDER_NAMES


def launch_options(*, preempt_rate: float | None = None, preempt_trace: Path | None = None,
                   preempt_at: str | None = None, notice_s: float = 0.0, checkpoint_region: str | None = None,
                   block_min: float = 10.0, seed: int = 0, **given: object) -> LaunchOptions:
    """LaunchOptions from ``launch``'s flags: one way to inject preemptions, a trace's provider faults."""
    if checkpoint_region is not None and checkpoint_region.count("/") != 1:
        raise InputError(f"--checkpoint-region: {checkpoint_region!r} is not cloud/region, e.g. aws/us-east-1")
    if sum(x is not None for x in (preempt_rate, preempt_trace, preempt_at)) > 1:
        raise InputError("give one of --preempt-rate, --preempt-trace, --preempt-at")
    events, faults = (), ()
    if preempt_trace is not None:
        events, faults = load_trace(preempt_trace)
    elif preempt_at is not None:
        events = parse_times(preempt_at)
    schedule = PreemptionSchedule(events, preempt_rate, notice_s, seed, faults)
    roles = tuple(given.pop("instance_roles", None) or ())  # type: ignore[arg-type]
    identities_by_cloud(roles)  # each names one cloud's identity, by its form; one per cloud
    images = tuple(given.pop("images", None) or ())  # type: ignore[arg-type]
    launch_images(images)  # each an image of one cloud, by its form
    return LaunchOptions(instance_roles=roles, images=images, checkpoint_location=checkpoint_region, block_s=block_min * 60, seed=seed,
                         preemptions=schedule, **given)  # type: ignore[arg-type]


MAX_EMULATED_MBIT = 1000.0  # what one delay line forwards well on a small machine (geotrain/wan/delayline.py)


def emulated_network(plan: Plan, provider_name: str, on_note: Callable[[str], None] | None = None):  # noqa: ANN201
    """Namespaces and links for ``launch --emulate-wan``: every link has the perf model's RTT and
    single-stream bandwidth for the two nodes' planned locations (bandwidth capped at
    MAX_EMULATED_MBIT); each node held to an equal share of this machine's cores for the plan's nodes
    (``geotrain.wan.cpu``: a rate here is then a node's own, as on separate machines). None, with a
    note saying why, where this machine cannot emulate links."""
    if parse_names(provider_name) != (LOCAL_PROVIDER,):
        raise InputError(f"--emulate-wan emulates links between the local provider's nodes; the launch uses "
                         f"{provider_name}: drop --emulate-wan or launch with --provider local")
    from geotrain.wan import privileges

    reason = privileges()
    if reason is not None:
        if on_note:
            on_note(f"--emulate-wan: cannot emulate links here ({reason}); the nodes run as plain local processes")
        return None
    from geotrain.providers.netns import EmulatedNetwork
    from geotrain.wan.cpu import cores_per_node

    nodes = sum(item.count for item in plan.items)
    network = EmulatedNetwork(model_links(), plan.items[0].offer.location, cores_per_node=cores_per_node(nodes))
    if on_note:
        held = network.shares
        on_note(f"--emulate-wan: each node held to {held.cores:.2f} of this machine's cores" if held is not None
                else f"--emulate-wan: the nodes run unheld ({network.unheld})")
    return network


def model_links():  # noqa: ANN201
    """``link(a, b)`` → ``geotrain.wan.Link``: the perf model's RTT and single-stream bandwidth between two
    locations, the bandwidth capped at MAX_EMULATED_MBIT."""
    from geotrain.perf.network import NetworkModel
    from geotrain.wan import Link

    network = NetworkModel.bundled()

    def link(a, b) -> Link:  # noqa: ANN001
        estimate = network.link(a, b)
        return Link(rtt_ms=estimate.rtt_ms, rate_mbit=min(estimate.bandwidth_gbps * 1000, MAX_EMULATED_MBIT))

    return link


def get_provider(name: str, options: LaunchOptions | None = None, inventory: str | None = None,
                 network=None) -> Provider:  # noqa: ANN001
    """A provider by name, or a router over a comma-separated list (see ``geotrain.providers.registry``;
    cloud SDKs load only when asked for), wrapped in the fault injector when the launch's trace holds
    provider faults."""
    names = parse_names(name)
    if names == (LOCAL_PROVIDER,):
        from geotrain.providers.local import LocalProvider

        provider: Provider = LocalProvider(network=network)
    else:
        provider = make_provider(names, provider_settings(options, inventory))
    faults = options.preemptions.faults if options is not None else ()
    if faults:
        from geotrain.providers.base import NodeLink
        from geotrain.providers.faults import FaultInjector, LinkedFaultInjector

        provider = (LinkedFaultInjector if isinstance(provider, NodeLink) else FaultInjector)(provider, faults)
    return provider


def provider_settings(options: LaunchOptions | None, inventory: str | None) -> ProviderSettings:
    """What the cloud providers are told of the launch: the launcher's address (the one address the
    run's firewall opens the node agents to) and the on-prem inventory."""
    address = (options.control_address if options else None) or outbound_address()
    cidr = address if "/" in address else f"{address}/{128 if ':' in address else 32}"
    identities = identities_by_cloud(options.instance_roles if options else ())
    return ProviderSettings(control_cidr=cidr, inventory=Path(inventory) if inventory else None,
                            identities=tuple(sorted(identities.items())))


def check_clouds(plan, names: tuple[str, ...]) -> None:  # noqa: ANN001
    """Refuse a plan with nodes in a cloud none of the providers serves, before any VM is bought."""
    if names == (LOCAL_PROVIDER,):
        return
    missing = sorted({item.offer.location.cloud for item in plan.items} - set(names))
    if missing:
        raise InputError(f"the plan has nodes on {', '.join(missing)}, but --provider is {','.join(names)}; "
                         f"use --provider {','.join(sorted(set(names) | set(missing)))}")


def is_spec(path: Path) -> bool:
    """A YAML file (a task file or a job spec) rather than a plan file: launch plans it first."""
    return path.suffix.lower() in (".yaml", ".yml")


def plan_of(path: Path, *, provider_name: str | None = None, envs: dict[str, str] | None = None,
            document: dict | None = None) -> Plan:
    """The plan to launch: a plan file as it is, or a task file / job spec planned now (for the local
    provider's nodes when the launch is local, as ``plan --provider local`` predicts them); ``document``: one
    task of a pipeline file."""
    if not is_spec(path):
        return load_plan(path)
    from geotrain.app.plan import PlanRequest, run_plan

    local = parse_names(provider_name or LOCAL_PROVIDER) == (LOCAL_PROVIDER,)
    return run_plan(PlanRequest(spec=path, provider=LOCAL_PROVIDER if local else None, envs=dict(envs or {}),
                                document=document))


def _plan(plan: Plan | Path) -> Plan:
    return load_plan(plan) if isinstance(plan, Path) else plan


SHIPPING_PROVIDERS = ("local", "onprem", "aws", "gcp", "azure")  # providers whose nodes get the task's workdir and file mounts


def in_the_clear(plan: Plan | Path, *, provider_name: str | None = None) -> str | None:
    """What of the plan's traffic would cross the internet unencrypted (``planning.exposure``); None on
    the local provider, whose nodes are processes here."""
    from geotrain.planning.exposure import plaintext_words

    plan = _plan(plan)
    if parse_names(provider_name or plan.provider or LOCAL_PROVIDER) == (LOCAL_PROVIDER,):
        return None
    return plaintext_words(item.offer.location for item in plan.items)


def dry_run(plan: Plan | Path, options: LaunchOptions, *, provider_name: str | None = None) -> list[dict]:
    """What launching the plan would call, per planned node: the provider's SDK calls (or SSH
    commands) with their parameters and the startup script, the run token hidden. Calls nothing."""
    plan = _plan(plan)
    resolve_training(plan, options)
    names = parse_names(provider_name or plan.provider or LOCAL_PROVIDER)
    check_clouds(plan, names)
    if plan.job.task is not None and not options.command:
        from geotrain.launcher.task import check_task

        ships = all(n in SHIPPING_PROVIDERS for n in names)
        check_task(plan.job.task, shared_host=names == (LOCAL_PROVIDER,), ships=ships)
    settings = provider_settings(options, plan.job.onprem_inventory)
    out: list[dict] = []
    run_id = "run-dry-run"
    for item in plan.items:
        for k in range(item.count):
            request = LaunchRequest(f"{run_id}/{item.offer.offer_id}/{k}", run_id, item.offer,
                                    image=boot_image(item.offer, plan.job.constraints, options.images),
                                    disk=boot_disk(item.offer, plan.job.constraints))
            node = {"node": request.request_id, "offer": item.offer.offer_id, "market": item.offer.market.value,
                    "usd_per_hour": item.offer.price_usd_per_hour}
            if names == (LOCAL_PROVIDER,):
                node["provider"], node["calls"] = LOCAL_PROVIDER, [{"call": "local node agent (a process here)"}]
            else:
                cloud = item.offer.location.cloud
                node["provider"] = cloud
                node["calls"] = dry_run_calls(cloud, request, settings)
            out.append(node)
    return out


def check_data(options: LaunchOptions, plan: Plan, *, remote: bool) -> None:
    """Refuse ``--data`` the workers could not train on, before any node boots: with a user's command
    (it reads its own data), and data here that is not what the workload trains on. A path that is not
    on this machine is the nodes' own where they are other machines (each worker checks it there)."""
    if options.data is None:
        return
    if options.command:
        raise InputError("--data is the built-in runtime's: a command after `--` reads its own data (give it the "
                         "location as its own argument)")
    location = options.data
    here = "://" not in location or location.startswith("file://")
    if remote and (not here or not Path(location.removeprefix("file://")).expanduser().exists()):
        return
    if not here:
        return  # a URL: each node copies it (a failure there ends the worker with the reason)
    from geotrain.train.userdata import DataError, data_batches

    training = resolve_training(plan, options)
    try:
        data_batches(training.workload, location)
    except DataError as exc:
        raise InputError(f"--data: {exc}") from None


def launch(plan: Plan | Path, options: LaunchOptions, *, provider_name: str | None = None,
           on_status: Callable[[Status], None] | None = None,
           on_start: Callable[[str, Training], None] | None = None,
           emulate_wan: bool = False, on_note: Callable[[str], None] | None = None) -> RunOutcome:
    """Train the plan (or plan file) on the provider (default: the one the plan was made for, else the
    local one). ``emulate_wan``: the local provider's nodes talk over emulated links (``emulated_network``),
    all of which go when the launch ends, however it ends."""
    plan = _plan(plan)
    resolve_training(plan, options)  # refuse what cannot be trained before any provider is touched
    name = provider_name or plan.provider or LOCAL_PROVIDER
    check_clouds(plan, parse_names(name))  # nor a node no provider of the launch can buy
    remote = parse_names(name) != (LOCAL_PROVIDER,)
    if remote and "://" not in (options.checkpoint_url or ""):
        raise InputError("nodes on other machines cannot reach a checkpoint directory of this one: give "
                         "--checkpoint-url s3://BUCKET/PATH, gs://… or az://… (storage every node can write), or "
                         "file:///PATH for a file system every node mounts at that path")
    if remote:  # nor an object store the cloud nodes will have no credentials for
        problem = store_access_problem(options.checkpoint_url or "", {i.offer.location.cloud for i in plan.items},
                                       identities_by_cloud(options.instance_roles),
                                       dict(plan.job.task.envs) if plan.job.task else {})
        if problem:
            raise InputError(problem)
        apart = unjoined_networks(item.offer.location for item in plan.items)
        if apart:
            raise InputError(f"the plan's nodes are in {len(apart)} private networks ({', '.join(apart)}), and their "
                             "training traffic would be dropped: a run's firewall admits its nodes of one network "
                             "only (per-peer rules across regions and clouds are not made yet); plan them in one "
                             "AWS or Azure region, or on GCP, whose network spans its regions (plan --regions R)")
    if options.checkpoint_url and not (remote and options.checkpoint_url.startswith("file://")):
        check_checkpoint_url(options.checkpoint_url)  # and a checkpoint location the workers cannot use
    check_data(options, plan, remote=remote)
    # (a file:// location of nodes on other machines is theirs, not this machine's: each node probes it)
    network = emulated_network(plan, name, on_note) if emulate_wan else None
    try:
        provider = get_provider(name, options, plan.job.onprem_inventory, network=network)
        provider.check_credentials()
        launcher = Launcher(plan, provider, options=options, on_status=on_status)
        run_id = launcher.start()
        if on_start:
            on_start(run_id, launcher.training)
        return launcher.run()
    finally:
        if network is not None:
            network.close()


def resume(run_id: str, *, on_status: Callable[[Status], None] | None = None) -> RunOutcome:
    ledger = Ledger(create=False)
    row = ledger.run(run_id)
    if row.status in (RunStatus.COMPLETED, RunStatus.STOPPED):
        raise InputError(f"run {run_id} is {row.status}; nothing to resume")
    if row.launcher_pid and pid_alive(row.launcher_pid) and row.status == RunStatus.RUNNING \
            and row.launcher_pid != os.getpid():
        raise InputError(f"run {run_id} still has a launcher (pid {row.launcher_pid}); stop it first or wait")
    plan = plan_from_dict(json.loads(row.plan_json), f"ledger run {run_id}")
    options = LaunchOptions.from_dict(json.loads(row.options_json))
    provider = get_provider(row.provider, options, plan.job.onprem_inventory)
    launcher = Launcher(plan, provider, options=options, ledger=ledger, on_status=on_status)
    launcher.adopt(run_id)
    return launcher.run()
