"""asgd-ga's link between a region's server and the home server over real loopback sockets: the
pushes and replies cut into one piece per stream arrive whole and in order, the home server applies
each once and counts its samples against the budget, and the bytes counted are the wire's."""

from __future__ import annotations

import torch

from geotrain.train.sync.asgd_ga import STREAMS, HomeServer, Pusher
from geotrain.train.sync.base import ByteCounter, flat_parameters
from geotrain.train.sync.streams import HEADER


def test_pushes_over_several_streams_reach_the_home_model_whole_and_the_replies_carry_the_budget_left():
    torch.manual_seed(0)
    params = [torch.zeros(1001), torch.zeros(7, 3)]  # 1,022 values: not a multiple of the streams
    counter, pusher_counter = ByteCounter(), ByteCounter()
    server = HomeServer(params, torch.float32, "127.0.0.1", counter, samples_left=100)
    pusher = Pusher(server.address, rank=1, home_rank=0, initial=flat_parameters(params), dtype=torch.float32,
                    counter=pusher_counter, timeout_s=30)
    try:
        updates = [torch.randn(1022) for _ in range(3)]
        for k, update in enumerate(updates, start=1):
            pusher.push(k, update, samples=40)
        home, left = pusher.reply(3)
        expected = sum(updates, torch.zeros(1022))
        torch.testing.assert_close(home, expected)  # every push applied once, in one piece
        torch.testing.assert_close(flat_parameters(params), expected)
        assert left == 100 - 3 * 40  # the budget less every push's samples
        assert server.count(0) == 120  # the pushes' samples, for the home leader's progress
        assert len(server._links) == 1 and len(server._links[0].socks) == STREAMS
        wire = 3 * (1022 * 4 + STREAMS * HEADER.size)
        assert pusher_counter.drain() == {0: wire}
        assert counter.drain() == {1: wire}  # the replies: the home model's change since the last one
    finally:
        pusher.close()
        server.close()
