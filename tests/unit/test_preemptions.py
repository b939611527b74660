"""Injected preemption schedules: --preempt-at, --preempt-trace files, the Poisson clock."""

from __future__ import annotations

import statistics

import pytest

from geotrain.errors import InputError
from geotrain.providers.faults import Fault, FaultKind
from geotrain.launcher.preemptions import (
    PreemptionEvent,
    PreemptionSchedule,
    RateClock,
    load_trace,
    parse_times,
    schedule_from_dict,
)


def test_preempt_at_parses_seconds_and_rejects_bad_values():
    assert parse_times("4, 10,16.5") == (PreemptionEvent(at_s=4.0), PreemptionEvent(at_s=10.0),
                                         PreemptionEvent(at_s=16.5))
    with pytest.raises(InputError, match="'ten' is not a number"):
        parse_times("4,ten")
    for bad in ("-1", "nan", "inf", "1e400"):
        with pytest.raises(InputError, match="is not a number of seconds from 0"):
            parse_times(bad)


def test_csv_trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("at_s,node,notice_s\n5,1,\n12,node-abc,30\n")
    assert load_trace(path) == ((PreemptionEvent(at_s=5.0, node=1),
                                 PreemptionEvent(at_s=12.0, node="node-abc", notice_s=30.0)), ())
    path.write_text("when,node\n5,1\n")
    with pytest.raises(InputError, match="needs the columns at_s"):
        load_trace(path)


def test_yaml_trace_with_every_trigger(tmp_path):
    path = tmp_path / "trace.yaml"
    path.write_text("- {at_step: 20, node: 0, notice_s: 2}\n- {during_checkpoint: true, at_step: 30}\n- {at_s: 7}\n")
    assert load_trace(path) == ((
        PreemptionEvent(at_step=20, node=0, notice_s=2.0),
        PreemptionEvent(at_step=30, during_checkpoint=True),
        PreemptionEvent(at_s=7.0),
    ), ())


def test_a_trace_holds_provider_faults_too(tmp_path):
    path = tmp_path / "trace.yaml"
    path.write_text("- {at_step: 20}\n- {fault: capacity, scope: aws/us-east-1/use1-az2}\n"
                    "- {fault: throttle, times: 2}\n- {fault: timeout, made: false, after: 3}\n")
    events, faults = load_trace(path)
    assert events == (PreemptionEvent(at_step=20),)
    assert faults == (Fault(FaultKind.CAPACITY, "aws/us-east-1/use1-az2"), Fault(FaultKind.THROTTLE, times=2),
                      Fault(FaultKind.TIMEOUT, after=3, made=False))
    schedule = PreemptionSchedule(events, faults=faults)
    assert schedule_from_dict(schedule.to_dict()) == schedule


@pytest.mark.parametrize("text, message", [
    ("- {fault: meteor}\n", "is not one of capacity"),
    ("- {fault: capacity, zone: x}\n", "unknown field zone"),
    ("- {fault: throttle, times: 0}\n", "times must be"),
    ("- {fault: boot, after: -1}\n", "after must be"),
    ("- {fault: timeout, made: maybe}\n", "made must be"),
])
def test_a_broken_fault_is_an_input_error(tmp_path, text, message):
    path = tmp_path / "trace.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_trace(path)


@pytest.mark.parametrize("text, message", [
    ("- {at_s: 1, at_step: 2}\n", "give one of at_s, at_step, during_checkpoint"),
    ("- {node: 1}\n", "give one of"),
    ("- {at_s: soon}\n", "at_s must be a number"),
    ("- {at_step: -.inf}\n", "at_step must be a number from 0"),
    ("- {at_s: .nan}\n", "at_s must be a number from 0"),
    ("- {at_s: 1, notice_s: -2}\n", "notice_s must be a number from 0"),
    ("- {during_checkpoint: 'false'}\n", "during_checkpoint must be true or false"),
    ("- {at_s: 1, node: [1]}\n", "node must be an index"),
    ("- {at_s: 1}\n- {at_s: 1, at_s: 2}\n", "appears more than once"),
    ("- {at_s: 1, when: 2}\n", "unknown field when"),
    ("at_s: 1\n", "is a list of events"),
    ("- [1, 2]\n", "not a mapping"),
    ("- {at_s: [\n", "not valid YAML"),
])
def test_broken_trace_is_an_input_error_naming_the_event(tmp_path, text, message):
    path = tmp_path / "trace.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_trace(path)


def test_missing_trace_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        load_trace(tmp_path / "nope.yaml")


def test_schedule_round_trips_through_its_dict():
    schedule = PreemptionSchedule((PreemptionEvent(at_step=3, node="n-1"), PreemptionEvent(at_s=2.5, notice_s=1.0)),
                                  rate_per_node_hour=0.5, notice_s=2.0, seed=7)
    assert schedule_from_dict(schedule.to_dict()) == schedule


def test_rate_clock_is_poisson_with_the_rate_times_the_node_count():
    clock = RateClock(rate_per_node_hour=36.0, seed=1)  # 0.01 per node-second
    gaps = [clock.next_after(100.0, nodes=4) - 100.0 for _ in range(4000)]
    assert statistics.fmean(gaps) == pytest.approx(1 / (0.01 * 4), rel=0.05)
    assert statistics.median(gaps) == pytest.approx(0.6931 / 0.04, rel=0.08)  # exponential: ln 2 / λ
    assert clock.next_after(0.0, nodes=0) == float("inf")
    again = RateClock(36.0, seed=1)
    assert again.next_after(0.0, 4) == RateClock(36.0, seed=1).next_after(0.0, 4)  # seeded


def test_the_example_trace_loads():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "preemptions.yaml"
    events, faults = load_trace(example)
    assert [e.at_step for e in events] == [50, 130, 200]
    assert [f.kind for f in faults] == [FaultKind.CAPACITY]
    assert events[0].notice_s == 2.0 and events[1].node == 0 and events[2].during_checkpoint
