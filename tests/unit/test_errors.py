from __future__ import annotations

import re

import geotrain.errors as errors


def test_every_error_class_is_drawn_in_the_tree_with_its_exit_code():
    classes = [obj for obj in vars(errors).values()
               if isinstance(obj, type) and issubclass(obj, errors.GeotrainError)]
    assert len(classes) >= 12
    for cls in classes:
        match = re.search(rf"\b{cls.__name__}\s+(\d+)\s", errors.__doc__)
        assert match, f"{cls.__name__} is missing from the tree in geotrain.errors' docstring"
        assert int(match.group(1)) == cls.exit_code, cls.__name__


def test_exit_codes_by_branch():
    assert errors.CatalogError("x").exit_code == 2
    assert errors.JobSpecError("x").exit_code == 2
    assert errors.InfeasibleError("x").exit_code == 3
    assert errors.CapacityError("x", scope="aws/us-east-1/use1-az1").scope == "aws/us-east-1/use1-az1"
    assert errors.CapacityError("x").exit_code == 4
    assert errors.RunError("x").exit_code == 5
