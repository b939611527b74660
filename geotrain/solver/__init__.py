"""OR-Tools model of the VM mix: plain data in (``Problem``), a mix out (``SearchResult``).

Imports neither pandas nor providers. The model is written out in ``geotrain.solver.model``;
the objectives in ``geotrain.solver.search``; ``geotrain.solver.semantics`` evaluates the same
model for one mix (the reference for tests and for the lazily added constraints).
"""
