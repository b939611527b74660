"""``api.finish``: a script's last call runs its exit handlers, flushes its output and exits with the code."""

import subprocess
import sys
import textwrap
from pathlib import Path


def test_finish_runs_exit_handlers_flushes_output_and_exits_with_the_code(tmp_path: Path) -> None:
    marker = tmp_path / "handler-ran"
    script = textwrap.dedent(f"""
        import atexit, sys
        from geotrain.train import api
        atexit.register(lambda: open({str(marker)!r}, "w").write("yes"))
        sys.stdout.write("no newline, not flushed")
        sys.stderr.write("to stderr")
        api.finish(3)
        print("never")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done
    assert done.stdout == "no newline, not flushed" and done.stderr == "to stderr"
    assert marker.read_text() == "yes"


def test_finish_with_a_closed_stdout_still_exits(tmp_path: Path) -> None:
    script = "import sys\nfrom geotrain.train import api\nsys.stdout.close()\napi.finish()\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done
