"""The runtime's WAN transport over real loopback sockets: three ranks connect through a store, their
all-reduce (a butterfly over several streams per pair) gives every rank the same sum and the sum of
their counts, the bytes counted are the wire's, and a peer that goes away is a ConnectionError, not
a hang."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from geotrain.domain import WAN_STREAMS
from geotrain.train.sync.base import ByteCounter
from geotrain.train.sync.streams import HEADER, Mesh


class DictStore:
    """What a Mesh asks of the run's store: set, and a get that waits for the key."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()

    def set(self, key: str, value: str) -> None:
        with self.cond:
            self.data[key] = value.encode()
            self.cond.notify_all()

    def get(self, key: str) -> bytes:
        with self.cond:
            assert self.cond.wait_for(lambda: key in self.data, timeout=10), key
            return self.data[key]


def _meshes(n: int, timeout_s: float = 10.0) -> tuple[list[Mesh], list[ByteCounter]]:
    store, counters = DictStore(), [ByteCounter() for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        made = [pool.submit(Mesh, "t", r, range(n), store, "127.0.0.1", counters[r], timeout_s) for r in range(n)]
        return [m.result() for m in made], counters


def test_every_rank_gets_the_same_sum_and_the_counts_add_up():
    meshes, counters = _meshes(3)
    try:
        torch.manual_seed(0)
        flats = [torch.randn(1001) for _ in range(3)]  # not a multiple of the ranks nor of the streams
        with ThreadPoolExecutor(3) as pool:
            out = list(pool.map(lambda r: meshes[r].all_reduce(flats[r], torch.float16, count=10 * (r + 1)), range(3)))
        for summed, total in out:
            assert total == 60
            assert torch.equal(summed, out[0][0])  # the same values on every rank, bit for bit
            torch.testing.assert_close(summed, sum(flats), atol=2e-2, rtol=1e-2)  # fp16 on the wire
        assert all(len(link.socks) == WAN_STREAMS for m in meshes for link in m.links.values())
        chunk = -(-1001 // 3) * 2  # bytes of one piece in fp16
        for r, counter in enumerate(counters):  # two exchanges, one piece each to each other rank
            assert counter.drain() == {p: 2 * (chunk + WAN_STREAMS * HEADER.size) for p in range(3) if p != r}
        # a second call pairs its messages with the peers' second call
        with ThreadPoolExecutor(3) as pool:
            again = list(pool.map(lambda r: meshes[r].all_reduce(torch.ones(5), torch.float32), range(3)))
        assert all(torch.equal(s, torch.full((5,), 3.0)) and c == 0 for s, c in again)
    finally:
        for m in meshes:
            m.close()


def test_a_peer_that_goes_away_is_a_connection_error():
    meshes, _ = _meshes(2, timeout_s=2.0)
    try:
        meshes[1].close()
        with pytest.raises(ConnectionError):
            meshes[0].all_reduce(torch.ones(100_000), torch.float32)
    finally:
        meshes[0].close()


def test_a_peer_that_never_connects_is_a_connection_error():
    store = DictStore()
    store.set("mesh/t/1", "127.0.0.1:1")  # nobody listens there
    with pytest.raises((ConnectionError, OSError)):
        Mesh("t", 0, [0, 1], store, "127.0.0.1", ByteCounter(), 2.0)
