"""The ``geotrain`` command line: parse → call one library function → render. No logic here.

Every :class:`~geotrain.errors.GeotrainError` is turned into one line on stderr and its exit code
(see ``geotrain.errors``) in :class:`GeotrainGroup`; ``--debug`` shows the traceback as well.
Heavy modules (pandas, the solver, torch, cloud SDKs) are imported inside the commands that use
them, so ``geotrain --help`` stays fast.
"""

from __future__ import annotations

import sys
import traceback

import typer
from typer.core import TyperGroup

from geotrain import __version__
from geotrain.errors import EXIT_INTERRUPTED, GeotrainError


class GeotrainGroup(TyperGroup):
    """Maps geotrain errors to exit codes, for the console script and for CliRunner alike."""

    def invoke(self, ctx: typer.Context):  # noqa: ANN201 - the group's signature
        try:
            return super().invoke(ctx)
        except GeotrainError as exc:
            if _debug(ctx):
                traceback.print_exc()
            typer.echo(f"error: {one_line(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except typer.BadParameter as exc:  # a flag's value out of range: one line, as every input error
            typer.echo(one_line(f"error: {exc.format_message()}; see `{ctx.command_path} "
                                f"{ctx.invoked_subcommand or ''} --help`".replace("  ", " ")), err=True)
            ctx.exit(2)
        except (typer.TyperException, typer.Exit, typer.Abort):  # usage errors, --help, exits: typer's own
            raise
        except OSError as exc:  # a file or device the user pointed at
            if _debug(ctx):
                traceback.print_exc()
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            typer.echo(one_line(f"error: {exc.strerror or exc}{where}; check the path and its permissions"), err=True)
            ctx.exit(2)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback without --debug
            if _debug(ctx):
                traceback.print_exc()
            typer.echo(one_line(f"error: internal error ({type(exc).__name__}: {exc}); rerun with --debug for the "
                                "traceback and report it"), err=True)
            ctx.exit(1)


_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """An error is one line: line breaks from user data (a column name, a value) are shown escaped."""
    return message.translate(_LINE_BREAKS)


def _debug(ctx: typer.Context) -> bool:
    root = ctx.find_root()
    return bool(root.params.get("debug")) or "--debug" in sys.argv


app = typer.Typer(
    cls=GeotrainGroup,
    name="geotrain",
    help="Plan, launch and account for deep-learning training on spot VMs across zones, clouds and your own machines.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"geotrain {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """geotrain: the spot-market, cost-aware scheduler for training across clouds."""


from geotrain.cli import catalog as _catalog  # noqa: E402  (registers the sub-commands)
from geotrain.cli import check as _check  # noqa: E402
from geotrain.cli import estimate as _estimate  # noqa: E402
from geotrain.cli import launch as _launch  # noqa: E402
from geotrain.cli import nodes as _nodes  # noqa: E402
from geotrain.cli import plan as _plan  # noqa: E402
from geotrain.cli import profile as _profile  # noqa: E402
from geotrain.cli import report as _report  # noqa: E402
from geotrain.cli import rehearse as _rehearse  # noqa: E402
from geotrain.cli import simulate as _simulate  # noqa: E402

app.add_typer(_catalog.app, name="catalog")
app.command("estimate")(_estimate.estimate)
app.command("plan")(_plan.plan)
app.command("launch", context_settings={"allow_extra_args": True})(_launch.launch)
app.command("status")(_launch.status)
app.command("stop")(_launch.stop)
app.command("down")(_launch.down)
app.command("queue")(_launch.queue)
app.command("cleanup")(_launch.cleanup)
app.command("cost-report")(_report.cost_report)
app.command("simulate")(_simulate.simulate)
app.command("rehearse")(_rehearse.rehearse)
app.command("logs")(_nodes.logs)
app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(_nodes.exec_command)
app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(_nodes.ssh)
app.command("check")(_check.check)
app.command("profile", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(_profile.profile)


def main() -> None:
    """Console-script entry point."""
    app()
