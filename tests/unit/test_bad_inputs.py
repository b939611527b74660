"""No input reaches an internal error: generated bad specs, catalogs, on-prem inventories, plan files,
preemption traces and flag values all end with exit 2 and one line (or, when a mutation happens to be
valid, succeed), never with a traceback, and a refused input writes nothing under GEOTRAIN_HOME.
``bench/bad_inputs.py`` runs the same generators a thousand times and more per kind."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.badinputs import case_for, problems, run_case
from tests.helpers import examples

KINDS = ("spec", "catalog", "sites", "plan", "trace", "flags")


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=examples(25, 100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_generated_bad_inputs_end_as_input_errors(kind, data, tmp_path):
    case = case_for(kind, data.draw)
    where = tmp_path / uuid.uuid4().hex[:8]
    outcome = run_case(case, where / "in", where / "home")
    assert problems(case, outcome) == [], (case.args, outcome.stderr[-500:])


def test_a_fifo_and_a_device_are_refused_without_waiting(tmp_path):
    import os

    from tests.badinputs import Case

    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        outcome = run_case(Case("spec", ["plan", str(path)], {}), tmp_path / "in", tmp_path / "home")
        assert outcome.exit_code == 2 and "is not a regular file" in outcome.stderr


def test_a_plan_whose_offer_fields_carry_spaces_loads_as_the_trimmed_offer(tmp_path):
    import json

    from tests.badinputs import Case, valid_plan

    plan = valid_plan()
    plan["items"][0]["offer"]["zone"] = " "
    plan["items"][0]["offer"]["cloud"] = " AWS "
    outcome = run_case(Case("plan", ["launch", "{dir}/plan.json", "--train-workload", "no-such-workload"],
                            {"plan.json": json.dumps(plan)}), tmp_path / "in", tmp_path / "home")
    assert outcome.exit_code == 2 and "--train-workload" in outcome.stderr, outcome.stderr
