"""``geotrain rehearse``'s flags: refused before anything is measured."""

from __future__ import annotations

from typer.testing import CliRunner

from geotrain.cli import app

runner = CliRunner()


def test_too_few_steps_are_refused_before_the_rehearsal_starts(tmp_path):
    plan = tmp_path / "plan.json"
    made = runner.invoke(app, ["plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local",
                               "--target-sps", "1", "--nodes", "aws/usw2-az1/g4dn.xlarge=2", "-o", str(plan)])
    assert made.exit_code == 0, made.output
    result = runner.invoke(app, ["rehearse", str(plan), "--steps", "7"])
    assert result.exit_code == 2 and "--steps" in result.stderr and "rehearsing" not in result.output
    assert "Traceback" not in result.output
