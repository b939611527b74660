"""``geotrain logs``, ``geotrain exec``, ``geotrain ssh``: a run's output and its nodes."""

from __future__ import annotations

import os
import sys

import typer

NODE_HELP = ("A node of the run: its id, or its index in the run's node list (0 = the first launched; "
             "an unknown one is answered with the list).")


class _Prefixer:
    """Lines labelled by their source, labels padded to the widest seen so far (as `docker compose logs`)."""

    def __init__(self, err: bool = False) -> None:
        self.width = 0
        self.err = err

    def __call__(self, label: str, line: str) -> None:
        self.width = max(self.width, len(label))
        typer.echo(f"{label:<{self.width}} | {line}", err=self.err)


def logs(
    run_id: str = typer.Argument(None, help="A run id or name (default: the latest run)."),
    node: str = typer.Option(None, "--node", "-n", help=NODE_HELP),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the run ends "
                                                              "(Ctrl-C stops, exit 130)."),
) -> None:
    """A run's logs: the launcher's events, the node agents' logs (local nodes) and the workers' output of
    every generation, each line prefixed by its node (GEOTRAIN_HOME/runs/RUN/logs/)."""
    from geotrain.app.logs import run_logs, stream

    stream(run_logs(run_id, node), _Prefixer(), follow=follow)


def exec_command(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="The run (its id or name)."),
    node: str = typer.Option(None, "--node", "-n", help=NODE_HELP + " Default: every node that is up."),
) -> None:
    """Run a command on every node of the run that is up (or one), as `sky exec` does: a shell string
    (`geotrain exec RUN 'nvidia-smi; ls'`), a task file's run (`geotrain exec RUN task.yaml`, no setup), or
    the argv after `--`; in ~/sky_workdir when the run's task has a workdir, with the task's SKYPILOT_*
    variables and envs; through the provider's node agent; each line of output prefixed by its node. Exits
    with the first non-zero exit code (a signal N: 128+N), else 0; nodes not up are listed on stderr."""
    from geotrain.app.nodes import exec_argv, exec_on_nodes, first_failure

    def skipped(node_id: str, why: str) -> None:
        typer.echo(f"{node_id}: {why}; skipped", err=True)

    argv, envs = exec_argv(list(ctx.args))
    results = exec_on_nodes(run_id, node, argv, emit=_Prefixer(), skipped=skipped, envs=envs)
    code = first_failure(results)
    if code:
        failed = ", ".join(f"{r.node_id} exited {r.exit_code}" for r in results if r.exit_code)
        typer.echo(f"{failed} (output kept in {results[0].log.parent})", err=True)
        raise typer.Exit(code)


def ssh(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="The run (its id or name)."),
    node: str = typer.Argument(..., help=NODE_HELP),
) -> None:
    """A shell on a node of the run, or the command after `--` run by it (joined by spaces, as ssh does).
    On-prem: the system ssh with the provider's options (host keys checked against known_hosts), into the
    node's directory; a cloud VM: ssh with the run's login key to geotrain's sshd on it (its host key
    checked). Local: your $SHELL on this machine in the node's directory, with GEOTRAIN_RUN_ID,
    GEOTRAIN_NODE_ID, GEOTRAIN_NODE_DIR and GEOTRAIN_HOME set (not one of the node's processes: ending the
    node does not end it)."""
    from geotrain.app.nodes import login
    from geotrain.errors import InputError

    cmd = login(run_id, node, list(ctx.args))
    env = {**os.environ, **cmd.env}
    sys.stdout.flush()
    sys.stderr.flush()
    if cmd.cwd is not None:
        os.chdir(cmd.cwd)
    try:
        os.execvpe(cmd.argv[0], list(cmd.argv), env)  # the shell gets this terminal, and this exit code
    except FileNotFoundError as exc:
        raise InputError(f"{cmd.argv[0]} is not installed here ({exc.strerror}); install it (for ssh: the "
                         "OpenSSH client), or run commands with `geotrain exec`") from exc
