"""Azure's VM series geotrain sells: which accelerator an ARM VM size carries, by its series ("" for the
CPU-only series a task without accelerators runs on)."""

from __future__ import annotations

import re

# VM series -> accelerator, derived from the bundled Azure rows of geotrain/pricing/data/offers.csv
# (instance_type -> accelerator there; names are geotrain's canonical ones). Each pattern is matched
# against the whole ARM size name. Sizes of other series (unnamed or fractional GPUs, other CPU series)
# are left out, as the bundled data leaves them out.
ACCELERATOR_BY_SERIES: tuple[tuple[str, str, str], ...] = (
    # (series, size-name pattern, accelerator)
    ("NCasT4_v3", r"Standard_NC\d+as_T4_v3", "T4"),
    ("NCv3", r"Standard_NC\d+r?s_v3", "V100"),
    ("NCadsA10_v4", r"Standard_NC\d+ads_A10_v4", "A10"),
    ("NCadsA100_v4", r"Standard_NC\d+ads_A100_v4", "A100-80GB"),
    ("NCadsH100_v5", r"Standard_NC\d+adi?s_H100_v5", "H100"),
    ("NCCadsH100_v5", r"Standard_NCC\d+ads_H100_v5", "H100"),
    ("NDv2", r"Standard_ND\d+rs_v2", "V100-32GB"),
    ("NDasrA100_v4", r"Standard_ND\d+asr_v4", "A100"),
    ("NDamsrA100_v4", r"Standard_ND\d+amsr_A100_v4", "A100-80GB"),
    ("NDisrH100_v5", r"Standard_ND\d+isr_H100_v5", "H100"),
    ("NDisrH200_v5", r"Standard_ND\d+isr_H200_v5", "H200"),
    ("NDisrMI300X_v5", r"Standard_ND\d+isr_MI300X_v5", "MI300X"),
    ("NVv3", r"Standard_NV\d+s_v3", "M60"),
    # NV4/8/16as_v4 are 1/8, 1/4 and 1/2 of an MI25 (Microsoft's NVv4 table): fractional, left out
    ("NVasv4", r"Standard_NV32as_v4", "MI25"),
    # NV6/12/18ads_A10_v5 are 1/6, 1/3 and 1/2 of an A10: fractional, left out as in the bundled data
    ("NVadsA10_v5", r"Standard_NV(?:36|72)adm?s_A10_v5", "A10"),
    # CPU-only: general purpose (D), memory (E) and compute (F) series of the bundled catalog
    ("Dsv3", r"Standard_D\d+s_v3", ""),
    ("Dsv5", r"Standard_D\d+s_v5", ""),
    ("Dasv5", r"Standard_D\d+as_v5", ""),
    ("Esv5", r"Standard_E\d+s_v5", ""),
    ("Fsv2", r"Standard_F\d+s_v2", ""),
)
_SERIES = tuple((series, re.compile(pattern, re.IGNORECASE), accelerator)
                for series, pattern, accelerator in ACCELERATOR_BY_SERIES)


def accelerator_of(size: str) -> str | None:
    """The accelerator of an ARM VM size by its series (:data:`ACCELERATOR_BY_SERIES`); None: not mapped."""
    for _, pattern, accelerator in _SERIES:
        if pattern.fullmatch(size):
            return accelerator
    return None
