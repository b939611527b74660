"""The launcher loop: provision the plan, run generations of workers, recover from preemptions.

A *generation* is one set of nodes training together. The loop:

1. makes sure the wanted nodes exist (launching only what is missing, with request ids derived from
   the run, the offer and a counter, so a restarted launcher never launches a node twice);
2. starts one worker per node (``geotrain.train.runtime``, or the user's command) with the ranks in
   location order, the rendezvous in the launcher's own TCP store (a stable host: it does not die with
   a preempted node), and a new store prefix per generation;
3. watches the workers and the provider: all workers done → the run is complete; a node preempted
   or lost → its zone is blocked for a while, the plan is solved again with the surviving nodes kept
   and the blocked zones left out, only the difference is launched, and the next generation resumes
   from the newest committed checkpoint; a worker failing while every node is up → an error restart
   (at most ``max_restarts``; preemptions never use this budget).

Ctrl-C (SIGINT) or ``geotrain stop`` (SIGTERM) terminates every node of the run. Killing the launcher
itself leaves the nodes running (as VMs would); ``geotrain launch --resume RUN_ID`` adopts them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from geotrain.domain import Offer, Plan
from geotrain.errors import GeotrainError, RunError
from geotrain.files import atomic_write_text, geotrain_home
from geotrain.launcher.ledger import Ledger
from geotrain.launcher.injector import Injector
from geotrain.launcher.options import LaunchOptions, RunOutcome, Status
from geotrain.providers.base import LaunchRequest, NodeInfo, NodeProcess, NodeState, Provider
from geotrain.pricing.records import offer_record
from geotrain.procs import environ_has

PEER_LOST = 75


class Launcher:
    """Runs one plan on one provider. Use :meth:`start` (new run) or :meth:`adopt` (resume), then :meth:`run`."""

    def __init__(self, plan: Plan, provider: Provider, *, options: LaunchOptions, ledger: Ledger | None = None,
                 on_status: Callable[[Status], None] | None = None) -> None:
        self.plan = plan
        self.provider = provider
        self.options = options
        self.ledger = ledger or Ledger()
        self.on_status = on_status
        self.run_id = ""
        self.offers: dict[str, Offer] = {item.offer.offer_id: item.offer for item in plan.items}
        self.wanted: Counter[str] = Counter({item.offer.offer_id: item.count for item in plan.items})
        self.blocked: dict[str, float] = {}  # zone scope -> blocked until (unix time)
        self.generation = 0
        self.preemptions = 0
        self.restarts = 0
        self.started_at = time.time()
        self.training_started_at: float | None = None
        self._stop_reason: str | None = None
        self._procs: dict[str, NodeProcess] = {}
        self.members: list[NodeInfo] = []
        self._store = None
        self.workdir = Path.cwd()  # a user's command runs where the launcher was started
        self.status = Status("")

    # -- run lifecycle ------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        return geotrain_home() / "runs" / self.run_id

    def start(self, run_id: str | None = None) -> str:
        """Register a new run in the ledger."""
        from geotrain.planning.planfile import plan_to_dict

        self.run_id = run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
        url = self.options.checkpoint_url or str(self.run_dir / "checkpoints")
        self.options = replace(self.options, checkpoint_url=url)
        self.ledger.create_run(
            run_id=self.run_id, plan_id=self.plan.plan_id, plan_json=json.dumps(plan_to_dict(self.plan)),
            workload=self.options.workload if not self.options.command else " ".join(self.options.command),
            provider=self.provider.name, checkpoint_url=url, launcher_pid=os.getpid(),
            target_steps=self.options.steps, options=self.options.to_dict(),
        )
        self.status = Status(self.run_id, target_steps=self.options.steps)
        self.ledger.event(self.run_id, "run_started", plan_id=self.plan.plan_id, nodes=self.plan.nodes,
                          preemptions=self.options.preemptions.to_dict())
        return self.run_id

    def adopt(self, run_id: str) -> None:
        """Take over a run whose launcher died: its live nodes are kept, its stale workers killed."""
        self.run_id = run_id
        self.status = Status(run_id, target_steps=self.options.steps)
        self.ledger.set_launcher(run_id, os.getpid())
        for event in self.ledger.events(run_id, kinds=("replanned",)):
            self.wanted = Counter(event.detail["wanted"])
            for record in event.detail.get("offers", []):
                offer = _offer_from_record(record)
                self.offers[offer.offer_id] = offer
        for event in self.ledger.events(run_id, kinds=("blocked",)):
            self.blocked[event.detail["scope"]] = event.detail["until"]
        generations = self.ledger.events(run_id, kinds=("generation_started",))
        self.generation = max((e.detail["generation"] for e in generations), default=0)
        self.preemptions = len(self.ledger.events(run_id, kinds=("preempted",)))
        self.restarts = len(self.ledger.events(run_id, kinds=("worker_failed",)))
        if generations:
            _kill_stale_workers(generations[-1].detail.get("pids", {}), run_id)
        adopted = [n.node_id for n in self.alive_nodes()]
        self.ledger.event(run_id, "resumed", adopted=adopted, launcher_pid=os.getpid())

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
        self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        injector = Injector(self)
        injector.start()
        try:
            return self._loop()
        except BaseException as exc:
            self._terminate_all("failed")
            reason = str(exc) if isinstance(exc, GeotrainError) else f"{type(exc).__name__}: {exc}"
            self.ledger.finish_run(self.run_id, "failed", reason)
            raise
        finally:
            injector.stop()
            if threading.current_thread() is threading.main_thread():
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            self._store = None

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> RunOutcome:
        while True:
            if self._stop_reason:
                return self._finish_stopped()
            members = self._ensure_nodes()
            if not members:
                raise RunError("no node is left and none could be launched; see `geotrain status "
                               f"{self.run_id}` and raise the block time or widen the plan")
            self.generation += 1
            self._start_generation(members)
            outcome, detail = self._watch()
            if outcome == "completed":
                return self._finish("completed", f"trained {self.status.step} steps")
            if outcome == "stopped":
                return self._finish_stopped()
            if outcome == "budget":
                self._terminate_all("stopped")
                raise RunError(f"the run's budget of ${self.options.budget_usd:,.2f} is spent "
                               f"(${self.status.usd_so_far:,.2f}); raise --max-spend-usd to go on")
            if outcome == "preempted":
                self._recover(detail)
            else:  # a worker failed with every node up
                self.restarts += 1
                self.ledger.event(self.run_id, "worker_failed", generation=self.generation, codes=detail,
                                  restarts=self.restarts)
                if self.restarts > self.options.max_restarts:
                    self._terminate_all("failed")
                    logs = self.run_dir / "logs"
                    raise RunError(f"workers failed {self.restarts} times with every node up (exit codes "
                                   f"{detail}); the restart budget is {self.options.max_restarts}; see {logs}")

    def _finish(self, status: str, reason: str) -> RunOutcome:
        self._terminate_all(status)
        self.ledger.finish_run(self.run_id, status, reason)
        self.ledger.event(self.run_id, status, reason=reason)
        self._refresh_status()
        return RunOutcome(self.run_id, status, reason, self.status.step, self.generation, self.preemptions,
                          self.restarts, self.status.usd_so_far, time.time() - self.started_at,
                          self.options.checkpoint_url or "")

    def _finish_stopped(self) -> RunOutcome:
        self._kill_workers()
        return self._finish("stopped", self._stop_reason or "stopped")

    # -- nodes ----------------------------------------------------------------------------------

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.provider.list(self.run_id) if n.state == NodeState.RUNNING]

    def _ensure_nodes(self) -> list[NodeInfo]:
        alive = self.alive_nodes()
        have = Counter(n.offer_id for n in alive)
        launched_before = Counter(row.offer_id for row in self.ledger.nodes(self.run_id))
        for offer_id, count in sorted(self.wanted.items()):
            for k in range(max(0, count - have[offer_id])):
                offer = self.offers[offer_id]
                request = LaunchRequest(f"{self.run_id}/{offer_id}/{launched_before[offer_id] + k}", self.run_id, offer)
                node = self.provider.launch(request)
                self.ledger.add_node(
                    run_id=self.run_id, node_id=node.node_id, request_id=node.request_id, offer_id=offer_id,
                    offer_json=json.dumps(offer_record(offer)), cloud=offer.location.cloud,
                    region=offer.location.region, zone=offer.location.zone, market=offer.market.value,
                    price_usd_per_hour=offer.price_usd_per_hour, launched_at=node.launched_at.timestamp(),
                )
                self.ledger.add_price(offer_id, offer.price_usd_per_hour, f"launch {self.run_id}")
                self.ledger.event(self.run_id, "launched", node_id=node.node_id, offer_id=offer_id)
        return sorted(self.alive_nodes(), key=lambda n: (n.location.region_scope, n.location.zone, n.node_id))

    def _terminate_all(self, reason: str) -> None:
        self._kill_workers()
        for node in self.provider.list(self.run_id):
            if node.state in (NodeState.RUNNING, NodeState.PENDING):
                self.provider.terminate(node.node_id, reason=reason)
            self.ledger.end_node(node.node_id, node.end_reason or reason,
                                 at=node.ended_at.timestamp() if node.ended_at else None)

    # -- generations ----------------------------------------------------------------------------

    def _start_generation(self, members: list[NodeInfo]) -> None:
        self.members = members
        world = len(members)
        sync = self.options.sync_for(self.plan)
        micro = max(self.options.micro_batches, world)
        table = [{
            "node_id": n.node_id, "rank": r, "region": n.location.region_scope, "region_name": n.location.region,
            "zone": n.location.zone, "cloud": n.location.cloud, "continent": n.location.continent.value,
        } for r, n in enumerate(members)]
        config = {
            "run_id": self.run_id, "generation": self.generation, "workload": self.options.workload,
            "sync": sync, "deterministic": self.options.deterministic, "micro_batches": micro,
            "lr": self.options.lr, "momentum": self.options.momentum, "seed": self.options.seed,
            "target_steps": self.options.steps, "checkpoint_url": self.options.checkpoint_url,
            "checkpoint_every": self.options.checkpoint_every, "local_steps": self.options.local_steps,
            "progress_every": self.options.progress_every, "collective_timeout_s": self.options.collective_timeout_s,
            "store": {"host": "127.0.0.1", "port": self._store.port}, "nodes": table,
            "backend": self._backend(members),
        }
        path = self.run_dir / f"generation-{self.generation}.json"
        atomic_write_text(path, json.dumps(config, indent=2))
        master_port = _free_port()
        shared = self.provider.capabilities.shared_host  # one host: ranks are its local ranks
        self._procs = {}
        for rank, node in enumerate(members):
            env = _child_env({
                "RANK": str(rank), "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank if shared else 0), "LOCAL_WORLD_SIZE": str(world if shared else 1),
                "GROUP_RANK": str(rank), "MASTER_ADDR": members[0].address, "MASTER_PORT": str(master_port),
                "GEOTRAIN_RUN_ID": self.run_id, "GEOTRAIN_NODE_ID": node.node_id,
                "GEOTRAIN_GENERATION": str(self.generation), "GEOTRAIN_CHECKPOINT_URL": self.options.checkpoint_url,
                "GEOTRAIN_HOME": str(geotrain_home()), "GEOTRAIN_REGION": node.location.region_scope,
                "GEOTRAIN_NODE_DIR": str(_node_dir(self.provider, node.node_id) or ""),
                "OMP_NUM_THREADS": "1",
            })
            # both through the shim: a notice (SIGUSR1) that arrives while a worker is still starting
            # must not end it; the runtime checks the notice file once it listens
            command = list(self.options.command) or [sys.executable, "-m", "geotrain.train.runtime", str(path)]
            argv = [sys.executable, "-m", "geotrain.train.usercmd", *command]
            log = self.run_dir / "logs" / f"gen{self.generation:03d}-rank{rank}-{node.node_id}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            self._procs[node.node_id] = self.provider.start(node.node_id, argv, env, log, cwd=self.workdir)
        if self.training_started_at is None:
            self.training_started_at = time.time()
        self.ledger.event(self.run_id, "generation_started", generation=self.generation, world_size=world,
                          nodes=[n.node_id for n in members], sync=sync,
                          pids={node_id: p.pid for node_id, p in self._procs.items()})

    def _backend(self, members: list[NodeInfo]) -> str:
        """nccl when every rank gets a GPU of its own, else gloo (see ``pick_backend``)."""
        from geotrain.train.runtime import pick_backend

        if self.options.command:
            return "gloo"  # a user's script picks its own
        if not self.provider.capabilities.shared_host:
            return "gloo"  # a provider of separate hosts does not report their CUDA devices yet
        import torch

        return pick_backend(len(members), [torch.cuda.device_count() if torch.cuda.is_available() else 0])

    def _watch(self) -> tuple[str, object]:
        members = {n.node_id for n in self.members}
        last_list = 0.0
        while True:
            time.sleep(self.options.poll_s)
            self._refresh_status()
            if self._stop_reason:
                return "stopped", None
            if self.options.budget_usd is not None and self.status.usd_so_far > self.options.budget_usd:
                return "budget", None
            codes = {node_id: p.poll() for node_id, p in self._procs.items()}
            if all(code == 0 for code in codes.values()):
                return "completed", None
            failed = {node_id: code for node_id, code in codes.items() if code not in (None, 0)}
            now = time.monotonic()
            if failed or now - last_list > 0.5:
                last_list = now
                lost = self._lost(members)
                if failed and not lost:  # the provider may record a preemption a moment after the kill
                    time.sleep(0.3)
                    lost = self._lost(members)
                if lost:
                    self._kill_workers(grace_s=2.0)
                    return "preempted", lost
                if failed:
                    self._kill_workers(grace_s=2.0)
                    return "error", failed

    def _lost(self, members: set[str]) -> list[NodeInfo]:
        return [n for n in self.provider.list(self.run_id) if n.node_id in members and n.state != NodeState.RUNNING]

    def _kill_workers(self, grace_s: float = 0.0) -> None:
        deadline = time.time() + grace_s
        for p in self._procs.values():
            while p.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except Exception:  # noqa: BLE001 - a process that will not die is reported by the provider
                    pass
        self._procs = {}

    # -- recovery -------------------------------------------------------------------------------

    def _recover(self, lost: list[NodeInfo]) -> None:
        now = time.time()
        for node in lost:
            self.preemptions += 1
            reason = node.end_reason or "preempted"
            self.ledger.end_node(node.node_id, reason, at=node.ended_at.timestamp() if node.ended_at else None)
            self.ledger.event(self.run_id, "preempted", node_id=node.node_id, zone=node.location.zone_scope,
                              reason=reason, generation=self.generation)
            scope = node.location.zone_scope
            self.blocked[scope] = now + self.options.block_s
            self.ledger.event(self.run_id, "blocked", scope=scope, until=self.blocked[scope])
        survivors = Counter(n.offer_id for n in self.alive_nodes())
        if self.options.replan:
            self._replan(survivors)
        else:
            self.wanted = Counter({k: v for k, v in self.wanted.items()})

    def _replan(self, survivors: Counter) -> None:
        """Buy back what the plan promised: the cheapest mix that reaches the plan's throughput with
        the survivors kept and the blocked zones left out (within the plan's node count); failing
        that, the most throughput for the plan's $/h (+25 %); failing that, the survivors alone."""
        from geotrain.domain import Objective
        from geotrain.planning.planner import PlanOptions, make_plan
        from geotrain.pricing.inventory import load_inventory
        from geotrain.pricing.snapshot import SnapshotStore

        started = time.time()
        blocked = frozenset(scope for scope, until in self.blocked.items() if until > started)
        job = self.plan.job
        nodes = max(self.plan.nodes, sum(survivors.values()))
        constraints = replace(job.constraints, max_nodes=min(job.constraints.max_nodes or nodes, nodes))
        attempts = [
            replace(job, objective=Objective.MIN_COST, constraints=constraints,
                    target_samples_per_s=self.plan.totals.samples_per_s * 0.999),
            replace(job, objective=Objective.MAX_THROUGHPUT, constraints=constraints,
                    budget_usd_per_hour=self.plan.totals.usd_per_hour * 1.25),
        ]
        options = PlanOptions(keep=dict(survivors), blocked=blocked, frontier_points=0, time_limit_s=10,
                              target_batch_size=self.plan.target_batch_size, local_steps=self.plan.local_steps,
                              accumulation_steps=self.plan.accumulation_steps, precision=self.plan.precision,
                              recovery_h=self.plan.recovery_h)
        reasons = []
        try:
            snapshot = SnapshotStore().load(self.plan.snapshot_id)
            inventory = load_inventory(job.onprem_inventory) if job.onprem_inventory else None
        except GeotrainError as exc:
            reasons.append(str(exc))
            attempts = []
        for attempt in attempts:
            try:
                new = make_plan(attempt, snapshot, inventory=inventory, options=options)
            except GeotrainError as exc:
                reasons.append(str(exc))
                continue
            for item in new.items:
                self.offers[item.offer.offer_id] = item.offer
            self.wanted = Counter({item.offer.offer_id: item.count for item in new.items})
            self.ledger.event(self.run_id, "replanned", wanted=dict(self.wanted), kept=dict(survivors),
                              objective=attempt.objective.value, blocked=sorted(blocked),
                              usd_per_hour=new.totals.usd_per_hour, samples_per_s=new.totals.samples_per_s,
                              seconds=round(time.time() - started, 3),
                              offers=[offer_record(i.offer) for i in new.items])
            return
        self.wanted = Counter(dict(survivors))
        self.ledger.event(self.run_id, "replan_failed", reasons=reasons, kept=dict(survivors))

    # -- status ---------------------------------------------------------------------------------

    def _refresh_status(self) -> None:
        s = self.status
        s.generation = self.generation
        last = self.ledger.last_progress(self.run_id)
        if last is not None:
            _, _, s.step, s.samples, s.loss, s.samples_per_s, _ = last
        alive = self.members
        s.nodes_by_region = dict(Counter(n.location.region_scope for n in alive))
        s.usd_so_far = run_cost_so_far(self.ledger, self.run_id)
        s.preemptions, s.restarts = self.preemptions, self.restarts
        s.events = [f"{time.strftime('%H:%M:%S', time.localtime(e.at))} {e.kind}"
                    + (f" {e.node_id}" if e.node_id else "") for e in self.ledger.events(self.run_id)[-6:]]
        if self.on_status is not None:
            self.on_status(s)


def run_cost_so_far(ledger: Ledger, run_id: str) -> float:
    """Node-hours × launch price of every node of the run, up to now for nodes still up."""
    now = time.time()
    return sum(((row.ended_at or now) - row.launched_at) / 3600 * row.price_usd_per_hour
               for row in ledger.nodes(run_id))


def _node_dir(provider: Provider, node_id: str) -> Path | None:
    getter = getattr(provider, "node_dir", None)
    return getter(node_id) if getter else None


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))}
    env.update(extra)
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _offer_from_record(record: dict) -> Offer:
    from geotrain.pricing.records import offers_from_records

    return offers_from_records([record], "ledger")[0]


def _kill_stale_workers(pids: dict[str, int], run_id: str) -> None:
    """Kill workers of the previous launcher's last generation that still run (checked by run id)."""
    for pid in pids.values():
        if environ_has(pid, "GEOTRAIN_RUN_ID", run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
