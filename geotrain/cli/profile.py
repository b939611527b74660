"""``geotrain profile``: run a training command for a few steps here and write its rate to a rates file."""

from __future__ import annotations

from pathlib import Path

import typer

from geotrain.cli.render import console, note, print_document


def profile(
    ctx: typer.Context,
    workload: str = typer.Option(..., "--workload", help="The workload's name in plans and rates files, e.g. my-net."),
    output: Path = typer.Option(Path("rates.csv"), "-o", "--output",
                                help="Rates file to add the row to (made if missing; a row of the same workload, "
                                     "accelerator and count is replaced). Plan with --rates FILE."),
    samples_per_step: int = typer.Option(None, "--samples-per-step", min=1,
                                         help="Samples of one optimizer step (not needed when the script calls "
                                              "geotrain.train.api.report_progress)."),
    steps: int = typer.Option(20, "--steps", min=1, help="Steps timed at least, after warm-up."),
    min_seconds: float = typer.Option(3.0, "--min-seconds", min=0.0,
                                      help="Time at least this long (more steps when they are fast)."),
    warmup: int = typer.Option(5, "--warmup", min=0, help="Steps run before the clock starts."),
    accelerator: str = typer.Option(None, "--accelerator", help="Name the accelerator (default: this machine's "
                                                                  "first GPU, else CPU)."),
    kind: str = typer.Option(None, "--kind", help="cv or nlp: lets the rate carry to other accelerators."),
    threads: int = typer.Option(None, "--threads", min=1, help="OMP_NUM_THREADS of the command (default 1 on "
                                                               "CPU, as a local node runs; unset on a GPU)."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds the command may take."),
    as_json: bool = typer.Option(False, "--json", help="Print the measured rate as JSON."),
) -> None:
    """Run `-- COMMAND` (e.g. python train.py) for warm-up + steps optimizer steps on this machine and save its
    samples/s for `plan --rates` and `estimate --rates`. Without a command, a built-in workload (e.g.
    --workload resnet50) trains alone as a launch trains it."""
    from geotrain.app.profile import ProfileRequest
    from geotrain.app.profile import profile as run_profile

    result = run_profile(ProfileRequest(
        command=tuple(ctx.args), workload=workload, output=output, samples_per_step=samples_per_step, steps=steps,
        warmup=warmup, accelerator=accelerator, kind=kind, timeout_s=timeout, threads=threads, workdir=Path.cwd(),
        min_seconds=min_seconds))
    rate, m = result.rate, result.measurement
    if as_json:
        note(f"wrote {result.output}; plan with --rates {result.output}")
        print_document("profile", {"workload": rate.workload, "accelerator": rate.accelerator,
                                   "accelerator_count": rate.accelerator_count, "samples_per_s": rate.samples_per_s,
                                   "steps_timed": m.steps_timed, "seconds": m.seconds, "counted_by": m.counted_by,
                                   "device": result.device, "output": str(result.output), "log": str(m.log)})
        return
    console().print(f"{rate.workload} on 1 x {rate.accelerator}: {rate.samples_per_s:,.1f} samples/s "
                    f"({m.steps_timed} steps in {m.seconds:.2f} s, {m.counted_by}); wrote {result.output}; "
                    f"plan with --rates {result.output}")
