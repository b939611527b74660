"""Start-up is part of the product: the CLI must not import heavy modules it does not need."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "torch", "ortools", "boto3", "google.cloud", "azure", "matplotlib")


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_imports_nothing_heavy():
    loaded = modules_after(
        "import sys\nfrom geotrain.cli import app\n"
        "from typer.testing import CliRunner\nCliRunner().invoke(app, ['--help'])"
    )
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m.startswith("google.cloud")}
    # typer carries its own click; the stand-alone click is not a dependency (only test tools bring it)
    assert "click" not in loaded


def test_catalog_list_imports_no_solver_torch_or_sdk():
    loaded = modules_after(
        "from geotrain.cli import app\nfrom typer.testing import CliRunner\n"
        "CliRunner().invoke(app, ['catalog', 'list', '--accelerator', 'T4', '--json'])"
    )
    assert "pandas" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("torch", "ortools", "boto3", "azure", "matplotlib")
                or m.startswith("google.cloud")}


def test_python_dash_m_geotrain_runs():
    out = subprocess.run([sys.executable, "-m", "geotrain", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("geotrain ")
