"""What a launch trains: the plan's workload and sync settings, or a stand-in the user asked for.

``launch`` trains what was planned. Where the built-in runtime cannot (a workload it does not have, a
strategy or wire precision it does not run yet), the launch is refused before any node starts, with
the ways out in the message: ``--train-workload`` (a built-in stand-in), ``--sync`` (a strategy the
runtime runs), or the user's own script after ``--``. What the user asks for instead of the plan is a
*substitution*: recorded in the ledger, shown by launch, status and cost-report, and it makes the
run's throughput not comparable with the plan's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geotrain.domain import Plan, SyncSettings, SyncStrategyName
from geotrain.errors import InputError
from geotrain.launcher.options import LaunchOptions
from geotrain.train import capabilities


@dataclass(frozen=True, slots=True)
class Training:
    workload: str  # what trains: a built-in workload, or the user's command line
    sync: SyncSettings  # the settings it trains with
    substitutions: tuple[str, ...]  # what differs from the plan, in words (empty: exactly the plan)
    global_micro_batches: int  # micro-batches of one step, fixed for the run (the plan's node count × per node)

    @property
    def planned(self) -> bool:
        return not self.substitutions


def resolve_training(plan: Plan, options: LaunchOptions) -> Training:
    """The training of this launch, or InputError naming what cannot be trained and the choices."""
    sync = plan.sync
    micro = sync.micro_batches * max(1, plan.nodes)
    if options.command:
        return Training(" ".join(options.command), sync, (), micro)
    if plan.job.task is not None:  # a task file's run (``launcher.task``)
        return Training(f"task {plan.job.name}", sync, (), micro)
    if not plan.job.modelled:
        raise InputError("the plan names no workload and no task to run; give your command after `--` "
                         "(geotrain launch PLAN -- python train.py)")
    substitutions: list[str] = []
    workload = plan.job.workload
    if options.train_workload is not None:
        if options.train_workload not in capabilities.WORKLOADS:
            raise InputError(f"--train-workload: {options.train_workload!r} is not a built-in workload; "
                             f"choices: {', '.join(capabilities.WORKLOADS)}")
        if options.train_workload != workload:
            substitutions.append(f"trains {options.train_workload} instead of the planned {workload}")
            workload = options.train_workload
    elif workload not in capabilities.WORKLOADS:
        raise InputError(
            f"the plan's workload {workload!r} cannot be trained by geotrain's built-in runtime (it trains "
            f"{', '.join(capabilities.WORKLOADS)}); give --train-workload {capabilities.WORKLOADS[0]} to train a "
            "stand-in (recorded as a substitution: its throughput is then not comparable with the plan's), or "
            "run your own training script after `--` (geotrain launch PLAN -- python train.py)")
    strategy = sync.strategy
    if options.sync is not None:
        if options.sync not in capabilities.STRATEGIES:
            raise InputError(f"--sync: {options.sync!r} is not a strategy the runtime runs; choices: "
                             f"{', '.join(capabilities.STRATEGIES)}")
        if options.sync != strategy.value:
            substitutions.append(f"syncs with {options.sync} instead of the planned {strategy.value}")
            strategy = SyncStrategyName(options.sync)
    elif strategy.value not in capabilities.STRATEGIES:
        raise InputError(
            f"the plan's strategy {strategy.value!r} is not in the training runtime yet (it runs "
            f"{', '.join(capabilities.STRATEGIES)}); give --sync local-sgd to train with local SGD instead "
            "(recorded as a substitution), re-plan with --strategy allreduce or local-sgd, or run your own "
            "script after `--`")
    if sync.precision not in capabilities.PRECISIONS:
        raise InputError(f"the plan sends {sync.precision} on the wire; the runtime sends "
                         f"{', '.join(capabilities.PRECISIONS)}: re-plan with --precision fp16 (or run your own "
                         "script after `--`)")
    if options.deterministic and sync.precision != "fp32":
        substitutions.append(f"--deterministic all-gathers fp32 gradients of every micro-batch instead of "
                             f"all-reducing {sync.precision} ones")
    return Training(workload, replace(sync, strategy=strategy), tuple(substitutions), micro)


def step_target(plan: Plan, options: LaunchOptions) -> int | None:
    """The steps a run trains: ``--steps`` for the built-in runtime; None for a user's script or a task
    file's run, which stop when they will."""
    return None if options.command or plan.job.task is not None else options.steps
