"""Generated bad inputs for every kind of file and flag a user gives geotrain, and the check that each
one ends the way an input error must: exit 2 with one line on stderr, no traceback, no internal error,
and nothing written under GEOTRAIN_HOME (a mutation that happens to be valid may succeed, exit 0, or
be infeasible, exit 3).

Used by ``tests/unit/test_bad_inputs.py`` (a few dozen cases per kind in ``make test``) and by
``bench/bad_inputs.py`` (a thousand and more per kind).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
NODES = "aws/usw2-az1/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"

NASTY: list[Any] = [
    None, "", " ", "x", "-1", "1e400", "nan", "inf", -1, 0, 1, 0.5, -0.5, 1e308, -1e308, 10**30, float("nan"),
    float("inf"), float("-inf"), True, False, [], {}, [1, 2], {"a": 1}, "🙂" * 3, "a" * 5000, "../../etc",
    "aws", "spot", "T4", [[[[[[[[[[1]]]]]]]]]], {"sites": []}, "2026-13-45", "0x10",
]

SPEC = {
    "name": "bad", "workload": "tiny-cnn", "objective": "min_cost", "strategy": "allreduce",
    "target_samples_per_s": 100, "budget_usd_per_hour": 20, "total_samples": 1000000, "deadline_h": 24,
    "sync": {"local_steps": 8, "precision": "fp16", "micro_batches": 1, "target_batch_size": 4096},
    "constraints": {"clouds": ["aws", "gcp"], "regions": ["us-east-1"], "continents": ["north_america"],
                    "max_regions": 2, "max_nodes": 8, "max_nodes_per_zone": 4, "max_zone_share": 0.5,
                    "max_spot_share": 1.0, "spot_only": False, "accelerators": ["T4"], "quotas": {"aws": 16}},
    "dataset": {"cloud": "gcp", "region": "us-central1", "size_gib": 10, "samples": 100000, "reads_per_sample": 1},
    "checkpoint_url": "/tmp/ckpt",
}
SITES = yaml.safe_load((REPO / "examples" / "sites.yaml").read_text())
TRACE = [{"at_step": 5, "notice_s": 1}, {"at_s": 2.5, "node": 0}, {"during_checkpoint": True, "at_step": 3},
         {"fault": "capacity", "scope": "aws/us-east-1", "after": 1, "times": 2}]
CATALOG_HEADER = ["cloud", "region", "zone", "continent", "instance_type", "accelerator", "accelerator_count", "vcpus",
                  "memory_gib", "market", "price_usd_per_hour", "capacity_hint", "interruption_band",
                  "interruptions_per_hour", "availability", "uplink_gbps", "observed_at", "source"]
CATALOG_ROW = ["aws", "us-east-1", "use1-az1", "north_america", "g4dn.xlarge", "T4", "1", "4", "16", "spot", "0.2",
               "3", "<5%", "0.01", "0.9", "", "2026-05-20T00:00:00Z", "test"]


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in a nested document (keys and list indices)."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any, how: str) -> Any:
    if not path:
        return value if how == "set" else doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if how == "delete":
        del parent[key]
    elif how == "rename" and isinstance(parent, dict):
        parent[f"{key}_typo"] = parent.pop(key)
    else:
        parent[key] = value
    return doc


@st.composite
def mutated(draw, base: Any) -> Any:
    """``base`` with one to three values replaced, deleted or renamed."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["set", "set", "set", "delete", "rename"])) if path else "set"
        value = draw(st.sampled_from(NASTY))
        try:
            doc = _set(doc, path, copy.deepcopy(value), how)
        except (KeyError, IndexError, TypeError):
            pass
    return doc


@st.composite
def text_damage(draw, text: str) -> str:
    """The text of a valid file, cut, doubled in places, or sprinkled with odd characters."""
    how = draw(st.sampled_from(["cut", "repeat", "insert", "bytes", "keep"]))
    if how == "keep" or not text:
        return text
    at = draw(st.integers(0, len(text)))
    if how == "cut":
        return text[:at]
    if how == "repeat":
        return text[:at] + text[max(0, at - 40):at] + text[at:]
    if how == "insert":
        return text[:at] + draw(st.sampled_from([":", "{", "[", "\"", ",", "\t", "\x00", "- ", "\n  "])) + text[at:]
    return text[:at] + draw(st.text(min_size=1, max_size=20)) + text[at:]


def dump_yaml(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return json.dumps(doc, default=str)


def dump_json(doc: Any) -> str:
    return json.dumps(doc, default=str, allow_nan=True)


def dump_csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


@st.composite
def catalog_text(draw) -> str:
    header, row = list(CATALOG_HEADER), list(CATALOG_ROW)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, min(len(row), len(header)) - 1))
        how = draw(st.sampled_from(["value", "value", "drop column", "extra field", "header"]))
        value = str(draw(st.sampled_from(NASTY)))
        if how == "value":
            row[i] = value
        elif how == "drop column" and len(header) > 1:
            del header[i]
            del row[i]
        elif how == "extra field":
            row.append(value)
        else:
            header[i] = value
    return draw(text_damage(dump_csv([header, row])))


FLAG_SETS: dict[str, list[str]] = {
    "plan": ["--target-sps", "--budget", "--samples", "--deadline", "--max-regions", "--max-nodes", "--max-per-zone",
             "--zone-share", "--spot-share", "--tbs", "--local-steps", "--accumulation-steps", "--precision",
             "--micro-batches", "--recovery-min", "--time-limit", "--strategy", "--objective", "--quota",
             "--clouds", "--continents", "--backend", "--provider"],
    "launch": ["--steps", "--checkpoint-every", "--preempt-rate", "--preempt-at", "--notice", "--block-min",
               "--max-restarts", "--max-spend-usd", "--seed", "--sync", "--checkpoint-region", "--provider"],
    "estimate": ["--tbs", "--local-steps", "--accumulation-steps", "--precision", "--micro-batches", "--strategy"],
    "catalog list": ["--max-price", "--limit", "--market", "--continent"],
}


@dataclass(frozen=True)
class Case:
    kind: str
    args: list[str]  # the command line after `geotrain`
    files: dict[str, str]  # name -> content, written into a fresh folder first


def case_for(kind: str, draw) -> Case:  # noqa: ANN001
    """One generated case of ``kind`` (spec, catalog, sites, plan, trace, flags)."""
    if kind == "spec":
        text = dump_yaml(draw(mutated(SPEC))) if draw(st.booleans()) else draw(text_damage(dump_yaml(SPEC)))
        return Case(kind, ["plan", "{dir}/job.yaml", "--provider", "local", "--nodes", NODES], {"job.yaml": text})
    if kind == "catalog":
        return Case(kind, ["catalog", "import", "{dir}/offers.csv"], {"offers.csv": draw(catalog_text())})
    if kind == "sites":
        text = dump_yaml(draw(mutated(SITES))) if draw(st.booleans()) else draw(text_damage(dump_yaml(SITES)))
        return Case(kind, ["catalog", "import", "{dir}/sites.yaml", "--format", "inventory"], {"sites.yaml": text})
    if kind == "plan":
        text = dump_json(draw(mutated(valid_plan()))) if draw(st.booleans()) else draw(text_damage(
            dump_json(valid_plan())))
        return Case(kind, ["launch", "{dir}/plan.json", "--train-workload", "no-such-workload"], {"plan.json": text})
    if kind == "trace":
        text = dump_yaml(draw(mutated(TRACE))) if draw(st.booleans()) else draw(text_damage(dump_yaml(TRACE)))
        return Case(kind, ["launch", "{dir}/plan.json", "--preempt-trace", "{dir}/trace.yaml", "--train-workload",
                           "no-such-workload"], {"plan.json": dump_json(valid_plan()), "trace.yaml": text})
    command = draw(st.sampled_from(sorted(FLAG_SETS)))
    flags = draw(st.lists(st.sampled_from(FLAG_SETS[command]), min_size=1, max_size=3, unique=True))
    args = command.split()
    for flag in flags:
        args += [flag, str(draw(st.sampled_from(NASTY)))]
    if command == "plan":
        args += ["--workload", "tiny-cnn", "--provider", "local", "--nodes", NODES]
    elif command == "launch":
        args += ["{dir}/plan.json", "--train-workload", "no-such-workload"]
    elif command == "estimate":
        args += ["--workload", "tiny-cnn", "--nodes", NODES]
    return Case("flags", args, {"plan.json": dump_json(valid_plan())})


_PLAN: dict | None = None


def valid_plan() -> dict:
    global _PLAN
    if _PLAN is None:
        from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
        from geotrain.planning.planfile import plan_to_dict
        from geotrain.planning.planner import PlanOptions, plan_for_nodes
        from geotrain.pricing.snapshot import bundled_snapshot

        job = JobSpec("bad", "tiny-cnn", Objective.MIN_COST, target_samples_per_s=10,
                      sync=SyncSettings(SyncStrategyName.ALLREDUCE))
        _PLAN = json.loads(json.dumps(plan_to_dict(plan_for_nodes(
            job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0, provider="local")))))
    return copy.deepcopy(_PLAN)


def files_under(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()} if home.exists() else set()


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    stderr: str
    wrote: set[str]


def run_case(case: Case, workdir: Path, home: Path) -> Outcome:
    from typer.testing import CliRunner

    from geotrain.cli import app

    workdir.mkdir(parents=True, exist_ok=True)
    for name, content in case.files.items():
        (workdir / name).write_text(content, encoding="utf-8", errors="surrogatepass")
    args = [a.replace("{dir}", str(workdir)) for a in case.args]
    before = files_under(home)
    old = os.environ.get("GEOTRAIN_HOME")
    os.environ["GEOTRAIN_HOME"] = str(home)
    try:
        result = CliRunner().invoke(app, args, catch_exceptions=True)
    finally:
        if old is None:
            os.environ.pop("GEOTRAIN_HOME", None)
        else:
            os.environ["GEOTRAIN_HOME"] = old
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: {type(result.exception).__name__}: {result.exception}") from result.exception
    return Outcome(result.exit_code, result.stderr, files_under(home) - before)


def problems(case: Case, outcome: Outcome) -> list[str]:
    """What is wrong with how ``case`` ended (empty: it ended as an input error must)."""
    out = []
    if outcome.exit_code not in (0, 2, 3):
        out.append(f"exit {outcome.exit_code}")
    if "Traceback" in outcome.stderr or "internal error" in outcome.stderr:
        out.append("an internal error or a traceback")
    if outcome.exit_code == 2:
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        if len(lines) != 1 or not lines[0].startswith("error: "):
            out.append(f"{len(lines)} lines on stderr")
    if outcome.exit_code != 0 and outcome.wrote:
        out.append(f"wrote {sorted(outcome.wrote)[:3]}")
    return out
