"""The runtime's own WAN transport: long-lived TCP connections, ``WAN_STREAMS`` of them per pair of
ranks, each message cut into one piece per stream (:class:`Streams`), and a :class:`Mesh` of such
links among a set of ranks with the all-reduce the strategies send across regions.

Why not gloo's collectives across regions: gloo's sender waits for the receiver's notice before each
send, and its ring takes ``2(R − 1)`` dependent steps, so an all-reduce over a 100–300 ms link costs
several round trips beyond its bytes. Here a message goes out as soon as it is ready (the kernel's
buffers hold what the receiver has not read yet), the all-reduce is a butterfly (a reduce-scatter and
an all-gather, each one exchange with every peer at once: two one-way trips in all, whatever ``R``),
and each stream needs a window of its piece only, so a message does not wait for one stream's window
to open over a long round trip (Linux closes an idle connection's window again after a round's
compute; ``WAN_STREAMS`` initial windows carry ``WAN_STREAMS`` times as much in the first trip).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from geotrain.domain import WAN_STREAMS

HEADER = struct.Struct("!qqq")  # message number, piece bytes, a count (samples: what the sender says with it)
HELLO = struct.Struct("!qqq")  # a stream's first words: the sender's rank, the stream's index, the streams


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        chunk = sock.recv_into(view[got:], n - got)
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        got += chunk
    return buf


def _recv_piece(sock: socket.socket) -> tuple[int, bytearray, int]:
    k, size, samples = HEADER.unpack(recv_exact(sock, HEADER.size))
    return k, recv_exact(sock, size), samples


class Streams:
    """A link between two ranks over several TCP connections: a message is cut into one piece per
    stream, and the pieces go and come on all of them at once (a thread per stream and direction, so
    a message may go out while one comes in). Each stream needs a window of a piece, not of the whole
    message, so a message does not wait for one window to open over a long round trip, and a loss
    slows one piece."""

    def __init__(self, socks: Sequence[socket.socket]) -> None:
        self.socks = list(socks)
        for sock in self.socks:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pool = ThreadPoolExecutor(2 * len(self.socks), thread_name_prefix="wan-stream")

    def send(self, k: int, tensor: torch.Tensor, samples: int) -> int:
        """Send message ``k``; the bytes it put on the wire."""
        data = memoryview(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())
        n, size = len(self.socks), len(data)
        cuts = [size * i // n for i in range(n + 1)]

        def one(i: int) -> None:
            self.socks[i].sendall(HEADER.pack(k, cuts[i + 1] - cuts[i], samples) + bytes(data[cuts[i]:cuts[i + 1]]))

        list(self.pool.map(one, range(n)))
        return n * HEADER.size + size

    def recv(self, dtype: torch.dtype) -> tuple[int, torch.Tensor, int]:
        """One message: its number, its tensor (fp32) and its count."""
        pieces = list(self.pool.map(_recv_piece, self.socks))
        numbers = {k for k, _, _ in pieces}
        if len(numbers) != 1:
            raise ConnectionError(f"the streams of one link carry different messages {sorted(numbers)}")
        data = bytearray().join(piece for _, piece, _ in pieces)
        return pieces[0][0], torch.frombuffer(data, dtype=torch.uint8).view(dtype).to(torch.float32), pieces[0][2]

    def close(self) -> None:
        for sock in self.socks:
            try:
                sock.close()
            except OSError:
                pass
        self.pool.shutdown(wait=False)


def connect(address: str, rank: int, streams: int, timeout_s: float) -> list[socket.socket]:
    """``streams`` connections to ``address`` (host:port), each introduced by its HELLO, opened at
    once (one after the other, each would cost a round trip: 8 × 300 ms before the first byte)."""
    host, port = address.rsplit(":", 1)

    def one(index: int) -> socket.socket:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        try:
            sock.sendall(HELLO.pack(rank, index, streams))
        except OSError:
            sock.close()
            raise
        return sock

    with ThreadPoolExecutor(streams, thread_name_prefix="wan-connect") as pool:
        opening = [pool.submit(one, index) for index in range(streams)]
    socks = [f.result() for f in opening if f.exception() is None]
    if len(socks) < streams:
        for sock in socks:
            sock.close()
        raise next(f.exception() for f in opening if f.exception() is not None)
    return socks


class Mesh:
    """``WAN_STREAMS`` long-lived connections between every two ranks of ``members``, made once
    through the run's store (each rank listens on ``address`` and says where under ``mesh/NAME/RANK``;
    a rank connects to the higher ranks and accepts the lower ones), and an all-reduce over them.

    Every member calls :meth:`all_reduce` in the same order. A peer that is gone (closed, or silent
    for ``timeout_s``) raises ``ConnectionError``, as a collective with a dead peer does."""

    def __init__(self, name: str, rank: int, members: Sequence[int], store: object, address: str,
                 counter: object, timeout_s: float, streams: int = WAN_STREAMS) -> None:
        self.rank, self.members, self.counter = rank, sorted(members), counter
        self.links: dict[int, Streams] = {}
        self._k = 0
        lower = [p for p in self.members if p < rank]
        listener = socket.create_server((address, 0), backlog=max(16, streams * len(self.members)))
        try:
            listener.settimeout(timeout_s)
            store.set(f"mesh/{name}/{rank}", f"{address}:{listener.getsockname()[1]}")
            # the higher ranks' addresses (one store client: one call at a time), then every connection at
            # once; a connect completes in the peer's backlog before it accepts
            higher = {p: store.get(f"mesh/{name}/{p}").decode() for p in self.members if p > rank}
            with ThreadPoolExecutor(max(1, len(higher)), thread_name_prefix="wan-connect") as pool:
                opening = {p: pool.submit(connect, where, rank, streams, timeout_s) for p, where in higher.items()}
            for p, f in opening.items():
                if f.exception() is None:
                    self.links[p] = Streams(f.result())
            for f in opening.values():
                if f.exception() is not None:
                    raise f.exception()
            waiting: dict[int, list[socket.socket | None]] = {p: [None] * streams for p in lower}
            while any(s is None for socks in waiting.values() for s in socks):
                conn, _ = listener.accept()
                conn.settimeout(timeout_s)
                src, index, _n = HELLO.unpack(recv_exact(conn, HELLO.size))
                if src not in waiting or not 0 <= index < streams or waiting[src][index] is not None:
                    conn.close()
                    raise ConnectionError(f"mesh {name}: an unexpected stream (rank {src}, index {index})")
                waiting[src][index] = conn
            for src, socks in waiting.items():
                self.links[src] = Streams([s for s in socks if s is not None])
        except TimeoutError as exc:
            self.close()
            raise ConnectionError(f"mesh {name}: the peers did not connect within {timeout_s:.0f} s") from exc
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
        for link in self.links.values():
            for sock in link.socks:
                sock.settimeout(timeout_s)
        self.pool = ThreadPoolExecutor(max(1, 2 * len(self.links)), thread_name_prefix="wan-mesh")

    def exchange(self, outgoing: dict[int, tuple[torch.Tensor, int]],
                 dtype: torch.dtype) -> dict[int, tuple[torch.Tensor, int]]:
        """Send each peer its tensor (already in ``dtype``) and count, and receive one from each, at
        once; what came, in fp32."""
        k = self._k
        self._k += 1
        sends = {p: self.pool.submit(self.links[p].send, k, t, c) for p, (t, c) in outgoing.items()}
        recvs = {p: self.pool.submit(self.links[p].recv, dtype) for p in outgoing}
        got: dict[int, tuple[torch.Tensor, int]] = {}
        try:
            for p, sent in sends.items():
                self.counter.to(p, sent.result())
            for p, received in recvs.items():
                number, tensor, count = received.result()
                if number != k:
                    raise ConnectionError(f"rank {p} sent message {number} where {k} was due")
                got[p] = (tensor, count)
        except OSError as exc:  # a timeout or a reset: the peer is gone
            raise ConnectionError(f"the WAN link to a peer failed: {exc}") from exc
        return got

    def all_reduce(self, flat: torch.Tensor, dtype: torch.dtype, count: int = 0) -> tuple[torch.Tensor, int]:
        """The sum of ``flat`` over the members (sent in ``dtype``; every member gets the same values)
        and the sum of their ``count``: a butterfly. Piece ``j`` of every member goes to member ``j``,
        which adds them up (in fp32) and sends the sum, in ``dtype``, to all."""
        n = len(self.members)
        me = self.members.index(self.rank)
        size = flat.numel()
        chunk = -(-size // n)
        wire = torch.zeros(chunk * n, dtype=dtype)
        wire[:size] = flat.detach().reshape(-1).cpu().to(dtype)
        pieces = wire.view(n, chunk)
        got = self.exchange({p: (pieces[j], count) for j, p in enumerate(self.members) if p != self.rank}, dtype)
        mine = pieces[me].to(torch.float32)
        for p in self.members:  # a fixed order: the sum does not depend on which piece came first
            if p != self.rank:
                mine += got[p][0]
        mine_wire = mine.to(dtype)
        total = count + sum(c for _, c in got.values())
        gathered = self.exchange({p: (mine_wire, 0) for p in self.members if p != self.rank}, dtype)
        out = torch.empty(n, chunk, dtype=torch.float32)
        for j, p in enumerate(self.members):
            out[j] = mine_wire.to(torch.float32) if p == self.rank else gathered[p][0]
        return out.view(-1)[:size].reshape(flat.shape).to(flat.device), total

    def close(self) -> None:
        for link in self.links.values():
            link.close()
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
