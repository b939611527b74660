"""``asgd-ga``: asynchronous SGD with gradient accumulation between regions, as in
Cloudless-Training. Every region has a parameter server, its leader (the region's lowest rank): the
region's workers push their gradients to it every step (inside the region: an all-reduce, so every
worker of the region holds the server's model). Across regions the servers run asynchronous SGD with
the *home* server, the one in the region with the most compute (the perf model's and the solver's
rule): a region accumulates its updates for ``A`` steps, pushes the accumulated update to the home
server over TCP, and pulls the home model back, while it trains the next ``A`` steps. A round is one
push: ``A`` steps.

Convergence safeguards (the paper's): **bounded staleness** — a region waits at its push ``k`` until
the home model of its push ``k − S`` has come back (``S`` = 1: communication overlaps one
accumulation, no more), and then continues from that model plus its own updates since (so no update
is lost nor counted twice); **update scaling** — a region steps with its share of the global batch
(``b_q / B``) as the weight of its gradients, so that all regions' updates together make one step of
the global batch; the home server applies every region's update once, as it arrives. After the run's
last step every region pushes what is left and waits for all its replies, and then every rank takes
the home model, so the run ends on one model.

Wire: updates and replies travel in the plan's precision as differences (a push carries the region's
update since its last push; a reply the change of the home model since the last reply to that
region), so rounding never accumulates into the parameters. Bytes: ``W`` per push and ``W`` per
reply between a region's server and the home server, plus the in-region all-reduce every step.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from geotrain.train.sync.base import (
    ByteCounter, RegionalTraining, RoundClock, StepInput, StepResult, assign, flat_parameters, parameter_bytes,
    region_groups, wire_dtype,
)

HEADER = struct.Struct("!qq")  # push number, payload bytes
SERVER_KEY = "asgd-ga/home-server"


def home_region(regions: Sequence[str], rates: Sequence[float] | None) -> str:
    """The region with the most raw compute (samples/s of its nodes; node count if unknown), ties by name."""
    power: dict[str, float] = {}
    for r, region in enumerate(regions):
        power[region] = power.get(region, 0.0) + (rates[r] if rates else 1.0)
    return max(sorted(power), key=lambda q: power[q])


def _send(sock: socket.socket, k: int, tensor: torch.Tensor) -> int:
    data = tensor.contiguous().view(torch.uint8).numpy().tobytes()
    sock.sendall(HEADER.pack(k, len(data)) + data)
    return HEADER.size + len(data)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        chunk = sock.recv_into(view[got:], n - got)
        if not chunk:
            raise ConnectionError("the parameter server's peer closed the connection")
        got += chunk
    return buf


def _recv(sock: socket.socket, dtype: torch.dtype) -> tuple[int, torch.Tensor, int]:
    k, size = HEADER.unpack(_recv_exact(sock, HEADER.size))
    data = _recv_exact(sock, size)
    return k, torch.frombuffer(data, dtype=torch.uint8).view(dtype).to(torch.float32), HEADER.size + size


class HomeServer:
    """The home region's parameter server: applies every pushed update to the home model (between
    the home region's own steps: ``lock``) and replies with the change since its last reply."""

    def __init__(self, params: Sequence[torch.Tensor], dtype: torch.dtype, address: str, counter: ByteCounter) -> None:
        self.params, self.dtype, self.counter = list(params), dtype, counter
        self.lock = threading.Lock()
        self.listener = socket.create_server((address, 0))
        self.address = f"{address}:{self.listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True, name="asgd-ga-server").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True, name="asgd-ga-push")
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            try:
                (src,) = struct.unpack("!q", _recv_exact(conn, 8))
                with self.lock:
                    told = flat_parameters(self.params)  # what that region's server holds of the home model
                while True:
                    k, update, _ = _recv(conn, self.dtype)
                    with self.lock:
                        assign(self.params, flat_parameters(self.params) + update)
                        change = (flat_parameters(self.params) - told).to(self.dtype)
                    told += change.to(torch.float32)
                    self.counter.to(src, _send(conn, k, change))
            except (ConnectionError, OSError):
                return

    def close(self) -> None:
        self.listener.close()


class Pusher(threading.Thread):
    """A region's server's link to the home server: sends pushes in order, collects the replies."""

    def __init__(self, address: str, rank: int, home_rank: int, initial: torch.Tensor, dtype: torch.dtype,
                 counter: ByteCounter, timeout_s: float) -> None:
        super().__init__(daemon=True, name="asgd-ga-pusher")
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(struct.pack("!q", rank))
        self.home_rank, self.dtype, self.counter, self.timeout_s = home_rank, dtype, counter, timeout_s
        self.home = initial.clone()  # the home model as of the last reply
        self.outbox: queue.Queue = queue.Queue()
        self.replies: dict[int, torch.Tensor] = {}
        self.cond = threading.Condition()
        self.failed: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            while True:
                item = self.outbox.get()
                if item is None:
                    return
                k, update = item
                self.counter.to(self.home_rank, _send(self.sock, k, update))
                got, change, _ = _recv(self.sock, self.dtype)
                self.home += change
                with self.cond:
                    self.replies[got] = self.home.clone()
                    self.cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it at its next wait
            with self.cond:
                self.failed = exc
                self.cond.notify_all()

    def push(self, k: int, update: torch.Tensor) -> None:
        self.outbox.put((k, update))

    def reply(self, k: int) -> torch.Tensor:
        with self.cond:
            ok = self.cond.wait_for(lambda: k in self.replies or self.failed is not None, timeout=self.timeout_s)
            if k in self.replies:
                for old in [j for j in self.replies if j < k]:
                    del self.replies[old]
                return self.replies[k]
            raise RuntimeError(f"asgd-ga: no reply from the home server for push {k}"
                               + (f": {self.failed}" if self.failed else f" within {self.timeout_s:.0f} s" if not ok else ""))

    def close(self) -> None:
        self.outbox.put(None)
        try:
            self.sock.close()
        except OSError:
            pass


class AsgdGASync(RegionalTraining):
    name = "asgd-ga"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 regions: Sequence[str], accumulation_steps: int, precision: str = "fp32", *,
                 micro_batches: int, staleness: int = 1, rates: Sequence[float] | None = None,
                 store: object | None = None, address: str = "127.0.0.1", timeout_s: float = 60.0) -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.A, self.S = accumulation_steps, staleness
        self.dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self.payload = parameter_bytes(model, self.dtype)
        self.full_bytes = parameter_bytes(model)
        self.members_by_region, self.my_members, self.group, self.leaders, _ = region_groups(regions, rank, world)
        self.leader = self.my_members[0]
        home = home_region(regions, rates)
        self.home_leader = self.members_by_region[home][0]
        self.is_home = regions[rank] == home
        # the region's share of the global batch: rank r trains the micro-batches j ≡ r (mod world)
        self.weight = sum(len(range(r, micro_batches, world)) for r in self.my_members) / micro_batches
        self.clock = RoundClock()
        self.server: HomeServer | None = None
        self.pusher: Pusher | None = None
        self.pushes = 0
        self.in_flight: deque[torch.Tensor] = deque()
        self.snapshot = flat_parameters(self.params)
        self.since_push = 0
        if len(self.leaders) > 1 and rank == self.leader:
            if store is None:
                raise ValueError("asgd-ga across regions needs the run's store to find the home server")
            if self.is_home:
                self.server = HomeServer(self.params, self.dtype, address, counter)
                self.lock = self.server.lock  # the server applies pushes between the region's steps
                store.set(SERVER_KEY, self.server.address)
            else:
                address_of_home = store.get(SERVER_KEY).decode()
                self.pusher = Pusher(address_of_home, rank, self.home_leader, self.snapshot, self.dtype, counter,
                                     timeout_s)

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        result = self._region_step(inp, optimizer, self.weight)
        self.since_push += 1
        return result

    def after_step(self, step: int, *, final: bool = False) -> None:
        if step % self.A and not final:
            return
        if self.pusher is not None:
            self._push(final)
        self._broadcast_in_region()
        if final and self.world > 1:
            dist.barrier()  # every push is applied at home (its reply came back) before the home model is taken
            flat = flat_parameters(self.params)
            dist.broadcast(flat, src=self.home_leader)
            assign(self.params, flat)
            if self.rank == self.home_leader:
                self.counter.to((self.rank + 1) % self.world, self.full_bytes)  # a tree broadcast, counted once
        self.clock.end()

    def _push(self, final: bool) -> None:
        """A region's server at its push: send the update since the last push; continue from the home
        model of push k − S plus the updates not in it yet."""
        assert self.pusher is not None
        now = flat_parameters(self.params)
        update = now - self.snapshot
        self.pushes += 1
        k = self.pushes
        wire = update.to(self.dtype)
        self.pusher.push(k, wire)
        self.in_flight.append(wire.to(torch.float32))
        self.since_push = 0
        wait_for = k if final else k - self.S
        if wait_for < 1:
            self.snapshot = now
            return
        home = self.pusher.reply(wait_for)
        while len(self.in_flight) > k - wait_for:
            self.in_flight.popleft()
        rebased = home + sum(self.in_flight, torch.zeros_like(home))
        assign(self.params, rebased)
        self.snapshot = rebased

    def averaged(self, step: int) -> bool:
        return step % self.A == 0

    def close(self) -> None:
        if self.pusher is not None:
            self.pusher.close()
        if self.server is not None:
            self.server.close()
