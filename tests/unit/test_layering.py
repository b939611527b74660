"""Imports follow the layers: a part of geotrain imports its own modules and those of lower layers,
never a higher layer nor a sibling of its own layer; ``cli`` talks to the application layer only.

The layers, top to bottom (README, Development, draws the same):

    cli                      parse, call one app function, render
    app  testing             one module per command: the orchestration
    sim                      replay spot markets: the baselines, geotrain's own launcher path, the oracle
    launcher  report         run a plan; account for a run
    planning  billing        plan a job; the cost of a run (the one cost function)
    perf  solver  pricing  providers  train
    clouds                   each cloud's SDK clients, credentials, errors; its regions
    ledger
    config  taskfile  taskenv
    specfile  files  procs  node
    strategies
    domain
    errors
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "geotrain"

LAYERS: list[set[str]] = [
    {"__main__"},
    {"cli"},
    {"app", "testing"},
    {"sim"},  # a replay drives the launcher's provisioning over a simulated provider
    {"launcher", "report"},
    {"planning", "billing"},
    {"perf", "solver", "pricing", "providers", "train"},
    {"clouds"},  # each cloud's clients, credentials, error tables: the price sources and providers stand on it
    {"ledger"},
    {"config", "taskfile", "taskenv"},
    {"wan"},  # emulated links between network namespaces
    {"specfile", "files", "procs", "node"},
    {"strategies"},  # the registry of sync strategies: the perf model's class and the runtime's
    {"domain"},
    {"errors"},
]
CLI_MAY_IMPORT = {"cli", "app", "domain", "errors"}
LEVEL = {part: n for n, layer in enumerate(LAYERS) for part in layer}


def part_of(module: str) -> str | None:
    """``geotrain.launcher.loop`` → ``launcher``; ``geotrain`` itself → None."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[0] == "geotrain" else None


def imports(path: Path) -> list[tuple[int, str]]:
    """Every geotrain module a file imports (at any depth: lazy imports count too), with its line."""
    module = "geotrain." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("geotrain")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("geotrain"):
                out.append((node.lineno, name))
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        source = rel.parts[0].removesuffix(".py")
        if source == "__init__":
            continue
        assert source in LEVEL, f"{rel}: {source!r} is in no layer; add it to LAYERS (and to the README)"
        for line, name in imports(path):
            target = part_of(name)
            if target is None or target == source:
                continue
            assert target in LEVEL, f"{rel}:{line}: imports {name}, whose part {target!r} is in no layer"
            if source == "cli" and target not in CLI_MAY_IMPORT:
                found.append(f"{rel}:{line}: cli imports {name}: the cli calls the app layer only")
            elif LEVEL[target] <= LEVEL[source]:
                kind = "a sibling" if LEVEL[target] == LEVEL[source] else "a higher layer"
                found.append(f"{rel}:{line}: {source} imports {name} ({kind})")
    return found


def test_imports_follow_the_layers() -> None:
    assert violations() == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """The referee can fail: an upward, a sideways and a cli → solver import are all caught."""
    sample = PACKAGE / "perf" / "_layering_probe.py"
    sample.write_text("from geotrain.pricing.egress import EgressPrices\nimport geotrain.launcher.loop\n")
    cli_sample = PACKAGE / "cli" / "_layering_probe.py"
    cli_sample.write_text("def f():\n    from geotrain.solver.model import BACKENDS\n")
    try:
        found = violations()
    finally:
        sample.unlink()
        cli_sample.unlink()
    assert any("perf imports geotrain.pricing.egress (a sibling)" in v for v in found)
    assert any("perf imports geotrain.launcher.loop (a higher layer)" in v for v in found)
    assert any("cli imports geotrain.solver.model" in v for v in found)
