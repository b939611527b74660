"""The delay line: one process that owns a TUN device per endpoint and forwards IP packets between them,
each after its directed pair's one-way delay.

Run as ``python -m geotrain.wan.delayline --tag TAG`` (as root, in the root namespace). It takes
commands as JSON lines on stdin and answers each with one JSON line on stdout (``{"ok": true, ...}``
or ``{"ok": false, "error": "..."}``); the first line it writes, unasked, is ``{"ok": true, "ready":
true, "pid": PID}``. Commands:

- ``{"op": "add", "name": N, "namespace": NS, "address": A, "delay_ms": {other: ms, ...},
  "delay_from_ms": {other: ms, ...}}``: a TUN device for endpoint N, moved into NS (a namespace of
  this run) with address A/16. ``delay_ms[other]`` is the one-way delay from N to ``other`` and, unless
  ``delay_from_ms`` names ``other``, from ``other`` to N as well. Answers ``{"device": ...}``.
- ``{"op": "remove", "name": N}``: N's device goes away (its namespace stays).
- ``{"op": "stats"}``: packets and bytes forwarded per directed pair, packets dropped, packets queued.
- ``{"op": "quit"}``: tear down and exit.

Tearing down kills every process in the run's namespaces (``gt-<tag>-*``), deletes the namespaces and
exits. It happens on ``quit``, on SIGTERM, SIGINT or SIGHUP, and on end of input: the owner's death,
even by SIGKILL, closes the pipe. Each directed pair is a FIFO of (monotonic deadline, packet); the
loop sleeps in select(2) until the earliest deadline or the next packet. Adding an endpoint runs its
``ip`` commands on a helper thread so that packets keep flowing meanwhile.

Forwarding ceiling, measured on a 2-core machine (one TCP stream, everything on the same cores):
about 4 Gbit/s at rtt 0 with MTU 9000 (1.0 Gbit/s at MTU 1500, 11 Gbit/s at 65000), 0.9 Gbit/s over a
20 ms round trip. Round trips come out within ~0.1 ms of the configured ones. MTU 9000 is the default:
far above any emulated WAN rate, and small enough for htb to shape finely.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import signal
import sys
import threading
import time
from geotrain.wan import namespaces, tun
from geotrain.wan.system import WanError

READ_BATCH = 256
EARLY_S = 0.00005
"""A packet due this soon leaves now rather than after one more sleep."""
MAX_OVERSLEEP_S = 0.001
"""The loop waits in select(2), whose timeout has microsecond resolution (epoll's has whole
milliseconds, which made every hop up to 1 ms late). A timed wake still comes ~0.1–0.3 ms after the
timeout on this kind of machine, so the loop keeps a running mean of that lateness (at most this),
asks for that much less, and dates a packet that much before it was read (a packet's wake-up is as
late as a timer's)."""
MAX_PACKET_BYTES = 65536


class DelayLine:
    """The forwarding loop and its control channel (one instance per process)."""

    def __init__(self, tag: str, mtu_bytes: int, control_in: int, control_out) -> None:  # noqa: ANN001
        self.tag = namespaces.check_tag(tag)
        self.mtu_bytes = mtu_bytes
        self.control_in = control_in
        self.control_out = control_out
        self.ports: dict[str, tun.Port] = {}
        self.by_address: dict[bytes, tun.Port] = {}
        self._fds: dict[int, tun.Port] = {}
        self.delay_s: dict[tuple[str, str], float] = {}
        self.queues: dict[tuple[str, str], collections.deque[tuple[float, bytes]]] = {}
        self.forwarded: collections.Counter[tuple[str, str]] = collections.Counter()
        self.forwarded_bytes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.dropped = 0
        self.next_index = 0
        self.pending = b""
        self.adding: threading.Thread | None = None
        self.add_result: tuple[dict, tun.Port | None, str | None] | None = None
        self.running = True
        self.quit_requested = False
        self.oversleep_s = 0.0
        self.selector = selectors.SelectSelector()  # few descriptors; see MAX_OVERSLEEP_S
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(control_in, False)
        self.selector.register(control_in, selectors.EVENT_READ, self._on_control)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._on_wake)

    # -- the loop ---------------------------------------------------------------------------------

    def serve(self) -> None:
        """Forward and answer commands until told to stop; then tear everything down."""
        self._reply({"ok": True, "ready": True, "pid": os.getpid()})
        try:
            while self.running:
                timeout_s = self._timeout_s()
                slept_from = time.monotonic()
                events = self.selector.select(timeout_s)
                if not events and timeout_s:
                    late_s = time.monotonic() - slept_from - timeout_s
                    self.oversleep_s = min(MAX_OVERSLEEP_S, max(0.0, 0.9 * self.oversleep_s + 0.1 * late_s))
                for key, _ in events:
                    key.data(key.fileobj)
                self._flush(time.monotonic() + EARLY_S)
        finally:
            self.teardown()

    def _timeout_s(self) -> float | None:
        if not self.queues:
            return None
        earliest = min(queue[0][0] for queue in self.queues.values())
        return max(0.0, earliest - time.monotonic() - self.oversleep_s)

    def _on_port(self, fd: int) -> None:
        port = self._fds.get(fd)
        if port is None:
            return
        now = time.monotonic() - self.oversleep_s  # it arrived about one wake-up latency ago
        for _ in range(READ_BATCH):
            try:
                packet = os.read(fd, MAX_PACKET_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self._route(port, packet, now)

    def _route(self, source: tun.Port, packet: bytes, now: float) -> None:
        if len(packet) < 20 or packet[0] >> 4 != 4:
            self.dropped += 1
            return
        target = self.by_address.get(packet[16:20])
        if target is None or target is source:
            self.dropped += 1
            return
        pair = (source.name, target.name)
        queue = self.queues.get(pair)
        delay_s = self.delay_s.get(pair, 0.0)
        if delay_s <= 0.0 and not queue:
            self._write(pair, target, packet)
            return
        if queue is None:
            queue = self.queues[pair] = collections.deque()
        queue.append((now + delay_s, packet))

    def _flush(self, now: float) -> None:
        for pair in [pair for pair, queue in self.queues.items() if queue[0][0] <= now]:
            queue = self.queues[pair]
            target = self.ports.get(pair[1])
            while queue and queue[0][0] <= now:
                packet = queue.popleft()[1]
                if target is None:
                    self.dropped += 1
                else:
                    self._write(pair, target, packet)
            if not queue:
                del self.queues[pair]

    def _write(self, pair: tuple[str, str], target: tun.Port, packet: bytes) -> None:
        try:
            os.write(target.fd, packet)
        except OSError:
            self.dropped += 1
            return
        self.forwarded[pair] += 1
        self.forwarded_bytes[pair] += len(packet)

    # -- control ----------------------------------------------------------------------------------

    def _on_control(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.running = False
            return
        self.pending += chunk
        self._handle_pending()

    def _handle_pending(self) -> None:
        while self.running and self.adding is None and b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            if line.strip():
                self._command(line)

    def _command(self, line: bytes) -> None:
        try:
            command = json.loads(line)
            op = command["op"]
            if op == "add":
                self._start_add(command)
            elif op == "remove":
                self._remove(command["name"])
                self._reply({"ok": True})
            elif op == "stats":
                self._reply(self._stats())
            elif op == "quit":
                self.running = False
                self.quit_requested = True
            else:
                self._reply({"ok": False, "error": f"unknown op {op!r}"})
        except (ValueError, KeyError, TypeError, WanError) as exc:
            self._reply({"ok": False, "error": str(exc) or type(exc).__name__})

    def _start_add(self, command: dict) -> None:
        name = namespaces.check_endpoint(str(command["name"]))
        namespace = str(command["namespace"])
        if name in self.ports:
            raise ValueError(f"endpoint {name} is already added")
        parsed = namespaces.parse_name(namespace)
        if parsed is None or parsed[0] != self.tag:
            raise ValueError(f"namespace {namespace} is not one of run {self.tag}")
        if not namespaces.exists(namespace):
            raise ValueError(f"namespace {namespace} does not exist")
        address = str(command["address"])
        key = tun.address_bytes(address)
        if key in self.by_address:
            raise ValueError(f"address {address} is taken by {self.by_address[key].name}")
        delays = {str(k): float(v) / 1000.0 for k, v in (command.get("delay_ms") or {}).items()}
        delays_from = {str(k): float(v) / 1000.0 for k, v in (command.get("delay_from_ms") or {}).items()}
        if any(value < 0 for value in [*delays.values(), *delays_from.values()]):
            raise ValueError("a delay is negative")
        device = tun.device_name(self.tag, self.next_index)
        self.next_index += 1
        fd = tun.open_tun(device)
        port = tun.Port(name, namespace, address, device, fd)
        request = {"delays": delays, "delays_from": delays_from}

        def place() -> None:
            error = None
            try:
                tun.place(device, namespace, address, self.mtu_bytes)
            except WanError as exc:
                error = exc.message
            self.add_result = (request, port, error)
            os.write(self.wake_w, b"a")

        self.adding = threading.Thread(target=place, name=f"add-{name}", daemon=True)
        self.adding.start()

    def _on_wake(self, fd: int) -> None:
        try:
            os.read(fd, 4096)
        except BlockingIOError:
            pass
        if self.adding is not None and self.add_result is not None:
            self.adding.join()
            request, port, error = self.add_result
            self.adding, self.add_result = None, None
            if error is not None:
                os.close(port.fd)
                self._reply({"ok": False, "error": error})
            else:
                self._join(port, request["delays"], request["delays_from"])
                self._reply({"ok": True, "name": port.name, "device": port.device, "address": port.address})
            self._handle_pending()

    def _join(self, port: tun.Port, delays: dict[str, float], delays_from: dict[str, float]) -> None:
        for other in self.ports:
            self.delay_s[(port.name, other)] = delays.get(other, 0.0)
            self.delay_s[(other, port.name)] = delays_from.get(other, delays.get(other, 0.0))
        self.ports[port.name] = port
        self.by_address[tun.address_bytes(port.address)] = port
        self._fds[port.fd] = port
        self.selector.register(port.fd, selectors.EVENT_READ, self._on_port)

    def _remove(self, name: str) -> None:
        port = self.ports.pop(name, None)
        if port is None:
            raise ValueError(f"no endpoint {name}")
        self.by_address.pop(tun.address_bytes(port.address), None)
        self._fds.pop(port.fd, None)
        self.selector.unregister(port.fd)
        os.close(port.fd)
        for pair in [pair for pair in self.delay_s if name in pair]:
            del self.delay_s[pair]
        for pair in [pair for pair in self.queues if name in pair]:
            self.dropped += len(self.queues.pop(pair))

    def _stats(self) -> dict:
        return {"ok": True,
                "forwarded": {f"{a}>{b}": n for (a, b), n in self.forwarded.items()},
                "forwarded_bytes": {f"{a}>{b}": n for (a, b), n in self.forwarded_bytes.items()},
                "dropped": self.dropped,
                "queued": sum(len(queue) for queue in self.queues.values()),
                "oversleep_ms": round(self.oversleep_s * 1000, 3)}

    def _reply(self, message: dict) -> None:
        try:
            self.control_out.write(json.dumps(message) + "\n")
            self.control_out.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.running = False

    def stop(self) -> None:
        """Ask the loop to stop (safe from a signal handler)."""
        self.running = False
        try:
            os.write(self.wake_w, b"s")
        except OSError:
            pass

    # -- teardown ---------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Kill every process in the run's namespaces, close every device, delete the namespaces."""
        if self.adding is not None:
            self.adding.join()
            if self.add_result is not None and self.add_result[1] is not None:
                os.close(self.add_result[1].fd)
            self.adding = None
        problems = []
        names = set(namespaces.list_namespaces(self.tag)) | {port.namespace for port in self.ports.values()}
        for namespace in sorted(names):
            try:
                namespaces.kill_all(namespace)
            except WanError as exc:
                problems.append(exc.message)
        for port in list(self.ports.values()):
            os.close(port.fd)
        self.ports.clear()
        for namespace in sorted(names):
            try:
                namespaces.delete(namespace)
            except WanError as exc:
                problems.append(exc.message)
        if self.quit_requested:
            self._reply({"ok": not problems, **({"error": "; ".join(problems)} if problems else {})})
        for problem in problems:
            print(f"delay line {self.tag}: {problem}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point: serve one run's delay line on stdin/stdout."""
    parser = argparse.ArgumentParser(prog="python -m geotrain.wan.delayline", description=__doc__.split("\n")[0])
    parser.add_argument("--tag", required=True, help="the run's tag (6-8 hex characters)")
    parser.add_argument("--mtu-bytes", type=int, default=tun.DEFAULT_MTU_BYTES)
    args = parser.parse_args(argv)
    line = DelayLine(args.tag, args.mtu_bytes, sys.stdin.fileno(), sys.stdout)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: line.stop())
    line.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
