"""Throughput and egress model: compute rates x network x sync strategy -> samples/s, $/h, $/1M samples.

Pure and fast: no torch, no cloud SDK, no solver. ``PerfModel.predict`` is the entry point.
"""
