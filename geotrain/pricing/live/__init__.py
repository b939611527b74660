"""Live prices, capacity and interruption signals from the clouds (``geotrain catalog refresh``).

``base``: the :class:`~geotrain.pricing.live.base.PriceSource` seam; ``aws``, ``gcp``, ``azure``: one
source per cloud, each through its real SDK; ``refresh``: runs the sources, validates and merges
their rows into the current snapshot, stores the new snapshot atomically.
"""
