"""Capacity: the chance of obtaining ``k`` nodes of an offer at once, from public measurements
(``model``: the model and its math; ``rows``: the shipped measurements and their CSV form)."""

from geotrain.pricing.capacity.model import MAX_NODES, ON_DEMAND_PRIOR_NODES, CapacityEstimate, CapacityModel
from geotrain.pricing.capacity.rows import BASES, COLUMNS, KINDS, SCOPES, CapacityRow, rows_from_csv, rows_to_csv

__all__ = ["BASES", "COLUMNS", "KINDS", "MAX_NODES", "ON_DEMAND_PRIOR_NODES", "SCOPES", "CapacityEstimate",
           "CapacityModel", "CapacityRow", "rows_from_csv", "rows_to_csv"]
