"""``geotrain rehearse``: run a plan's topology on this machine over emulated links and put what was
measured next to what the perf model predicts for the same topology.

A rehearsal keeps the plan's locations (one node each, at most ``MAX_NODES``, every region kept), its
sync strategy and knobs, and trains the built-in ``tiny-lm`` with the real runtime
(``geotrain.train.runtime``), one worker per network namespace, the links between them the perf
model's RTT and single-stream bandwidth for their locations (``geotrain.wan``; bandwidth capped at
what the delay line forwards). Two phases:

1. **compute**: every node trains alone, all at once, which gives each node's samples/s on this
   machine. Each node's processes are held to an equal share of the cores (``geotrain.wan.cpu``,
   where the machine lets control groups be made; ``cores_per_node`` says which), so that a node
   computes as fast alone as with the others, whether they compute or wait on the network, as
   separate machines do;
2. **the strategy**: the nodes train together; rounds, their seconds, samples/s, the wire's bytes per
   link and the loss come from the run's own ledger and the kernel's counters.

The prediction is the perf model (:mod:`geotrain.perf.strategies`) for the same nodes at the measured
compute rates, the emulated links and the workload's payload. For hivemind it uses the planner's fit
of the Hivemind library (fitted on Erben et al.'s tables), which the runtime now is: on tiny-lm at a
target batch of 256, two regions at 100 ms / 200 Mbit/s, a round took 2.73 s against its 2.58 s in
one run and 21.3 s in the next (a missed matchmaking waits for the averaging timeout).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from geotrain.domain import Location, Plan, SyncSettings, SyncStrategyName, link_class
from geotrain.errors import InputError
from geotrain.ledger import EventKind, Ledger

if TYPE_CHECKING:
    from geotrain.wan.cpu import CpuShares

MAX_NODES = 4  # worker processes a 2-core machine holds while the delay line forwards
WORKLOAD = "tiny-lm"
MICRO_PER_NODE = 2
SOLO_STEPS = 96  # the least steps a node trains alone for its rate (a few seconds of tiny-lm)
REHEARSAL_STEPS = 24  # each strategy's run (its first progress window, the start-up, is left out)
RUNTIME_FIT_NAME = "geotrain runtime (no overhead beyond the transfer)"


@dataclass(frozen=True, slots=True)
class LinkFigure:
    src: int
    dst: int
    link_class: str
    rtt_ms: float
    rate_mbit: float
    bytes_per_s: float  # measured on the wire (tc counters), over the time rank 0 spent in rounds
    predicted_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class Rehearsal:
    strategy: str
    nodes: tuple[Location, ...]
    compute_samples_per_s: tuple[float, ...]  # each node training alone, measured (wall: the whole step)
    samples_per_s: float  # from the first progress report to the last before the end
    predicted_samples_per_s: float
    round_s: float  # rank 0's mean round between its first and last progress windows (asgd-ga: the slowest region's)
    predicted_round_s: float
    rounds: int
    loss: float | None
    links: tuple[LinkFigure, ...]
    wall_s: float
    protocol_s: float = 0.0  # what the runtime's measured protocol terms add to the predicted round
    rtt_s: float = 0.0  # the longest RTT between two places in use
    # each node's compute while the nodes trained together (its clock's compute seconds; alone, the
    # same clock's figure scaled to the node's wall rate above), where its clock times all of it (not
    # allreduce with peers: DDP's backward overlaps its all-reduce; not hivemind, whose rounds train
    # what the peers reached), and the model's samples/s at those rates: on a machine whose cores the
    # nodes, their transport's threads and the delay line share, the compute slows down together with
    # them, which the nodes alone do not show
    in_run_samples_per_s: tuple[float, ...] | None = None
    predicted_in_run_samples_per_s: float | None = None
    cores_per_node: float | None = None  # each node's CPU share (geotrain.wan.cpu); None: unshared

    @property
    def error(self) -> float:
        """Measured round time over predicted, minus one."""
        return self.round_s / self.predicted_round_s - 1 if self.predicted_round_s > 0 else float("nan")


def scaled_nodes(plan: Plan, limit: int = MAX_NODES) -> list[Location]:
    """The plan's node locations, one per node, at most ``limit``: every region keeps one, the rest
    go round-robin over the regions in the plan's order."""
    by_region: dict[str, list[Location]] = {}
    for item in plan.items:
        by_region.setdefault(item.offer.location.region_scope, []).extend([item.offer.location] * item.count)
    if len(by_region) > limit:
        raise InputError(f"the plan spans {len(by_region)} regions; a rehearsal on this machine holds at most "
                         f"{limit} nodes, one per region at least")
    out: list[Location] = []
    queues = [list(v) for v in by_region.values()]
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop(0))
    return out


def _config(run_id: str, locations: Sequence[Location], sync: SyncSettings, steps: int, store: dict,
            checkpoints: Path, rates: Sequence[float] | None = None) -> dict:
    """A generation file; ``rates``: each node's measured compute (asgd-ga's home region is the one
    with the most, as in the model)."""
    
    world = len(locations)
    nodes = [{"node_id": f"r{r}", "rank": r, "region": loc.region_scope, "region_name": loc.region, "zone": loc.zone,
              "cloud": loc.cloud, "continent": loc.continent.value, **({"samples_per_s": rates[r]} if rates else {})}
             for r, loc in enumerate(locations)]
    return {"run_id": run_id, "generation": 1, "workload": WORKLOAD, "sync": sync.to_mapping(),
            "deterministic": False, "micro_batches": MICRO_PER_NODE * world, "lr": 0.5, "momentum": 0.9, "seed": 0,
            "target_steps": steps, "checkpoint_url": str(checkpoints), "checkpoint_every": 10**9,
            # asgd-ga's regions keep their own pace: its slowest may train a tenth of the steps, and
            # needs windows of a few steps for a steady round between its first (start-up) and its last
            "progress_every": max(1, steps // (20 if sync.strategy is SyncStrategyName.ASGD_GA else 5)),
            "collective_timeout_s": 120, "store": store, "nodes": nodes,
            "backend": "gloo"}


def _run_workers(network, names: Sequence[str], configs: Sequence[Path], worlds: Sequence[tuple[int, int]],
                 home: Path, timeout_s: float, shares: CpuShares | None = None) -> float:  # noqa: ANN001
    """Start one runtime worker per name in its namespace (and its CPU share, where there are shares);
    wait for all; the wall seconds."""
    procs = []
    started = time.perf_counter()
    try:
        for name, config, (rank, world) in zip(names, configs, worlds, strict=True):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
                   "GEOTRAIN_NODE_ID": name, "GEOTRAIN_HOME": str(home), "OMP_NUM_THREADS": "1",
                   **network.env(name)}
            log = open(home / f"{config.stem}-{name}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append((subprocess.Popen([*network.prefix(name), sys.executable, "-m", "geotrain.train.runtime",
                                            str(config)], env=env, stdout=log, stderr=subprocess.STDOUT), log))
            if shares is not None:  # `ip netns exec` execs in place: the pid is the worker's
                shares.add(name, procs[-1][0].pid)
        deadline = time.monotonic() + timeout_s
        for (proc, log), name in zip(procs, names, strict=True):
            left = deadline - time.monotonic()
            try:
                code = proc.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                raise InputError(f"the rehearsal did not finish within {timeout_s:.0f} s; give fewer --steps or "
                                 f"more --minutes; the end of {name}'s log:\n{_tail(Path(log.name))}") from None
            if code != 0:  # the folder goes with the rehearsal: the log's end goes into the message
                raise InputError(f"a rehearsal worker ({name}) exited {code}; the end of its log:\n"
                                 f"{_tail(Path(log.name))}")
        return time.perf_counter() - started
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


def _tail(path: Path, lines: int = 12) -> str:
    """The last lines of a worker's log (what a failed rehearsal shows, since its folder is removed)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _rates(ledger: Ledger, run_id: str, samples_per_step: int) -> dict[str, float]:
    """Each node's training rate alone: the samples of its steps after its first progress report over
    the wall time to its last (the whole step: compute, data and the step's bookkeeping, as a benchmark
    of the node would count it); where it reported once, its steps over its clock's compute seconds."""
    by_node: dict[str, list] = {}
    for e in ledger.events(run_id, kinds=(EventKind.SYNC_ROUNDS,)):
        by_node.setdefault(e.node_id, []).append(e)
    out = {}
    for node, events in by_node.items():
        events.sort(key=lambda e: e.at)
        wall = events[-1].at - events[0].at
        if len(events) >= 2 and wall > 0:
            out[node] = sum(e.detail["steps"] for e in events[1:]) * samples_per_step / wall
        else:
            compute = sum(e.detail["compute_s"] for e in events)
            if compute > 0:
                out[node] = sum(e.detail["steps"] for e in events) * samples_per_step / compute
    return out


def _compute_rates(ledger: Ledger, run_id: str, samples_per_step: int) -> dict[str, float]:
    """Each node's compute rate: its steps' samples over the compute seconds its clock counted, after its
    first progress window (the start-up: the first steps build what later steps reuse) where it has more."""
    by_node: dict[str, list] = {}
    for e in ledger.events(run_id, kinds=(EventKind.SYNC_ROUNDS,)):
        by_node.setdefault(e.node_id, []).append(e)
    out = {}
    for node, events in by_node.items():
        events.sort(key=lambda e: e.at)
        steady = events[1:] if len(events) >= 2 else events
        compute = sum(e.detail["compute_s"] for e in steady)
        if compute > 0:
            out[node] = sum(e.detail["steps"] for e in steady) * samples_per_step / compute
    return out


def _mean_round(windows: Sequence, startup_rounds: int = 1) -> float:
    """The mean round of a rank's ``SYNC_ROUNDS`` windows (one per progress report) in the steady
    state: the windows up to the one that holds its ``startup_rounds``-th round (the start-up: the
    nodes' first rounds wait for the last node to start, a new connection's TCP window still opens; a
    rank whose first round ends after its first report has an empty window first; ma's first average
    is waited for one round later, so its start-up is two rounds) and the last (the run's final
    synchronisation) left out, as far as what is left has rounds."""
    cut, seen = len(windows), 0
    for i, e in enumerate(windows):
        seen += e.detail["rounds"]
        if seen >= startup_rounds:
            cut = i + 1
            break
    for steady in (windows[cut:-1], windows[cut:], windows[1:], windows):
        if sum(e.detail["rounds"] for e in steady) > 0:
            break
    count = sum(e.detail["rounds"] for e in steady)
    return sum(e.detail["round_s"] for e in steady) / count if count else float("nan")


def rehearse_topology(locations: Sequence[Location], link: Callable[[Location, Location], object], sync: SyncSettings,
                      *, steps: int = 40, timeout_s: float = 600.0) -> Rehearsal:
    """Measure ``sync`` on ``locations`` over emulated links (``link(a, b)`` → ``geotrain.wan.Link``)
    and predict the same with the perf model. Needs the privileges of ``geotrain.wan.privileges``."""
    import torch.distributed as dist

    from geotrain.launcher.workers import open_store
    from geotrain.providers.netns import EmulatedNetwork
    from geotrain.wan import privileges
    from geotrain.wan.cpu import CpuShares, cores_per_node, cpu_shares

    reason = privileges()
    if reason is not None:
        raise InputError(f"a rehearsal needs emulated links, which this machine cannot make: {reason}")
    from geotrain.train.workloads import WORKLOADS

    m = WORKLOADS[WORKLOAD].samples_per_step
    world = len(locations)
    names = [f"r{r}" for r in range(world)]
    with tempfile.TemporaryDirectory(prefix="geotrain-rehearsal-") as tmp:
        home = Path(tmp)
        network = EmulatedNetwork(link, locations[0])
        shares = None
        try:
            for name, loc in zip(names, locations, strict=True):
                network.attach(name, loc)
            # each node held to its share of the cores, alone as together: a node's compute rate is
            # then its own, as on separate machines, not what the others leave it
            made = cpu_shares(network.tag, names, cores_per_node(world))
            shares = made if isinstance(made, CpuShares) else None
            store = open_store(dist, True, network)
            secret = secrets.token_hex(8)
            where = {"host": network.coordinator().address, "port": store.port}
            # 1. compute: every node alone, all at once (each in its CPU share)
            # at least SOLO_STEPS steps, in windows of several steps (a window per step, each with its
            # ledger writes, made the nodes slower alone than together; 8-24 steps, a fraction of a
            # second, varied by ±15 % from one rehearsal to the next)
            solo_steps = max(steps, SOLO_STEPS)
            solo = []
            for r, name in enumerate(names):
                config = _config(f"solo-{secret}", [locations[r]], replace(sync, strategy=SyncStrategyName.ALLREDUCE),
                                 solo_steps, {**where, "prefix": f"{secret}/solo{r}"}, home / f"ck-solo{r}")
                config["micro_batches"] = MICRO_PER_NODE
                path = home / f"solo{r}.json"
                path.write_text(json.dumps(config))
                solo.append(path)
            _run_workers(network, names, solo, [(0, 1)] * world, home, timeout_s, shares)
            ledger = Ledger(home / "ledger.sqlite")
            rates = _rates(ledger, f"solo-{secret}", MICRO_PER_NODE * m)
            solo_compute = _compute_rates(ledger, f"solo-{secret}", MICRO_PER_NODE * m)
            # 2. the strategy
            run_id = f"rehearsal-{secret}"
            config = _config(run_id, locations, sync, steps, {**where, "prefix": f"{secret}/run"}, home / "ck",
                             [rates.get(n, 0.0) for n in names])
            path = home / "run.json"
            path.write_text(json.dumps(config))
            before = network.wire_bytes()
            wall = _run_workers(network, names, [path] * world, [(r, world) for r in range(world)], home, timeout_s,
                                shares)
            sent = {k: v - before.get(k, 0) for k, v in network.wire_bytes().items()}
        finally:
            network.close()
            if shares is not None:
                shares.close()
        return _figures(ledger, run_id, locations, link, sync, [rates.get(n, 0.0) for n in names], sent, wall,
                        [solo_compute.get(n, 0.0) for n in names], shares.cores if shares is not None else None)


def _figures(ledger: Ledger, run_id: str, locations: Sequence[Location], link, sync: SyncSettings,  # noqa: ANN001
             rates: list[float], sent: dict[tuple[str, str], int], wall: float,
             solo_compute: list[float] | None = None, cores_per_node: float | None = None) -> Rehearsal:
    import torch

    from geotrain.perf.model import bundled_fit, make_strategy
    from geotrain.perf.protocol import runtime_protocol
    from geotrain.perf.network import LinkEstimate
    from geotrain.perf.strategies import PeerGroup, Topology
    from geotrain.perf.workloads import WorkloadRegistry
    from geotrain.train.sync import parameter_bytes, wire_dtype
    from geotrain.train.workloads import WORKLOADS

    workload = WORKLOADS[WORKLOAD]
    m = workload.samples_per_step
    world = len(locations)
    rows = ledger.progress_rows(run_id)
    # samples/s while training: from the first progress report to the last before the run's end (the
    # start-up and the final synchronisation left out: asgd-ga's home waits there for the other
    # regions' last pushes; the model predicts the steady state); ma's start-up is two rounds (its
    # first average is waited for one round later): from the first report after them; and
    # regions that start late (asgd-ga's link-bound ones began 0.3-0.6 s after its home on three
    # continents) are not training yet: from the first report after every rank's first window
    end = rows[-2] if len(rows) >= 3 else rows[-1] if rows else None
    startup_steps = 2 * sync.averaging_pushes if sync.strategy is SyncStrategyName.MA else 0
    windows = ledger.events(run_id, kinds=(EventKind.SYNC_ROUNDS,))
    started = max((min(e.at for e in windows if e.node_id == n) for n in {e.node_id for e in windows}),
                  default=float("-inf"))
    start = next((r for r in rows if r.step >= startup_steps and r.at >= started and end is not None
                  and r.at < end.at), rows[0] if rows else None)
    if end is not None and end.at > start.at:
        measured = (end.samples - start.samples) / (end.at - start.at)
    else:
        measured = rows[-1].samples / wall if rows else 0.0
    # the round: rank 0's mean; asgd-ga's regions keep their own pace, and the model's round is its
    # slowest region's cycle: that region's
    by_rank: dict[int, list] = {}
    for e in ledger.events(run_id, kinds=(EventKind.SYNC_ROUNDS,)):
        by_rank.setdefault(e.detail.get("rank", 0), []).append(e)
    rounds = by_rank.get(0, [])
    timed = rounds
    if sync.strategy is SyncStrategyName.ASGD_GA:
        timed = max(by_rank.values(), default=[], key=lambda es: _mean_round(es))
    count = sum(e.detail["rounds"] for e in timed)
    round_s = _mean_round(timed, 2 if sync.strategy is SyncStrategyName.MA else 1)

    def estimate(a: Location, b: Location) -> LinkEstimate:
        figure = link(a, b)
        # htb shapes the pair's traffic as a whole: one stream or many carry the rate together
        return LinkEstimate(bandwidth_gbps=figure.rate_mbit / 1000, rtt_ms=figure.rtt_ms, link_class=link_class(a, b),
                            bandwidth_measured=False, rtt_measured=False, source="emulated",
                            aggregate_gbps=figure.rate_mbit / 1000)

    torch.manual_seed(0)
    model = workload.build_model()
    payload = parameter_bytes(model, wire_dtype(sync.precision))
    parameters = sum(p.numel() for p in model.parameters())
    per_rank = [len(range(r, MICRO_PER_NODE * world, world)) * m for r in range(world)]
    strategy = make_strategy(sync, bundled_fit())  # hivemind: the runtime is the Hivemind library the fit describes
    trained = replace(WorkloadRegistry.bundled().get(WORKLOAD), parameters=parameters)
    protocol = runtime_protocol("gloo")  # the transport's measured terms

    def topology(at: Sequence[float]) -> Topology:
        return Topology([PeerGroup(loc, 1, max(rate, 1e-9), per_rank[r])
                         for r, (loc, rate) in enumerate(zip(locations, at, strict=True))], estimate, lambda site: None)

    topo = topology(rates)
    before = strategy.cost(topo, payload, trained).time_per_round_s
    cost = protocol.cost(strategy, topo, payload, trained)
    in_run = None
    if sync.strategy not in (SyncStrategyName.ALLREDUCE, SyncStrategyName.HIVEMIND):
        timed = {r: (sum(e.detail["steps"] for e in es), sum(e.detail["compute_s"] for e in es))
                 for r, es in by_rank.items()}
        if solo_compute and all(r in timed and timed[r][1] > 0 and solo_compute[r] > 0 for r in range(world)):
            in_run = tuple(rates[r] * (timed[r][0] * per_rank[r] / timed[r][1]) / solo_compute[r]
                           for r in range(world))
    training_s = sum(e.detail["round_s"] for e in rounds) or wall  # rank 0's rounds: the time it trained
    links = []
    for i in range(world):
        for j in range(world):
            if i == j:
                continue
            figure = link(locations[i], locations[j])
            links.append(LinkFigure(i, j, link_class(locations[i], locations[j]).value, figure.rtt_ms, figure.rate_mbit,
                                    sent.get((f"r{i}", f"r{j}"), 0) / training_s, cost.bytes_per_s.get((i, j), 0.0)))
    loss = rows[-1].loss if rows else None
    return Rehearsal(sync.strategy.value, tuple(locations), tuple(rates), measured, cost.samples_per_s, round_s,
                     cost.time_per_round_s, count, loss, tuple(links), wall, cost.time_per_round_s - before,
                     protocol.rtt_s(topo), in_run, None if in_run is None else
                     protocol.cost(strategy, topology(in_run), payload, trained).samples_per_s, cores_per_node)


STRATEGIES = tuple(s.value for s in SyncStrategyName)


@dataclass(frozen=True, slots=True)
class RehearsalReport:
    plan_strategy: str
    rehearsals: tuple[Rehearsal, ...]
    egress_usd_per_hour: dict[str, float]  # strategy -> projected, at the measured bytes per link
    suggestion: str | None  # another strategy that measured better, in words


def to_record(plan_path: str, report: RehearsalReport) -> dict:
    """The ``geotrain.rehearse.v1`` document's body: per strategy, measured vs the model, per link."""
    rows = []
    for r in report.rehearsals:
        rows.append({
            "strategy": r.strategy, "samples_per_s": r.samples_per_s, "predicted_samples_per_s": r.predicted_samples_per_s,
            "round_s": r.round_s, "predicted_round_s": r.predicted_round_s,
            "error": r.error if r.predicted_round_s > 0 else None, "rounds": r.rounds, "loss": r.loss,
            "wall_s": r.wall_s, "egress_usd_per_hour": report.egress_usd_per_hour.get(r.strategy),
            "compute_samples_per_s": list(r.compute_samples_per_s), "cores_per_node": r.cores_per_node,
            "nodes": [{"cloud": n.cloud, "region": n.region, "zone": n.zone} for n in r.nodes],
            "links": [{"src": f.src, "dst": f.dst, "link_class": f.link_class, "rtt_ms": f.rtt_ms,
                       "rate_mbit": f.rate_mbit, "bytes_per_s": f.bytes_per_s,
                       "predicted_bytes_per_s": f.predicted_bytes_per_s} for f in r.links],
        })
    return {"plan": plan_path, "plan_strategy": report.plan_strategy, "rehearsals": rows,
            "suggestion": report.suggestion}


def rehearse_plan(plan: Plan | Path, *, minutes: float = 2.0, strategies: Sequence[str] | None = None,
                  steps: int = REHEARSAL_STEPS,
                  on_done: Callable[[Rehearsal], None] | None = None) -> RehearsalReport:
    """The plan's topology (``scaled_nodes``) with the plan's strategy and, within ``minutes`` in all,
    the other strategies (``strategies``: which; default all), each measured over ``steps`` steps and
    predicted."""
    from geotrain.planning.planfile import load_plan
    from geotrain.pricing.egress import EgressPrices

    if not isinstance(plan, Plan):
        plan = load_plan(plan)
    wanted = list(strategies) if strategies else [plan.sync.strategy.value] + \
        [s for s in STRATEGIES if s != plan.sync.strategy.value]
    for s in wanted:
        if s not in STRATEGIES:
            raise InputError(f"--strategies: {s!r} is not one of {', '.join(STRATEGIES)}")
    nodes = scaled_nodes(plan)
    from geotrain.app.launch import model_links

    link = model_links()
    egress = EgressPrices.bundled()
    deadline = time.monotonic() + minutes * 60
    done: list[Rehearsal] = []
    for s in wanted:
        left = deadline - time.monotonic()
        if done and left < 20:
            break
        got = rehearse_topology(nodes, link, replace(plan.sync, strategy=SyncStrategyName(s)), steps=steps,
                                timeout_s=max(left, 60.0))
        done.append(got)
        if on_done:
            on_done(got)
    usd = {r.strategy: sum(f.bytes_per_s * 3600 / 1e9 * egress.usd_per_gb(nodes[f.src], nodes[f.dst])
                           for f in r.links) for r in done}
    mine = done[0]
    better = [r for r in done[1:] if r.samples_per_s > 1.1 * mine.samples_per_s]
    suggestion = None
    if better:
        best = max(better, key=lambda r: r.samples_per_s)
        suggestion = (f"{best.strategy} trained {best.samples_per_s / mine.samples_per_s:.1f}x the samples/s of "
                      f"{mine.strategy} on this topology: re-plan with --strategy {best.strategy}")
    return RehearsalReport(plan.sync.strategy.value, tuple(done), usd, suggestion)
