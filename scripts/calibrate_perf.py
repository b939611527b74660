"""Refit the throughput model on Erben et al.'s measurements and write geotrain/perf/data/.

Writes:
- calibration_runs.csv: the measured runs (a copy of erben-calibration.csv, MIT) so that tests and
  the bench run without ../shared;
- compute_rates.csv: the measured single-node rates (the runs with one peer);
- calibration.json: the fitted Hivemind constants (geotrain.perf.calibration): per-workload
  efficiency, fixed cost per step, host factor, round overhead; the report says which are priors.

    python scripts/calibrate_perf.py [--data-dir ../shared/data]

Run scripts/build_network_data.py first if the network data changed: the fit uses it.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from geotrain.perf.calibration import fit_hivemind, load_runs  # noqa: E402
from geotrain.perf.network import NetworkModel  # noqa: E402
from geotrain.perf.workloads import WorkloadRegistry  # noqa: E402

OUT = REPO / "geotrain" / "perf" / "data"
SOURCE = "Erben et al. PVLDB 17(6) 2024, single-GPU baseline"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()
    source = args.data_dir / "erben-calibration.csv"
    if not source.exists():
        sys.exit(f"{source}: not found; pass --data-dir pointing at the shared data folder")
    text = source.read_text("utf-8")
    (OUT / "calibration_runs.csv").write_text(text)
    runs = load_runs(text)
    registry = WorkloadRegistry.bundled()

    with open(OUT / "compute_rates.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["workload", "kind", "accelerator", "accelerator_count", "samples_per_s", "estimated", "source"])
        for run in sorted((r for r in runs if r.peers == 1), key=lambda r: (r.workload, r.accelerator)):
            model, count = run.accelerator_model
            label = f"{SOURCE} ({run.accelerator}, {run.cloud})"
            writer.writerow([run.workload, registry.get(run.workload).kind, model, count, run.samples_per_s,
                             "false", label])

    workloads = {name: registry.get(name) for name in registry.names()}
    fit, report = fit_hivemind(runs, NetworkModel.bundled(), workloads)
    calibration = {
        "hivemind": {
            "efficiency": fit.efficiency,
            "unseen_step_s_per_gparam": fit.unseen_step_s_per_gparam,
            "round_floor_s": fit.round_floor_s,
            "per_peer_s": fit.per_peer_s,
            "per_gparam_s": fit.per_gparam_s,
            "step_s_per_gparam": fit.step_s_per_gparam,
            "host_vcpus": fit.host_vcpus,
            "host_exponent": fit.host_exponent,
            "unknown_vcpus": fit.unknown_vcpus,
        },
        "fit": report | {"source": "erben-calibration.csv (one-zone GC T4 and LambdaLabs A10 tables)"},
    }
    (OUT / "calibration.json").write_text(json.dumps(calibration, indent=2, sort_keys=True) + "\n")
    print(json.dumps(calibration, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
