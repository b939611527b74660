"""Shell completion: the console script writes a completion script for bash, zsh and fish, and the
script's callback answers with geotrain's commands and options."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GEOTRAIN = Path(sys.executable).with_name("geotrain")
# what a script of each shell holds: its completion built-in, bound to the program's name
MARKERS = {
    "bash": ("complete -o default -F _geotrain_completion geotrain", "COMPREPLY"),
    "zsh": ("#compdef geotrain", "compdef _geotrain_completion geotrain"),
    "fish": ("complete --command geotrain",),
}


def geotrain(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    if not GEOTRAIN.exists():
        pytest.skip(f"no console script beside {sys.executable} (pip install -e .)")
    return subprocess.run([str(GEOTRAIN), *args], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("shell", sorted(MARKERS))
def test_a_completion_script_is_generated_for_each_shell(shell: str) -> None:
    out = geotrain({"_GEOTRAIN_COMPLETE": f"source_{shell}"})
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert script.strip() and all(marker in script for marker in MARKERS[shell]), script
    assert f"_GEOTRAIN_COMPLETE=complete_{shell}" in script  # it calls geotrain back to complete
    # --show-completion prints the same script (shell named, as when detection finds it)
    shown = geotrain({"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}, "--show-completion", shell)
    assert shown.returncode == 0 and shown.stdout.strip() == script.strip(), shown.stderr
    if shell == "bash" and shutil.which("bash"):
        syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr


def test_the_scripts_callback_completes_commands_and_options() -> None:
    bash = geotrain({"_GEOTRAIN_COMPLETE": "complete_bash", "COMP_WORDS": "geotrain cat", "COMP_CWORD": "1"})
    assert bash.stdout.split() == ["catalog"], bash.stderr
    option = geotrain({"_GEOTRAIN_COMPLETE": "complete_bash", "COMP_WORDS": "geotrain catalog list --mar",
                       "COMP_CWORD": "3"})
    assert option.stdout.split() == ["--market"], option.stderr
    zsh = geotrain({"_GEOTRAIN_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "geotrain cost"})
    assert '"cost-report"' in zsh.stdout, zsh.stderr
    fish = geotrain({"_GEOTRAIN_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args",
                     "_TYPER_COMPLETE_ARGS": "geotrain st"})
    assert [line.split("\t")[0] for line in fish.stdout.splitlines()] == ["status", "stop"], fish.stderr


def test_install_completion_writes_the_script_into_the_shells_config(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    out = geotrain(env, "--install-completion", "bash")
    assert out.returncode == 0, out.stderr
    installed = tmp_path / ".bash_completions" / "geotrain.sh"
    assert MARKERS["bash"][0] in installed.read_text()
    assert str(installed) in (tmp_path / ".bashrc").read_text()
