"""The launcher loop: provision the plan, run generations of workers, recover from preemptions.

A *generation* is one set of nodes training together. The loop:

1. makes sure the wanted nodes exist, launching only what is missing and meeting the provider's
   failures (capacity, quota, throttling, unknown outcomes, nodes that die booting) by blocking their
   scope and moving the missing nodes to the plan's fallbacks, or re-planning
   (``geotrain.launcher.provisioning``);
2. starts one worker per node (``geotrain.train.runtime`` with the plan's workload and sync settings,
   or the user's command) with the ranks in location order, the rendezvous in the launcher's own TCP
   store (a stable host: it does not die with a preempted node), and a new store prefix per
   generation; a node that dies before its worker starts is a boot failure, not a preemption;
3. watches the workers and the provider: all workers done → the run is complete; a node preempted
   or lost → its zone is blocked for a while, its nodes go to the zone's fallback (or the plan is
   solved again with the surviving nodes kept and the blocked zones left out), only the difference
   is launched, and the next generation resumes
   from the newest committed checkpoint; a worker failing while every node is up → an error restart
   (at most ``max_restarts``; preemptions never use this budget).

What the run has cost is :func:`geotrain.billing.run_cost` — the progress line shows it, and
``--max-spend-usd`` stops the run (every node terminated) before the cost, projected over the next
refresh and the time to terminate, passes the limit.

Ctrl-C (SIGINT) or ``geotrain stop`` (SIGTERM) terminates every node of the run. Killing the launcher
itself leaves the nodes running (as VMs would); ``geotrain launch --resume RUN_ID`` adopts them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from geotrain.billing import run_cost
from geotrain.domain import Objective, Offer, Plan
from geotrain.errors import GeotrainError, ProviderError, RunError
from geotrain.files import atomic_write_text, geotrain_home
from geotrain.launcher.boot import boot_generation, release_all
from geotrain.launcher.dht import DhtBootstrap
from geotrain.launcher.elastic import replace_lost
from geotrain.launcher.injector import Injector
from geotrain.launcher.metering import WireMeter
from geotrain.launcher.options import LaunchOptions, RunOutcome, Status
from geotrain.launcher.deadline import Deadline
from geotrain.launcher.provisioning import boot_failed, mend, provision, recover, survivors_of, waiting_s
from geotrain.launcher.replanning import keep_the_deadline
from geotrain.launcher.spot_policy import Mix, Situation, SpotPolicy
from geotrain.launcher.steering import market_key, offer_mixes
from geotrain.launcher.watch import MarketWatch, Need, need_of
from geotrain.launcher.task import check_task, script_workdir, setup_failure, task_argv, task_command
from geotrain.launcher.training import Training, resolve_training, step_target
from geotrain.launcher.workers import (check_checkpoint_url, check_from_nodes, data_failure, generation_backend,
                                      kill_stale_workers,
                                      last_words, node_dir, open_store, store_host)
from geotrain.train.ledger_relay import RELAY_ENV, RELAY_STORE, drain, relay_env
from geotrain.train.progress import completed_reason
from geotrain.train.worker_env import DHT_PEERS_ENV, ELASTIC_KEY, JOINING_ENV, free_port, node_env, worker_env
from geotrain.ledger import EventKind, Ledger, RunStatus
from geotrain.strategies import entry
from geotrain.providers.base import Networked, NodeInfo, NodeLink, NodeProcess, NodeState, PeerRules, Provider
from geotrain.providers.startup import PUBLIC_INTERFACE

if TYPE_CHECKING:
    from geotrain.pricing.snapshot import PriceSnapshot

PEER_LOST = 75
METER_EVERY_S = 10.0  # how often the wire's byte counters (emulated links) reach the ledger
LOSS_SETTLE_S = 5.0  # how long a worker failure waits for the provider to record a lost node (loaded machines)
COST_REFRESH_S = 0.5  # how often the run's cost is taken while it trains
SPEND_WINDOW_S = 5.0  # the spend rate is the cost's rise over this window (bytes reach the ledger in bursts)
TERMINATE_MARGIN_S = 0.5  # time the spend limit allows for terminating every node
DEADLINE_LOOK_S = 5.0  # how often a deadline plan's slack is checked while it trains


class Launcher:
    """Runs one plan on one provider. Use :meth:`start` (new run) or :meth:`adopt` (resume), then :meth:`run`."""

    def __init__(self, plan: Plan, provider: Provider, *, options: LaunchOptions, ledger: Ledger | None = None,
                 on_status: Callable[[Status], None] | None = None) -> None:
        self.plan = plan
        self.provider = provider
        self.options = options
        self.training: Training = resolve_training(plan, options)
        self.ledger = ledger or Ledger()
        self.on_status = on_status
        self.run_id = ""
        self.offers: dict[str, Offer] = {item.offer.offer_id: item.offer for item in plan.items}
        self.wanted: Counter[str] = Counter({item.offer.offer_id: item.count for item in plan.items})
        self.blocked: dict[str, float] = {}  # scope (cloud, region, zone, offer id) -> blocked until (unix time)
        self.stand_ins: dict[str, str] = {}  # planned offer id -> the fallback offer that holds its nodes now
        self.generation = 0
        self.preemptions = 0
        self.restarts = 0
        self.clock = time  # provisioning's clock (``provisioning.Clock``)
        self.watch = MarketWatch(down_prior_h=options.block_s / 3600)  # what this launch sees of its markets
        self.spot_policy = SpotPolicy()
        self._mixes: list[Mix] | None = None
        self._deadline_looked = 0.0
        self.started_at = time.time()
        self.training_started_at: float | None = None
        self._stop_reason: str | None = None
        self._procs: dict[str, NodeProcess] = {}
        self.members: list[NodeInfo] = []  # the generation's nodes by rank
        self.departed: set[str] = set()  # members an elastic generation lost and has not replaced
        self._dht: DhtBootstrap | None = None  # an elastic strategy's DHT bootstrap peer (hivemind)
        self.peers: list[str] = []  # where the members reach each other, head first
        self._store = None
        self._relayed: dict[int, int] = {}
        self._store_secret = ""
        self._cost_at = 0.0
        self._costs: deque[tuple[float, float]] = deque()  # (time, cost) over the last SPEND_WINDOW_S
        self.workdir = Path.cwd()  # a user's command runs where the launcher was started (or a copy of it)
        self.shipped: set[str] = set()  # nodes that have their copy of the workdir and file mounts
        self.probed: set[str] = set()  # nodes that have written the checkpoint store
        self.status = Status("")

    # -- run lifecycle ------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        return geotrain_home() / "runs" / self.run_id

    @property
    def stop_requested(self) -> bool:
        return self._stop_reason is not None

    def start(self, run_id: str | None = None) -> str:
        """Register a new run in the ledger."""
        from geotrain.planning.planfile import plan_to_dict

        if self.plan.job.task is not None and not self.options.command:  # before anything is bought
            check_task(self.plan.job.task, shared_host=self.provider.capabilities.shared_host,
                       ships=isinstance(self.provider, NodeLink))
        self.run_id = run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
        url = self.options.checkpoint_url or str(self.run_dir / "checkpoints")
        if self.provider.capabilities.shared_host or not url.startswith("file://"):
            check_checkpoint_url(url)  # (a file:// location of other machines is probed from each node)
        self.options = replace(self.options, checkpoint_url=url)
        t = self.training
        self.ledger.create_run(
            run_id=self.run_id, plan_id=self.plan.plan_id, plan_json=json.dumps(plan_to_dict(self.plan)),
            workload=t.workload, provider=self.provider.name, checkpoint_url=url, launcher_pid=os.getpid(),
            target_steps=step_target(self.plan, self.options), options=self.options.to_dict(),
            substitutions=t.substitutions,
        )
        self.status = Status(self.run_id, target_steps=step_target(self.plan, self.options) or 0)
        self.ledger.event(self.run_id, EventKind.RUN_STARTED, plan_id=self.plan.plan_id, nodes=self.plan.nodes,
                          workload=t.workload, sync=t.sync.to_mapping(),
                          preemptions=self.options.preemptions.to_dict())
        for line in t.substitutions:
            self.ledger.event(self.run_id, EventKind.SUBSTITUTED, what=line)
        return self.run_id

    def adopt(self, run_id: str) -> None:
        """Take over a run whose launcher died: its live nodes are kept, its stale workers killed."""
        self.run_id = run_id
        self.status = Status(run_id, target_steps=step_target(self.plan, self.options) or 0)
        self.ledger.set_launcher(run_id, os.getpid())
        for event in self.ledger.events(run_id, kinds=(EventKind.FELL_BACK, EventKind.REPLANNED)):
            self.wanted = Counter(event.detail["wanted"])
            if event.kind == EventKind.REPLANNED:
                self.stand_ins.clear()
            else:
                self.stand_ins.update(event.detail["moves"])
            for record in event.detail.get("offers", []):
                offer = _offer_from_record(record)
                self.offers[offer.offer_id] = offer
        for event in self.ledger.events(run_id, kinds=(EventKind.BLOCKED,)):
            self.blocked[event.detail["scope"]] = event.detail["until"]
        generations = self.ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))
        self.generation = max((e.detail["generation"] for e in generations), default=0)
        if generations:
            self.training_started_at = generations[0].at  # the schedule's at_s counts from the run's start
        self.preemptions = len(self.ledger.events(run_id, kinds=(EventKind.PREEMPTED,)))
        self.restarts = len(self.ledger.events(run_id, kinds=(EventKind.WORKER_FAILED,)))
        if generations:
            kill_stale_workers(generations[-1].detail.get("pids", {}), run_id)
        adopted = [n.node_id for n in self.alive_nodes()]
        self.ledger.event(run_id, EventKind.RESUMED, adopted=adopted, launcher_pid=os.getpid())

    def request_stop(self, reason: str) -> None:
        self._stop_reason = reason

    def run(self) -> RunOutcome:
        if not self.run_id:
            raise RuntimeError("call start() or adopt() first")
        import torch.distributed as dist

        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        if threading.current_thread() is threading.main_thread():
            for sig in previous:
                signal.signal(sig, lambda s, f: self.request_stop("interrupted" if s == signal.SIGINT else "stopped"))
        network = self.provider.network if isinstance(self.provider, Networked) else None
        self._store = open_store(dist, self.provider.capabilities.shared_host, network,
                                 tunneled=isinstance(self.provider, NodeLink))
        self._wire = WireMeter(self.provider, self.ledger, self.run_id)
        self._dist = dist
        self._store_secret = secrets.token_hex(16)
        if entry(self.training.sync.strategy).elastic and network is None and self.plan.job.task is None:
            self._dht = DhtBootstrap(self.run_dir, "127.0.0.1" if self.provider.capabilities.shared_host
                                     or isinstance(self.provider, NodeLink) else "0.0.0.0")
        injector = Injector(self)
        injector.start()
        try:
            return self._loop()
        except BaseException as exc:
            self._terminate_all("failed")
            if self.ledger.run(self.run_id).status == RunStatus.RUNNING:  # not already ended (spend limit)
                reason = str(exc) if isinstance(exc, GeotrainError) else f"{type(exc).__name__}: {exc}"
                self.ledger.finish_run(self.run_id, RunStatus.FAILED, reason)
                self.ledger.event(self.run_id, EventKind.FAILED, reason=reason)
            raise
        finally:
            injector.stop()
            if threading.current_thread() is threading.main_thread():
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            self._store = None
            if self._dht is not None:
                self._dht.close()
                self._dht = None

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> RunOutcome:
        while True:
            if self._stop_reason:
                return self._finish_stopped()
            members = provision(self)
            if self._stop_reason:
                return self._finish_stopped()
            if not members and (pause := waiting_s(self)) is not None:  # spot may come back before the deadline
                self.ledger.event(self.run_id, EventKind.WAITING, pause_s=pause, reason="no spot node can be had")
                self.clock.sleep(pause)
                continue
            if not members:
                reasons = [e.detail.get("reason", e.kind) for e in self.ledger.events(
                    self.run_id, kinds=(EventKind.LAUNCH_FAILED, EventKind.BOOT_FAILED, EventKind.REPLAN_FAILED))][-3:]
                raise RunError("no node is left and none could be launched"
                               + (f" ({'; '.join(map(str, reasons))})" if reasons else "")
                               + f"; see `geotrain status {self.run_id}`, then widen the plan (more clouds, "
                               "regions or accelerators) or lower --block-min and resume")
            self.generation += 1
            if not self._start_generation(members):
                continue  # a node died before its worker started: re-planned, provision again
            outcome, detail = self._watch()
            if outcome == "completed":
                script = bool(self.options.command) or self.plan.job.task is not None  # a user's: reported steps
                return self._finish(RunStatus.COMPLETED, completed_reason(self.ledger.last_progress(self.run_id),
                                                                          script=script))
            if outcome == "stopped":
                return self._finish_stopped()
            if outcome == "spend_limit":
                return self._spend_limit_reached()
            if outcome == "replanned":
                continue
            if outcome == "preempted":
                self._recover(detail)
            else:  # a worker failed with every node up
                self.restarts += 1
                said = last_words(self.run_dir / "logs", self.generation, detail, lines=8)
                self.ledger.event(self.run_id, EventKind.WORKER_FAILED, generation=self.generation, codes=detail,
                                  restarts=self.restarts, said=said)
                failed_setup = setup_failure(said) or data_failure(said)
                if failed_setup is not None:  # as SkyPilot: a failed setup ends the run at once, it is not retried
                    self._terminate_all("failed")
                    raise RunError(failed_setup)
                if self.restarts > self.options.max_restarts:
                    self._terminate_all("failed")
                    logs = self.run_dir / "logs"
                    raise RunError(f"workers failed {self.restarts} times with every node up (exit codes "
                                   f"{detail}); the restart budget is {self.options.max_restarts}; see {logs}")

    def _finish(self, status: RunStatus, reason: str) -> RunOutcome:
        self._terminate_all(status.value)
        self.ledger.finish_run(self.run_id, status, reason)
        self.ledger.event(self.run_id, EventKind(status.value), reason=reason)
        self._refresh_status(force=True)
        t = self.training
        return RunOutcome(self.run_id, status.value, reason, self.status.step, self.generation, self.preemptions,
                          self.restarts, self.status.usd_so_far, time.time() - self.started_at,
                          self.options.checkpoint_url or "", t.workload, t.substitutions)

    def _finish_stopped(self) -> RunOutcome:
        self._kill_workers()
        return self._finish(RunStatus.STOPPED, self._stop_reason or "stopped")

    def _spend_limit_reached(self) -> RunOutcome:
        decided = time.time()
        self._kill_workers()
        self._terminate_all("stopped")
        limit = self.options.max_spend_usd or 0.0
        cost = run_cost(self.ledger, self.run_id).total_usd
        reason = (f"the spend limit of ${limit:,.4f} is reached (the run cost ${cost:,.4f}); to go on from its "
                  f"checkpoints, launch again with a higher --max-spend-usd and --checkpoint-url "
                  f"{self.options.checkpoint_url}")
        self.ledger.event(self.run_id, EventKind.SPEND_LIMIT, limit_usd=limit, usd=cost,
                          terminate_s=round(time.time() - decided, 3))
        self.ledger.finish_run(self.run_id, RunStatus.STOPPED, reason)
        self.ledger.event(self.run_id, EventKind.STOPPED, reason=reason)
        self._refresh_status(force=True)
        raise RunError(reason)

    # -- nodes ----------------------------------------------------------------------------------

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.provider.list(self.run_id) if n.state == NodeState.RUNNING]

    def _terminate_all(self, reason: str) -> None:
        self._kill_workers()
        self._meter()
        release_all(self.provider, self.run_id, reason)  # many at a time: a stop releases a large mix in seconds
        still_open = {row.node_id for row in self.ledger.nodes(self.run_id) if row.ended_at is None}
        for node in self.provider.list(self.run_id):  # the ledger takes the provider's end times
            if node.state == NodeState.PREEMPTED and node.node_id in still_open:  # taken while the run ended
                self.preemptions += 1
                self.ledger.event(self.run_id, EventKind.PREEMPTED, node_id=node.node_id,
                                  zone=node.location.zone_scope, reason=node.end_reason or "preempted",
                                  generation=self.generation, when="the run was ending")
            self.ledger.end_node(node.node_id, node.end_reason or reason,
                                 at=node.ended_at.timestamp() if node.ended_at else None)

    # -- generations ----------------------------------------------------------------------------

    def _start_generation(self, members: list[NodeInfo]) -> bool:
        """Start one worker per member. False: a member died before its worker started (a boot
        failure, met by blocking its zone and re-planning), or a stop was asked while they booted."""
        self.members, self.departed = members, set()
        if not self.ready(members):
            return False
        world = len(members)
        t = self.training
        table = [{**node_row(n), "rank": r} for r, n in enumerate(members)]
        config = {
            "run_id": self.run_id, "generation": self.generation, "workload": t.workload,
            "sync": t.sync.to_mapping(), "deterministic": self.options.deterministic, "data": self.options.data,
            "micro_batches": max(t.global_micro_batches, world),
            "lr": self.options.lr, "momentum": self.options.momentum, "seed": self.options.seed,
            "target_steps": self.options.steps, "checkpoint_url": self.options.checkpoint_url,
            "checkpoint_every": self.options.checkpoint_every,
            "progress_every": self.options.progress_every, "collective_timeout_s": self.options.collective_timeout_s,
            "store": {"host": store_host(self.provider.capabilities.shared_host, self.options.control_address,
                                         self.provider.network if isinstance(self.provider, Networked) else None),
                      "port": self._store.port, "prefix": self._store_secret}, "nodes": table,
            "backend": generation_backend(self.provider, self.options.command, len(members)),
        }
        self._relayed: dict[int, int] = {}  # rank -> the last of its ledger records copied (``_drain``)
        name = f"generation-{self.generation}.json"
        text = json.dumps(config, indent=2)
        atomic_write_text(self.run_dir / name, text)  # the run's record; each node gets its own copy
        master_port = free_port()
        link = self.provider if isinstance(self.provider, NodeLink) else None
        self.peers = peer_addresses(members)
        across = link is not None and len({m.location.network_scope for m in members}) > 1
        if across and isinstance(self.provider, PeerRules):  # the nodes reach each other at their public addresses
            self.provider.admit_peers(self.run_id, [m.address for m in members])
        self._procs = {}
        self._generation_file = (name, config, master_port, across)
        for rank, node in enumerate(members):
            if not self._start_worker(rank, node, world):
                return False
        if self.training_started_at is None:
            self.training_started_at = time.time()
        self.ledger.event(self.run_id, EventKind.GENERATION_STARTED, generation=self.generation, world_size=world,
                          nodes=[n.node_id for n in members], sync=t.sync.strategy.value,
                          pids={node_id: p.pid for node_id, p in self._procs.items()})
        return True

    def ready(self, nodes: list[NodeInfo]) -> bool:
        """Every node's agent answers (in parallel, stoppable) and, on another machine, the node can
        write the checkpoint store. False: see ``boot_generation``."""
        if not boot_generation(self, nodes):
            return False
        if not self.provider.capabilities.shared_host:  # the nodes can write the checkpoint store
            check_from_nodes(self.provider, [n for n in nodes if n.node_id not in self.probed],
                             self.options.checkpoint_url or "", self.run_dir / "logs", stop=lambda: self.stop_requested,
                             envs=dict(self.plan.job.task.envs) if self.plan.job.task else None)
            self.probed.update(n.node_id for n in nodes)
        return True

    @property
    def procs(self) -> dict[str, NodeProcess]:
        """The running generation's workers by node."""
        return self._procs

    def start_joiner(self, rank: int, node: NodeInfo) -> None:
        """``node`` joins the running generation in ``rank`` (an elastic strategy's replacement)."""
        name, config, _, _ = self._generation_file
        config["nodes"][rank] = {**node_row(node), "rank": rank}
        atomic_write_text(self.run_dir / name, json.dumps(config, indent=2))
        if self._start_worker(rank, node, len(config["nodes"]), joining=True):
            self.ledger.event(self.run_id, EventKind.GENERATION_STARTED, generation=self.generation,
                              world_size=len(config["nodes"]), nodes=[node.node_id], joining=True,
                              sync=self.training.sync.strategy.value, pids={node.node_id: self._procs[node.node_id].pid})

    def _start_worker(self, rank: int, node: NodeInfo, world: int, *, joining: bool = False) -> bool:
        """Start rank ``rank``'s worker on ``node`` (``joining``: in the running generation, in place of a
        lost peer). False: the node was gone before its worker started (handled here)."""
        name, config, master_port, across = self._generation_file
        text = json.dumps(config, indent=2)
        t = self.training
        shared = self.provider.capabilities.shared_host  # one host: ranks are its local ranks
        link = self.provider if isinstance(self.provider, NodeLink) else None
        peers = self.peers
        make_env = worker_env if shared else node_env  # another machine gets no paths or secrets of this one
        store = config["store"]
        dht = {}
        if link is not None:  # the node reaches the launcher's store through the launcher's connection
            host, port = link.store_address(node.node_id, self._store.port)
            store = {**store, "host": host, "port": port}
            if self._dht is not None:
                dht = {DHT_PEERS_ENV: json.dumps(self._dht.address(*link.store_address(node.node_id, self._dht.port)))}
        elif self._dht is not None:
            dht = {DHT_PEERS_ENV: json.dumps(self._dht.address())}
        env = make_env({
            "RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank if shared else 0), "LOCAL_WORLD_SIZE": str(world if shared else 1),
            "GROUP_RANK": str(rank), "MASTER_ADDR": peers[0], "MASTER_PORT": str(master_port),
            "GEOTRAIN_RUN_ID": self.run_id, "GEOTRAIN_NODE_ID": node.node_id,
            "GEOTRAIN_GENERATION": str(self.generation), "GEOTRAIN_CHECKPOINT_URL": self.options.checkpoint_url,
            "GEOTRAIN_REGION": node.location.region_scope,
            "GEOTRAIN_NODE_DIR": str(node_dir(self.provider, node.node_id) or ""),
            "GEOTRAIN_SYNC": json.dumps(t.sync.to_mapping()), "GEOTRAIN_WORKLOAD": self.plan.job.workload,
            "GEOTRAIN_GENERATION_FILE": name,  # in the node's directory: geotrain.train.api's session
            "OMP_NUM_THREADS": "1",
            **dht, **({JOINING_ENV: "1"} if joining else {}),
            # across networks a worker binds the node's public address (geotrain.providers.startup)
            **({"GLOO_SOCKET_IFNAME": PUBLIC_INTERFACE, "NCCL_SOCKET_IFNAME": PUBLIC_INTERFACE} if across else {}),
            # this machine: the ledger is the launcher's file; another machine: the ledger through the store
            **({"GEOTRAIN_HOME": str(geotrain_home())} if shared else {RELAY_ENV: RELAY_STORE}),
            **({} if shared else relay_env(store, self.generation)),  # the store, for a script's progress too
        })
        # a notice (SIGUSR1) that arrives while a worker is still starting must not end it: the node
        # starts every command with the signal ignored, the runtime checks the notice file once it listens
        # the node's own Python (a node agent puts the one that has geotrain first on PATH) and the
        # generation's config in the node's directory: nothing names a path of the launcher's machine
        python = sys.executable if shared else "python"
        argv = list(self.options.command) or [python, "-m", "geotrain.train.runtime", name]
        cwd: Path | str | None = None
        if self.options.command:  # a user's script runs in the launcher's directory, or its copy on the node
            cwd = self.workdir if shared else script_workdir(self, node)
        if self.plan.job.task is not None and not self.options.command:  # a task file's setup and run
            argv, cwd = task_argv(), task_command(self, node, rank, env)
        log = self.run_dir / "logs" / f"gen{self.generation:03d}-rank{rank}-{node.node_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._procs[node.node_id] = self.provider.start(node.node_id, argv, env, log, cwd=cwd,
                                                            files={name: text})
        except ProviderError as exc:
            gone = {n.node_id: n for n in self.provider.list(self.run_id) if n.state.ended}
            if node.node_id not in gone:
                raise
            self._kill_workers()
            if gone[node.node_id].state == NodeState.PREEMPTED:  # preempted as its generation started
                self._recover([gone[node.node_id]])
                return False
            boot_failed(self, node.node_id, node.location.zone_scope, node.offer_id,
                        f"the node was gone before its worker started: {exc}")
            if self.options.replan:
                mend(self, survivors_of(self.provider.list(self.run_id)), cause=f"boot failure of {node.node_id}")
            return False
        return True

    def _watch(self) -> tuple[str, object]:
        members = {n.node_id for n in self.members} - self.departed
        last_list, last_meter = 0.0, time.monotonic()
        ended: float | None = None  # an elastic generation: when its first peer ended at the run's end
        while True:
            time.sleep(self.options.poll_s)
            self._refresh_status()
            if self._stop_reason:
                return "stopped", None
            if self._over_spend_limit():
                return "spend_limit", None
            if self._deadline_spent():  # on-demand wanted now: the next generation trains there
                self._kill_workers(grace_s=2.0)
                self._drain()
                return "replanned", None
            codes = {node_id: p.poll() for node_id, p in self._procs.items()}
            if all(code == 0 for code in codes.values()):
                self._drain()
                return "completed", None
            if any(code == 0 for code in codes.values()) and self._elastic_workers():  # the swarm reached the end
                ended = ended or time.monotonic()
                if time.monotonic() - ended > self.options.collective_timeout_s + ELASTIC_END_GRACE_S:
                    self._stop_stragglers(codes)
                    return "completed", None
                continue
            failed = {node_id: code for node_id, code in codes.items() if code not in (None, 0)}
            now = time.monotonic()
            if now - last_meter > METER_EVERY_S:  # the wire's bytes, for status and the spend limit
                last_meter = now
                self._meter()
            if failed or now - last_list > 0.5:
                last_list = now
                lost = self._lost(members)
                # the provider may record a preemption a while after the kill (its peers fail first): a
                # worker failure counts against the restart budget only if no node is lost meanwhile
                settle = now + LOSS_SETTLE_S
                while failed and not lost and time.monotonic() < settle:
                    time.sleep(0.1)
                    lost = self._lost(members)
                if lost and self._elastic_workers() and replace_lost(self, lost):  # the others train on
                    members = {n.node_id for n in self.members} - self.departed
                    continue
                if lost:
                    self._kill_workers(grace_s=2.0)
                    self._drain()
                    return "preempted", lost
                if failed:
                    self._kill_workers(grace_s=2.0)
                    self._drain()
                    return "error", failed

    def _elastic_workers(self) -> bool:
        """Whether this generation's workers train through an elastic strategy's runtime (they say so in
        its store): the built-in runtime or a script through ``geotrain.train.api``, not a
        torchrun-style script under a hivemind plan, whose gang restarts as any other."""
        if self._dht is None or self._store is None:
            return False
        return bool(self._dist.PrefixStore(f"{self._store_secret}/gen{self.generation}/", self._store).check([ELASTIC_KEY]))

    def _stop_stragglers(self, codes: dict[str, int | None]) -> None:
        """An elastic generation's end: peers still short of the run's step count a while after the
        first peer ended there (the others waited for them, then left) are stopped; the run's model is
        the first finished peer's final checkpoint."""
        for node_id, code in codes.items():
            if code != 0:
                self.ledger.event(self.run_id, EventKind.PEER_LEFT, node_id=node_id, generation=self.generation,
                                  reason="still short of the run's step count when the others had ended", code=code)
        self._kill_workers(grace_s=1.0)
        self._drain()

    def _deadline_spent(self) -> bool:
        """Every few seconds, for a plan made for a deadline: whether its slack at the measured rate no
        longer allows spot, in which case ``keep_the_deadline`` has re-planned on on-demand."""
        now = time.time()
        if now - self._deadline_looked < DEADLINE_LOOK_S or not self.status.samples_per_s:
            return False
        self._deadline_looked = now
        return keep_the_deadline(self)

    def _over_spend_limit(self) -> bool:
        """Whether the run would pass ``max_spend_usd`` before the next cost refresh and the termination."""
        limit = self.options.max_spend_usd
        if limit is None:
            return False
        return self.status.usd_so_far + self._spend_rate() * (COST_REFRESH_S + TERMINATE_MARGIN_S) >= limit

    def _spend_rate(self) -> float:
        """$/s: the cost's rise over the last few seconds."""
        if len(self._costs) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self._costs[0], self._costs[-1]
        return max(0.0, (c1 - c0) / (t1 - t0)) if t1 > t0 else 0.0

    def _lost(self, members: set[str]) -> list[NodeInfo]:
        return [n for n in self.provider.list(self.run_id) if n.node_id in members and n.state != NodeState.RUNNING]

    def _kill_workers(self, grace_s: float = 0.0) -> None:
        deadline = time.time() + grace_s
        for p in self._procs.values():
            while p.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            if p.poll() is None:
                try:
                    p.kill()  # a local Popen, or a command of a remote node's agent
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except Exception:  # noqa: BLE001 - a process that will not die is reported by the provider
                    pass
        self._procs = {}

    # -- recovery -------------------------------------------------------------------------------

    def _recover(self, lost: list[NodeInfo]) -> None:
        recover(self, lost)

    # -- what provisioning asks (``provisioning.Launch``) -----------------------------------------

    def prices(self) -> PriceSnapshot:
        from geotrain.pricing.snapshot import SnapshotStore

        return SnapshotStore().load(self.plan.snapshot_id)

    def capacity(self) -> None:
        return None  # the bundled capacity model

    def remaining(self) -> Deadline | None:
        """A plan made for a deadline (``min_cost_by_deadline``): its samples not yet trained and its hours
        not yet spent, from the run's start. The launcher does not follow each checkpoint: it counts a
        whole ``recovery_h`` of the plan's work at risk and ``recovery_h`` for a restart (both at least
        what an interruption costs on average), and a look every ``DEADLINE_LOOK_S``."""
        job = self.plan.job
        if job.objective is not Objective.MIN_COST_BY_DEADLINE or job.total_samples is None or job.deadline_h is None:
            return None
        if self.training.substitutions or self.options.command or job.task is not None \
                or self.provider.capabilities.shared_host:
            return None  # what trains is not what the plan's samples count (a stand-in, a script, this machine)
        last = self.ledger.last_progress(self.run_id)
        done = last.samples if last is not None else 0
        rates = [m.samples_per_s for m in self.mixes() if m.on_demand]
        return Deadline(max(0.0, job.total_samples - done), job.deadline_h - (self.clock.time() - self.started_at) / 3600,
                        max(rates, default=0.0) or None,
                        at_risk_samples=self.plan.recovery_h * 3600 * self.plan.totals.samples_per_s,
                        restart_h=self.plan.recovery_h, look_h=DEADLINE_LOOK_S / 3600)

    def situation(self) -> Situation | None:
        deadline = self.remaining()
        if deadline is None:
            return None
        alive = tuple(sorted(Counter(n.offer_id for n in self.alive_nodes()).items()))
        held = next((m for m in self.mixes() if m.nodes == alive), None)
        return Situation(deadline, self.plan.recovery_h, self.provider.capabilities.notice_s is not None, held,
                         since_checkpoint_h=self.plan.recovery_h / 2)

    def mixes(self) -> list[Mix]:
        """Gangs of the plan's size over the plan snapshot's offers of the planned instance types (the perf
        model's rates); the plan's own mix among them."""
        if self._mixes is None:
            self._mixes = offer_mixes(self.prices().offers(), self.plan, self.watch.available)
        return self._mixes

    def holds(self, need: Need) -> bool:
        """A zone never seen, or seen short of the need but no longer blocked (it may be back): worth a try."""
        now = self.clock.time()
        for key, nodes in need:
            seen = self.watch.available(key)
            zone = key.rsplit("/", 1)[0]
            if seen is not None and seen < nodes and self.blocked.get(zone, 0) > now:
                return False
        return True

    def offer_for(self, offer_id: str) -> Offer:
        if offer_id in self.offers:
            return self.offers[offer_id]
        return next(o for o in self.prices().offers() if o.offer_id == offer_id)

    def block_s(self, scope: str) -> float:
        """Until its own down spells say it is back: the expected rest of the down spell of the zone's
        markets (``--block-min`` before any is seen), at most a day."""
        keys = [k for k in self.watch.keys() if k.startswith(scope + "/")]
        if not keys:
            return self.options.block_s
        return max(self.watch.outlook(need_of({k: 1})).expected_down_h(24.0) for k in keys) * 3600

    def seen(self, offer: Offer, available: int) -> None:
        self.watch.observe(market_key(offer), self.clock.time(), available)

    # -- status ---------------------------------------------------------------------------------

    def _meter(self) -> None:
        wire = getattr(self, "_wire", None)
        if wire is not None:
            wire.record(self.generation)

    def _drain(self) -> None:
        """Copy into the ledger what the workers on other machines sent through the store, and the
        bytes the wire counted (emulated links)."""
        self._meter()
        if not self.provider.capabilities.shared_host and self._store is not None and self.members:
            drain(self._dist.PrefixStore(f"{self._store_secret}/gen{self.generation}/", self._store), self.ledger,
                  range(len(self.members)), self._relayed)

    def _refresh_status(self, force: bool = False) -> None:
        self._drain()
        s = self.status
        s.generation = self.generation
        last = self.ledger.last_progress(self.run_id)
        if last is not None:
            s.step, s.samples, s.loss, s.samples_per_s = last.step, last.samples, last.loss, last.samples_per_s
        s.nodes_by_region = dict(Counter(n.location.region_scope for n in self.members))
        now = time.time()
        if force or now - self._cost_at >= COST_REFRESH_S:
            s.usd_so_far, self._cost_at = run_cost(self.ledger, self.run_id, at=now).total_usd, now
            self._costs.append((now, s.usd_so_far))
            while len(self._costs) > 2 and now - self._costs[1][0] >= SPEND_WINDOW_S:
                self._costs.popleft()
        s.preemptions, s.restarts = self.preemptions, self.restarts
        s.events = [f"{time.strftime('%H:%M:%S', time.localtime(e.at))} {e.kind}"
                    + (f" {e.node_id}" if e.node_id else "") for e in self.ledger.last_events(self.run_id, 6)]
        if self.on_status is not None:
            self.on_status(s)


ELASTIC_END_GRACE_S = 30.0  # past the collective timeout, for a straggler to end after the first peer did


def node_row(n: NodeInfo) -> dict:
    """A node's row in a generation's table (``nodes``; the worker's link classes)."""
    return {"node_id": n.node_id, "region": n.location.region_scope, "region_name": n.location.region,
            "zone": n.location.zone, "cloud": n.location.cloud, "continent": n.location.continent.value}


def peer_addresses(members: list[NodeInfo]) -> list[str]:
    """Where the members reach each other (head first): their private addresses when all are VMs of one
    private network (``Location.network_scope``: an AWS region's VPC, an Azure region's VNet, a GCP
    network across its regions; a public address would leave it and come back in through the firewall,
    as a stranger's), else the addresses they are reached at."""
    networks = {n.location.network_scope for n in members}
    if len(networks) == 1 and all(n.private_address for n in members):
        return [n.private_address for n in members]
    return [n.address for n in members]


def _offer_from_record(record: dict) -> Offer:
    from geotrain.pricing.records import offers_from_records

    return offers_from_records([record], "ledger")[0]
