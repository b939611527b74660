from __future__ import annotations

import pandas as pd
import pytest

from geotrain.clouds.geography import continent_of
from geotrain.errors import CatalogError
from geotrain.pricing.csvfile import read_csv_strings
from geotrain.pricing.schema import COLUMN_NAMES, KEY_COLUMNS, parse_offers, to_csv_bytes

HEADER = "cloud,region,zone,instance_type,accelerator,accelerator_count,vcpus,memory_gib,market,price_usd_per_hour,observed_at"
GOOD = [
    "aws,us-east-1,use1-az1,g4dn.xlarge,T4,1,4,16,spot,0.1578,2026-01-21T00:00:00Z",
    "aws,us-east-1,use1-az1,g4dn.xlarge,T4,1,4,16,on_demand,0.526,2026-01-21T00:00:00Z",
    "gcp,europe-west4,europe-west4-a,n1-standard-8+T4,T4,1,8,30,spot,0.3049,2026-05-20T00:00:00Z",
]


def write(tmp_path, lines, name="offers.csv", encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes("\n".join(lines).encode(encoding) + b"\n")
    return path


def load(path):
    return parse_offers(read_csv_strings(path), str(path), continent_of=continent_of, defaults={"source": path.name})


def error_of(tmp_path, lines, **kw):
    with pytest.raises(CatalogError) as info:
        load(write(tmp_path, lines, **kw))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_good_file_parses_with_dtypes_and_filled_continent(tmp_path):
    table = load(write(tmp_path, [HEADER, *GOOD]))
    assert list(table.columns) == list(COLUMN_NAMES)
    assert len(table) == 3
    assert table["price_usd_per_hour"].dtype == "float64"
    assert str(table["observed_at"].dtype).startswith("datetime64")
    assert set(table["continent"]) == {"north_america", "europe"}
    # canonical order: sorted by key
    keys = table[list(KEY_COLUMNS)].astype(str).values.tolist()
    assert keys == sorted(keys)


def test_missing_column_is_named(tmp_path):
    header = HEADER.replace(",market", "")
    rows = [",".join(r.split(",")[:8] + r.split(",")[9:]) for r in GOOD]
    message = error_of(tmp_path, [header, *rows])
    assert "missing column market" in message and "offers.csv" in message


def test_negative_price_names_line_and_column(tmp_path):
    bad = GOOD[1].replace("0.526", "-0.5")
    message = error_of(tmp_path, [HEADER, GOOD[0], bad])
    assert "line 3" in message and "price_usd_per_hour" in message and "below the minimum" in message


def test_non_numeric_price(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0].replace("0.1578", "cheap")])
    assert "line 2, column price_usd_per_hour: 'cheap' is not a number" in message


def test_infinite_price_is_rejected(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0].replace("0.1578", "inf")])
    assert "price_usd_per_hour" in message


def test_unknown_market_lists_choices(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0].replace(",spot,", ",preemptible,")])
    assert "'preemptible' is not one of spot, on_demand, owned" in message


def test_duplicate_key_names_both_lines(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0], GOOD[1], GOOD[0].replace("0.1578", "0.2")])
    assert "lines 2, 4 have the same key" in message


def test_empty_file(tmp_path):
    message = error_of(tmp_path, [""])
    assert "empty" in message


def test_header_only_has_no_offers(tmp_path):
    assert "no offers" in error_of(tmp_path, [HEADER])


def test_wrong_encoding(tmp_path):
    lines = [HEADER, GOOD[0].replace("g4dn.xlarge", "g4dn.xlarge-é")]
    message = error_of(tmp_path, lines, encoding="latin-1")
    assert "not UTF-8" in message


def test_ragged_row(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0] + ",extra"])
    assert "line 2: 12 fields, but the header has 11" in message


def test_accelerator_without_count(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0].replace(",T4,1,", ",T4,0,")])
    assert "accelerator_count" in message


def test_unknown_region_needs_a_continent(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0].replace("us-east-1,", "mars-north-1,")])
    assert "mars-north-1" in message and "continent" in message


def test_bad_date(tmp_path):
    message = error_of(tmp_path, [HEADER, GOOD[0].replace("2026-01-21T00:00:00Z", "yesterday")])
    assert "observed_at" in message and "ISO 8601" in message


def test_unknown_column(tmp_path):
    message = error_of(tmp_path, [HEADER + ",colour", GOOD[0] + ",red"])
    assert "unknown column colour" in message


def test_text_round_trip_is_exact(tmp_path):
    table = load(write(tmp_path, [HEADER, *GOOD]))
    again_path = tmp_path / "again.csv"
    again_path.write_bytes(to_csv_bytes(table))
    again = load(again_path)
    pd.testing.assert_frame_equal(table, again)
    assert to_csv_bytes(again) == to_csv_bytes(table)
