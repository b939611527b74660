from __future__ import annotations

import pytest

from geotrain.errors import CatalogError, InputError
from geotrain.pricing.importers import FileFormat, import_offers
from geotrain.pricing.inventory import load_inventory

SKYPILOT = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
g4dn.xlarge,T4,1.0,4.0,16.0,"{'Gpus': [{'Name': 'T4'}]}",0.526,0.1578,us-east-1,use1-az1
g4dn.xlarge,T4,1.0,4.0,16.0,,0.526,,us-east-1,use1-az2
m5.xlarge,,,4.0,16.0,,0.192,0.07,us-east-1,use1-az1
,V100,2.0,,,,4.96,1.48,us-east-1,use1-az1
"""

INVENTORY = """
sites:
  - site: munich-lab
    continent: europe
    near_region: gcp/europe-west3
    uplink_gbps: 0.5
    machines:
      - instance_type: rtx8000-ws
        accelerator: RTX8000
        accelerator_count: 1
        count: 2
        vcpus: 16
        memory_gib: 128
        price_usd_per_hour: 0.12
      - instance_type: cpu-box
        count: 4
        vcpus: 32
        memory_gib: 64
"""


def test_skypilot_catalog_gives_spot_and_on_demand_offers(tmp_path):
    path = tmp_path / "vms.csv"
    path.write_text(SKYPILOT)
    result = import_offers(path)
    assert result.file_format == FileFormat.SKYPILOT
    table = result.table
    assert set(table["cloud"]) == {"aws"}  # inferred from the region names
    assert set(table["continent"]) == {"north_america"}
    assert len(table) == 5  # 2 + 1 for g4dn (az2 has no spot price), 2 for m5
    g4 = table[(table["zone"] == "use1-az1") & (table["instance_type"] == "g4dn.xlarge")]
    assert dict(zip(g4["market"], g4["price_usd_per_hour"])) == {"on_demand": 0.526, "spot": 0.1578}
    cpu = table[table["instance_type"] == "m5.xlarge"]
    assert cpu["accelerator"].isna().all() and (cpu["accelerator_count"] == 0).all()
    assert result.skipped == ("1 accelerator-only rows (no InstanceType)",)


def test_skypilot_cloud_can_be_given_and_unknown_regions_need_it(tmp_path):
    path = tmp_path / "vms.csv"
    path.write_text(SKYPILOT.replace("us-east-1", "moon-1"))
    with pytest.raises(InputError, match="--cloud"):
        import_offers(path)
    with pytest.raises(CatalogError, match="moon-1"):  # continent unknown even with the cloud given
        import_offers(path, cloud="aws")


def test_skypilot_bad_price_names_line(tmp_path):
    path = tmp_path / "vms.csv"
    path.write_text(SKYPILOT.replace("0.1578", "n/a"))
    with pytest.raises(CatalogError, match="line 2, column price_usd_per_hour: 'n/a' is not a number"):
        import_offers(path)


def test_real_skypilot_catalog_from_shared_data(shared_data):
    path = shared_data / "prices/skypilot-catalog-aws-gpu/aws_gpu_vms_skypilot_v8.csv"
    result = import_offers(path, cloud="aws")
    table = result.table
    assert {"spot", "on_demand"} <= set(table["market"])
    assert table["price_usd_per_hour"].gt(0).all()
    row = table[(table["instance_type"] == "g4dn.xlarge") & (table["zone"] == "afs1-az2") & (table["market"] == "spot")]
    assert row["price_usd_per_hour"].tolist() == [0.1399]


def test_inventory_becomes_owned_offers(tmp_path):
    path = tmp_path / "sites.yaml"
    path.write_text(INVENTORY)
    inventory = load_inventory(path)
    assert inventory.sites[0].near_region == "gcp/europe-west3"
    table = import_offers(path).table
    assert set(table["market"]) == {"owned"} and set(table["cloud"]) == {"onprem"}
    ws = table[table["instance_type"] == "rtx8000-ws"].iloc[0]
    assert ws["capacity_hint"] == 2 and ws["uplink_gbps"] == 0.5 and ws["interruptions_per_hour"] == 0
    assert ws["region"] == "munich-lab" and ws["continent"] == "europe"
    cpu = table[table["instance_type"] == "cpu-box"].iloc[0]
    assert cpu["accelerator_count"] == 0 and cpu["price_usd_per_hour"] == 0


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("count: 2", "count: 0"), "sites[0].machines[0].count: must be a whole number >= 1, got 0"),
        (("continent: europe", "continent: europa"), "sites[0].continent: 'europa' is not one of"),
        (("uplink_gbps: 0.5", "uplink_gbp: 0.5"), "sites[0].uplink_gbps: required field is missing"),
        (("vcpus: 16", "vcpus: many"), "sites[0].machines[0].vcpus: must be a number, got 'many'"),
        (("near_region: gcp/europe-west3", "near_region: europe-west3"), "not of the form cloud/region"),
    ],
)
def test_inventory_errors_name_the_field(tmp_path, change, expected):
    path = tmp_path / "sites.yaml"
    path.write_text(INVENTORY.replace(*change))
    with pytest.raises(CatalogError) as info:
        load_inventory(path)
    assert expected in str(info.value)


def test_inventory_unknown_field_suggests(tmp_path):
    path = tmp_path / "sites.yaml"
    path.write_text(INVENTORY.replace("price_usd_per_hour: 0.12", "price_usd_per_hr: 0.12"))
    with pytest.raises(CatalogError, match="did you mean 'price_usd_per_hour'"):
        load_inventory(path)


def test_unrecognised_header(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(CatalogError, match="cannot tell the format"):
        import_offers(path)
