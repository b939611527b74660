"""The application layer: one module per command (catalog, estimate, plan, launch, status, stop,
cost_report), holding the orchestration; ``geotrain.cli`` parses flags, calls one function here and
renders what it returns. Modules here import pandas, the solver or torch: the CLI imports them inside
its commands."""
