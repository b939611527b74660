"""Read a CSV file of strings, keeping the file line each row came from (for error messages)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd

from geotrain.errors import CatalogError
from geotrain.specfile import read_text


def read_csv_strings(path: Path) -> pd.DataFrame:
    """All cells as str, indexed by the line number where each record starts (header = line 1)."""
    return parse_csv_text(read_text(path, CatalogError), str(path))


def parse_csv_text(text: str, origin: str) -> pd.DataFrame:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise CatalogError(f"{origin}: the file is empty") from None
    except csv.Error as exc:
        raise CatalogError(f"{origin}: line 1: not valid CSV ({exc})") from exc
    header = [name.strip() for name in header]
    if not any(header):
        raise CatalogError(f"{origin}: line 1: the header is empty")
    duplicated = sorted({name for name in header if header.count(name) > 1})
    if duplicated:
        raise CatalogError(f"{origin}: line 1: column {', '.join(duplicated)} appears more than once")
    rows: list[list[str]] = []
    lines: list[int] = []
    start = reader.line_num + 1
    try:
        for record in reader:
            if not record or (len(record) == 1 and not record[0].strip()):
                start = reader.line_num + 1
                continue
            if len(record) != len(header):
                raise CatalogError(
                    f"{origin}: line {start}: {len(record)} fields, but the header has {len(header)}"
                )
            rows.append(record)
            lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise CatalogError(f"{origin}: line {reader.line_num}: not valid CSV ({exc})") from exc
    return pd.DataFrame(rows, columns=header, index=pd.Index(lines, name="line"), dtype="string")
