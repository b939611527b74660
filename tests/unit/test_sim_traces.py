"""Trace loaders (geotrain.sim.traces): each format's convention on tiny files, the shared data, bad inputs."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest

from geotrain.errors import InputError
from geotrain.sim.market import UNLIMITED, align
from geotrain.sim.traces import FORMATS, load_traces

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data absent")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_cbl_json_single_node_one_is_unavailable(tmp_path):
    p = tmp_path / "us-east-1a_v100_1.json"
    p.write_text(json.dumps({"metadata": {"gap_seconds": 60, "price_info": {"on_demand_price": 3.06}},
                             "data": [0, 1, 1, 0]}))
    [z] = load_traces([p])
    assert z.key == "aws/us-east-1/us-east-1a/p3.2xlarge" and z.location.continent == "north_america"
    assert z.available.tolist() == [UNLIMITED, 0, 0, UNLIMITED] and z.flag
    assert z.times_s.tolist() == [0, 60, 120, 180] and z.on_demand_usd_per_hour == 3.06
    assert z.start.year == 2000 and z.accelerator == "V100" and z.accelerator_count == 1
    assert z.source == f"{p} (cbl-json)"


def test_cbl_json_counts_prices_and_start(tmp_path):
    d = tmp_path / "16-node" / "aws-08-27-2023"
    d.mkdir(parents=True)
    p = d / "us-west-2a_v100_1.json"
    p.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 16, 3], "prices": [1, 2, 3, 4]}))
    [z] = load_traces([p])
    assert z.available.tolist() == [0, 1, 16, 3]  # counts stay counts
    assert z.spot_usd_per_hour.tolist() == [1, 2, 3, 4]
    assert z.start.isoformat() == "2023-08-27T00:00:00+00:00"
    q = tmp_path / "x.json"  # SkyNomad converted format: zone and start in the metadata
    q.write_text(json.dumps({"metadata": {"gap_seconds": 600, "zone": "us-central1-a", "start_time":
                                          "2025-10-04T00:10:00+00:00", "price_info": {"price": 18.98}},
                             "data": [0, 1]}))
    [z] = load_traces([q], instance_type="a3-highgpu-8g")
    assert z.key == "gcp/us-central1/us-central1-a/a3-highgpu-8g" and z.start.hour == 0 and z.start.minute == 10
    assert z.spot_usd_per_hour.tolist() == [18.98, 18.98] and z.available.tolist() == [UNLIMITED, 0]


def test_skynomad_csv_one_is_available_and_prices(tmp_path):
    d = tmp_path / "real"
    d.mkdir()
    with gzip.open(d / "us-east-2a_v100_1.csv.gz", "wt") as f:
        f.write("date,availability\n2023-02-15 22:08:16,1\n2023-02-15 22:11:31,0\n2023-02-15 22:14:46,1\n")
    [z] = load_traces([d])
    assert z.available.tolist() == [UNLIMITED, 0, UNLIMITED] and z.times_s.tolist() == [0, 195, 390]
    assert z.spot_usd_per_hour is None and z.start.isoformat() == "2023-02-15T22:08:16+00:00"
    write(tmp_path / "v100_spot_prices.json", json.dumps({"us-east-2a_v100_1": [0.9, 1.0, 1.1]}))
    [z] = load_traces([d])  # found at ../v100_spot_prices.json
    assert z.spot_usd_per_hour.tolist() == [0.9, 1.0, 1.1]
    other = write(tmp_path / "p.json", json.dumps({"us-east-2a_v100_1": [0.9, 1.0]}))
    with pytest.raises(InputError, match="2 prices for the 3 rows"):
        load_traces([d, other], kind=None)
    nomatch = write(tmp_path / "q.json", json.dumps({"us-west-2a_v100_1": [1.0]}))
    with pytest.raises(InputError, match="match no SkyNomad CSV"):
        load_traces([d / "us-east-2a_v100_1.csv.gz", nomatch])


def test_gcp_probes_counts_and_nan_prices(tmp_path):
    p = write(tmp_path / "probes.csv",
              "scheduled_at,zone,instances_requested,instances_created,capacity_exhausted_detected,"
              "gpu_spot_price_usd_per_gpu_hour\n"
              "2025-10-03T17:10:00-07:00,us-west1-b,16,0,1,\n"
              "2025-10-03T17:10:00-07:00,asia-south2-b,16,16,0,2.25\n"
              "2025-10-03T17:20:00-07:00,us-west1-b,16,3,1,2.5\n")
    a, b = load_traces([p])
    assert a.key == "gcp/asia-south2/asia-south2-b/a3-highgpu-1g" and a.available.tolist() == [16]
    assert b.available.tolist() == [0, 3] and np.isnan(b.spot_usd_per_hour[0]) and b.spot_usd_per_hour[1] == 2.5
    assert b.start.isoformat() == "2025-10-04T00:10:00+00:00" and b.times_s.tolist() == [0, 600]
    assert b.accelerator == "H100"


def test_bamboo_parcae_gcloud(tmp_path):
    bam = write(tmp_path / "p3-trace.csv", "0,add,node1\n0,add,node2\n60000,remove,node1\n120000,add,node3\n")
    with pytest.raises(InputError, match="zone="):
        load_traces([bam])
    [z] = load_traces([bam], zone="aws/us-east-1/us-east-1a")
    assert z.instance_type == "p3.2xlarge" and z.available.tolist() == [2, 1, 2] and z.times_s.tolist() == [0, 60, 120]
    g4 = write(tmp_path / "g4dn-trace.csv", "0,add,node1\n")
    with pytest.raises(InputError, match="instance_type="):
        load_traces([g4], zone="aws/us-east-1/us-east-1a")
    par = write(tmp_path / "p3.csv", "0,1\n0,2\n30000,5\n")
    [z] = load_traces([par], zone="aws/us-west-2/us-west-2a")
    assert z.available.tolist() == [2, 5] and z.times_s.tolist() == [0, 30]
    gc = write(tmp_path / "v100x1-east1c.txt",
               "2021-12-10, 13:07:45, 80\n2021-12-10, 13:08:45, 80\n2021-12-10, 13:08:45, 70\n2021-12-10, 13:07:50, 75\n")
    [z] = load_traces([gc])
    assert z.key == "gcp/us-east1/us-east1-c/n1-standard-8+V100"
    assert z.available.tolist() == [80, 75, 70] and z.times_s.tolist() == [0, 5, 60]


def test_price_histories(tmp_path):
    aws = write(tmp_path / "aws.csv", "region,availability_zone,instance_type,product_description,"
                "spot_price_usd_per_hour,timestamp\n"
                "us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,0.9,2020-01-01T01:00:00.000Z\n"
                "us-east-1,us-east-1a,p3.2xlarge,Windows,5.0,2020-01-01T00:30:00.000Z\n"
                "us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,0.8,2020-01-01T00:00:00.000Z\n")
    [z] = load_traces([aws])
    assert z.spot_usd_per_hour.tolist() == [0.8, 0.9] and z.available.tolist() == [UNLIMITED] * 2
    co = write(tmp_path / "co.csv", "effective_from_snapshot,snapshot_commit,cloud,region,instance_type,"
               "ondemand_usd_per_hour,spot_usd_per_hour\n"
               "2023-02-20,a,aws,us-east-1,p3.2xlarge,3.06,0.9\n2023-06-06,b,aws,us-east-1,p3.2xlarge,3.2,\n"
               "2023-02-20,a,aws,us-east-1,g5.xlarge,1.0,0.3\n")
    traces = load_traces([co], instance_type="p3.2xlarge")
    [z] = traces
    assert z.location.zone == "" and z.on_demand_usd_per_hour == 3.2  # the last on-demand
    assert z.available.tolist() == [UNLIMITED, 0] and np.isnan(z.spot_usd_per_hour[1])
    gp = write(tmp_path / "gp.csv", "effective_from_snapshot,instance_type,region,ondemand_usd_per_hour,"
               "spot_usd_per_hour\n2023-05-08,a2-highgpu-1g,us-central1,3.67,1.1\n2023-06-08,a2-highgpu-1g,us-central1,3.67,1.0\n")
    [z] = load_traces([gp])
    assert z.key == "gcp/us-central1/a2-highgpu-1g" and z.spot_usd_per_hour.tolist() == [1.1, 1.0]


def test_generic_counts_flags_and_examples(tmp_path):
    p = write(tmp_path / "g.csv", "time,zone,instance_type,available,spot_usd_per_hour,on_demand_usd_per_hour\n"
              "60,aws/us-east-1/us-east-1a,p3.2xlarge,1,0.9,\n0,aws/us-east-1/us-east-1a,p3.2xlarge,no,,3.06\n"
              "1970-01-01T00:02:00Z,aws/us-east-1/us-east-1a,p3.2xlarge,true,1.0,3.06\n")
    [z] = load_traces([p])
    assert z.available.tolist() == [0, 1, UNLIMITED]  # 1 is one node
    assert z.times_s.tolist() == [0, 60, 120] and z.on_demand_usd_per_hour == 3.06
    assert np.isnan(z.spot_usd_per_hour[0]) and z.spot_usd_per_hour[2] == 1.0
    example = load_traces([EXAMPLES])
    assert {z.key for z in example} == {"aws/us-east-1/us-east-1a/p3.2xlarge",
                                        "gcp/us-central1/us-central1-a/a2-highgpu-1g",
                                        "azure/eastus/Standard_NC24ads_A100_v4"}
    market = align(example, tick_s=3600)  # the output fits align()
    assert market.ticks == 4 and market.tick_s == 3600
    assert align(example).tick_s == 600  # by default a policy looks at least every 10 minutes


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="unknown trace format"):
        load_traces([write(tmp_path / "x.csv", "a,b,c\n1,2,3\n")])
    with pytest.raises(InputError, match="unknown trace format"):
        load_traces([tmp_path], kind="nope")
    with pytest.raises(InputError, match="no such file"):
        load_traces([tmp_path / "missing.csv"])
    bad = write(tmp_path / "g.csv", "time,zone,instance_type,available\n0,aws/us-east-1/us-east-1a,p3.2xlarge,2\n"
                "60,aws/us-east-1/us-east-1a,p3.2xlarge,many\n")
    with pytest.raises(InputError, match=r"g\.csv:3: available 'many'"):
        load_traces([bad])
    od = write(tmp_path / "od.csv", "time,zone,instance_type,available,on_demand_usd_per_hour\n"
               "0,aws/us-east-1/us-east-1a,p3.2xlarge,2,3.06\n60,aws/us-east-1/us-east-1a,p3.2xlarge,2,3.2\n")
    with pytest.raises(InputError, match="od.csv:3: .*differs"):
        load_traces([od])
    bam = write(tmp_path / "p3-trace.csv", "0,add,node1\n5,explode,node1\n")
    with pytest.raises(InputError, match=r"p3-trace\.csv:2: expected"):
        load_traces([bam], zone="aws/us-east-1/us-east-1a")
    nozone = tmp_path / "trace.json"
    nozone.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [0, 1]}))
    with pytest.raises(InputError, match="zone="):
        load_traces([nozone], instance_type="p3.2xlarge")
    region = write(tmp_path / "r.csv", "time,zone,instance_type,available\n0,aws/mars-1/mars-1a,p3.2xlarge,2\n")
    with pytest.raises(InputError, match="r.csv:2: .*mars-1"):
        load_traces([region])
    prices = tmp_path / "cbl_prices.json"
    prices.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [0, 1], "prices": [1.0]}))
    with pytest.raises(InputError, match="1 prices for 2 ticks"):
        load_traces([prices], zone="aws/us-east-1/us-east-1a", instance_type="p3.2xlarge")
    assert "generic" in FORMATS and len(FORMATS) == 11


@needs_data
def test_shared_json_and_csv():
    t = time.perf_counter()
    js = load_traces([DATA / "spot-traces-json"])
    assert time.perf_counter() - t < 1.0
    assert len(js) == 9 and all(len(z.times_s) == 20158 and np.all(np.diff(z.times_s) == 195) for z in js)
    assert all(z.start.isoformat() == "2023-02-15T00:00:00+00:00" and z.flag for z in js)
    csvs = load_traces([DATA / "skynomad" / "data" / "real_availability_2023-02-15"])
    assert len(csvs) == 9 and all(len(z.times_s) == 20158 and z.spot_usd_per_hour is not None for z in csvs)
    by_key = {z.key: z for z in csvs}
    assert by_key["aws/us-east-1/us-east-1a/p3.2xlarge"].spot_usd_per_hour.max() == 1.8464  # archive maximum
    for z in js:
        raw = json.loads((DATA / "spot-traces-json" / f"{z.location.zone}_v100_1.json").read_text())["data"]
        other = by_key[z.key]
        # The raw values of the two files are identical, tick for tick (not inverted): read by each format's
        # documented convention they give complementary availability; the replays use the CSVs, whose
        # reading (floor-priced zones mostly available) fits the prices (see geotrain.sim.traces)
        assert np.array_equal(np.asarray(raw) == 0, z.available == UNLIMITED)
        assert np.array_equal(np.asarray(raw) == 1, other.available == UNLIMITED)


@needs_data
def test_shared_gcp_probes():
    t = time.perf_counter()
    zones = load_traces([DATA / "skynomad" / "gcp_h100_16x_probe_counts.csv"])
    assert time.perf_counter() - t < 1.0
    assert len(zones) == 13
    p = {z.location.zone: float(np.mean(z.available >= 1)) for z in zones}
    assert p["us-west1-b"] == pytest.approx(0.24, abs=0.01) and p["asia-south2-b"] == pytest.approx(1.0, abs=0.005)
    market = align(zones[:2])
    assert market.tick_s == pytest.approx(600, abs=0.01) and market.ticks > 2000  # probe times carry µs


@needs_data
def test_shared_pools_and_prices():
    bam = DATA / "bamboo-parcae-traces"
    [p3] = load_traces([bam / "bamboo_traces" / "p3-trace.csv"], zone="aws/us-east-1/us-east-1a")
    [par] = load_traces([bam / "parcae_traces" / "aws" / "traces" / "p3.csv"], zone="aws/us-east-1/us-east-1a")
    assert p3.available.max() == 32 and np.array_equal(p3.available, par.available)
    assert np.array_equal(p3.times_s, par.times_s)
    gc = load_traces([bam / "bamboo_traces" / "gcloud"])
    assert [z.key for z in gc] == ["gcp/us-east1/us-east1-b/a2-highgpu-1g", "gcp/us-east1/us-east1-c/n1-standard-8+V100"]
    aws = load_traces([DATA / "training-on-a-dime-2020" / "aws_spot_price_history_p2_p3_2019-12_to_2020-03.csv"],
                      instance_type="p3.2xlarge")
    assert aws and all(z.instance_type == "p3.2xlarge" for z in aws)
    gp = load_traces([DATA / "gcp-pricing-history" / "gcp_gpu_vm_price_changes.csv"], instance_type="a3-highgpu-8g",
                     zone="gcp/us-central1")
    assert len(gp) == 1 and gp[0].on_demand_usd_per_hour == pytest.approx(88.49, abs=0.01)
