"""The one cost function: its parts always add up to its total, the total is what an independent
recomputation from the ledger gives, and each cloud's transfer rule (direction, cross-AZ) holds."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geotrain.billing import CostKind, run_cost
from geotrain.domain import CLOUD_ONPREM, Continent, LinkClass, Location, Market, link_class
from geotrain.ledger import EventKind, Ledger
from geotrain.pricing.egress import EgressPrices, Payer
from tests.helpers import examples

EGRESS = EgressPrices.bundled()
T0 = 1_700_000_000.0
PLACES = {
    "aws-a": Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA),
    "aws-b": Location("aws", "us-east-1", "use1-az2", Continent.NORTH_AMERICA),
    "aws-eu": Location("aws", "eu-west-1", "euw1-az1", Continent.EUROPE),
    "gcp-a": Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA),
    "gcp-b": Location("gcp", "us-central1", "us-central1-b", Continent.NORTH_AMERICA),
    "azure": Location("azure", "westeurope", "", Continent.EUROPE),
    "lab": Location(CLOUD_ONPREM, "munich-lab", "", Continent.EUROPE),
}
STORAGE = {"aws/us-east-1": PLACES["aws-a"], "gcp/us-central1": PLACES["gcp-a"], None: None}


def _offer_json(loc: Location, market: str) -> str:
    return json.dumps({"cloud": loc.cloud, "region": loc.region, "zone": loc.zone, "continent": loc.continent.value,
                       "instance_type": "vm", "market": market})


def _id(run: str, n: int) -> str:
    """Node ids are unique across runs (as providers make them): the examples share one ledger."""
    return f"n{n}" if run == "run-p" else f"{run}-n{n}"


def make_ledger(nodes, links, checkpoints, storage: str | None, run: str = "run-p") -> Ledger:
    """``nodes``: (place, market, price, start offset s, hours or None = running, price changes)."""
    ledger = Ledger()
    url = "s3://bucket/ckpt" if storage else "/tmp/ckpt"
    ledger.create_run(run_id=run, plan_id="p", plan_json="{}", workload="tiny-cnn", provider="local",
                      checkpoint_url=url, launcher_pid=1, target_steps=10,
                      options={"checkpoint_location": storage} if storage else {})
    for n, (place, market, price, start, hours, changes) in enumerate(nodes):
        loc = PLACES[place]
        market = "owned" if loc.cloud == CLOUD_ONPREM else market
        offer_id = f"{loc.cloud}/{loc.region}/{loc.zone or '-'}/vm-{_id(run, n)}/{market}"  # prices are per offer, across runs
        ledger.add_node(run_id=run, node_id=_id(run, n), request_id=f"{run}/{offer_id}/0", offer_id=offer_id,
                        offer_json=_offer_json(loc, market), cloud=loc.cloud, region=loc.region, zone=loc.zone,
                        market=market, price_usd_per_hour=price, launched_at=T0 + start)
        for k, (after_s, new_price) in enumerate(changes):
            ledger.add_price(offer_id, new_price, f"history {k}", at=T0 + start + after_s)
        if hours is not None:
            ledger.end_node(_id(run, n), "completed", at=T0 + start + hours * 3600)
    rows = []
    for src, dst, nbytes in links:
        if src != dst and src < len(nodes) and dst < len(nodes):
            a, b = PLACES[nodes[src][0]], PLACES[nodes[dst][0]]
            rows.append((_id(run, src), _id(run, dst), link_class(a, b).value, nbytes))
    ledger.add_link_bytes(run, 1, rows)
    members = [_id(run, n) for n in range(len(nodes))]
    ledger.event(run, EventKind.GENERATION_STARTED, at=T0 + 1, generation=1, world_size=len(members), nodes=members)
    for k, (writer, size, restore) in enumerate(checkpoints):
        if writer < len(nodes):
            ledger.event(run, EventKind.CHECKPOINT_SAVED, node_id=_id(run, writer), at=T0 + 10 + k, step=k,
                         url=f"{url}/{k}", size_bytes=size)
            if restore:
                ledger.event(run, EventKind.CHECKPOINT_RESTORED, node_id=_id(run, 0), at=T0 + 20 + k, generation=1,
                             step=k, url=f"{url}/{k}")
    return ledger


def referee(nodes, links, checkpoints, storage: str | None, at: float) -> float:
    """The total recomputed by hand: price steps × time, bytes × every side's $/GB, storage reads
    by every member, nothing shared with the code under test but the price table."""
    total = 0.0
    for place, market, price, start, hours, changes in nodes:
        begin = T0 + start
        end = min(at, begin + hours * 3600) if hours is not None else at
        end = max(begin, end)
        steps = sorted((T0 + start + a, p) for a, p in changes if begin < T0 + start + a < end)
        t, p = begin, price
        for when, new in steps:
            total += (when - t) / 3600 * p
            t, p = when, new
        total += (end - t) / 3600 * p
    for src, dst, nbytes in links:
        if src != dst and src < len(nodes) and dst < len(nodes):
            a, b = PLACES[nodes[src][0]], PLACES[nodes[dst][0]]
            if link_class(a, b) is not LinkClass.SAME_ZONE:
                per_gb = EGRESS.rate(a, b).usd_per_gb
                if a.cloud == b.cloud == "aws" and link_class(a, b) is LinkClass.CROSS_ZONE:
                    per_gb *= 2  # AWS bills the receiving side as well
                total += nbytes / 1e9 * per_gb
    where = STORAGE[storage]

    def storage_gb_price(src: Location, dst: Location) -> float:
        if src.cloud == CLOUD_ONPREM or link_class(src, dst) in (LinkClass.SAME_ZONE, LinkClass.CROSS_ZONE):
            return 0.0
        return EGRESS.rate(src, dst).usd_per_gb

    if where is not None:
        for writer, size, restore in checkpoints:
            if writer < len(nodes):
                total += size / 1e9 * storage_gb_price(PLACES[nodes[writer][0]], where)
                if restore:
                    total += sum(size / 1e9 * storage_gb_price(where, PLACES[n[0]]) for n in nodes)
    return total


node = st.tuples(st.sampled_from(sorted(PLACES)), st.sampled_from(["spot", "on_demand"]), st.floats(0, 5),
                 st.floats(0, 3600), st.one_of(st.none(), st.floats(0, 3)),
                 st.lists(st.tuples(st.floats(1, 10_000), st.floats(0, 5)), max_size=3))


@settings(max_examples=examples(60, 300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=st.lists(node, min_size=1, max_size=6),
       links=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 50 * 10**9)), max_size=12),
       checkpoints=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5 * 10**9), st.booleans()), max_size=4),
       storage=st.sampled_from(sorted(STORAGE, key=str)), at_h=st.floats(0, 4))
def test_parts_always_add_up_to_the_total_and_the_total_is_the_ledger_recomputed(
        geotrain_home, nodes, links, checkpoints, storage, at_h):
    import uuid

    run = f"run-{uuid.uuid4().hex[:8]}"
    ledger = make_ledger(nodes, links, checkpoints, storage, run)
    at = T0 + at_h * 3600
    cost = run_cost(ledger, run, at=at)
    total = cost.total_usd
    assert total == pytest.approx(referee(nodes, links, checkpoints, storage, at), rel=1e-9, abs=1e-12)
    for parts in (cost.by_node, cost.by_cloud, cost.by_region, cost.by_market, cost.by_kind):
        assert sum(parts.values()) == pytest.approx(total, rel=1e-12, abs=1e-12)
    traffic = cost.usd(CostKind.EGRESS) + cost.usd(CostKind.STORAGE)
    assert sum(cost.by_link.values()) == pytest.approx(traffic, rel=1e-12, abs=1e-12)
    assert all(item.usd >= 0 for item in cost.items)
    assert set(cost.by_node) <= {_id(run, n) for n in range(len(nodes))}
    later = run_cost(ledger, run, at=at + 600).total_usd
    assert later >= total - 1e-12  # a cost never falls as time goes on
    ledger.close()


def test_aws_bills_cross_zone_traffic_on_both_sides_and_gcp_once(geotrain_home):
    nodes = [("aws-a", "spot", 0.0, 0, 1, []), ("aws-b", "spot", 0.0, 0, 1, []),
             ("gcp-a", "spot", 0.0, 0, 1, []), ("gcp-b", "spot", 0.0, 0, 1, [])]
    ledger = make_ledger(nodes, [(0, 1, 10**10), (2, 3, 10**10)], [], None)
    cost = run_cost(ledger, "run-p", at=T0 + 7200)
    aws = [i for i in cost.items if i.kind is CostKind.EGRESS and i.cloud == "aws"]
    assert sorted((i.node_id, i.payer, round(i.usd, 9)) for i in aws) == [("n0", "sender", 0.1), ("n1", "receiver", 0.1)]
    gcp = [i for i in cost.items if i.kind is CostKind.EGRESS and i.cloud == "gcp"]
    assert [(i.node_id, i.payer, round(i.usd, 9)) for i in gcp] == [("n2", "sender", 0.1)]
    assert cost.by_link == pytest.approx({("n0", "n1"): 0.2, ("n2", "n3"): 0.1})


def test_the_transfer_rule_charges_both_sides_only_where_a_cloud_says_so():
    a, b, eu = PLACES["aws-a"], PLACES["aws-b"], PLACES["aws-eu"]
    both = EGRESS.charges(a, b)
    assert [(c.payer, c.location, c.usd_per_gb) for c in both] == [(Payer.SENDER, a, 0.01), (Payer.RECEIVER, b, 0.01)]
    assert EGRESS.usd_per_gb(a, b) == pytest.approx(0.02)
    assert [c.payer for c in EGRESS.charges(a, eu)] == [Payer.SENDER]  # cross-region: egress only
    assert [c.payer for c in EGRESS.charges(PLACES["gcp-a"], a)] == [Payer.SENDER]  # ingress into AWS is free
    assert EGRESS.charges(PLACES["lab"], a) == ()  # on-prem uplinks are not billed per GB
    assert EGRESS.charges(a, a) == ()  # one zone: free


def test_storage_traffic_is_billed_by_whoever_sends_it(geotrain_home):
    # the storage is in aws/us-east-1: a GCP node's write is GCP egress, its read is AWS egress
    nodes = [("aws-a", "spot", 0.0, 0, 1, []), ("gcp-a", "spot", 0.0, 0, 1, [])]
    ledger = make_ledger(nodes, [], [(1, 10**9, True)], "aws/us-east-1")
    cost = run_cost(ledger, "run-p", at=T0 + 3600)
    storage = sorted((i.cloud, i.node_id, i.link, round(i.usd, 9)) for i in cost.items if i.kind is CostKind.STORAGE)
    gcp_out = EGRESS.rate(PLACES["gcp-a"], PLACES["aws-a"]).usd_per_gb
    aws_out = EGRESS.rate(PLACES["aws-a"], PLACES["gcp-a"]).usd_per_gb
    assert storage == [("aws", "n1", ("storage", "n1"), round(aws_out, 9)),
                       ("gcp", "n1", ("n1", "storage"), round(gcp_out, 9))]
    assert cost.storage_gb_written == pytest.approx(1.0) and cost.storage_gb_read == pytest.approx(2.0)
    assert Market.SPOT.value in cost.by_market
