"""Bills of a run: Cost Explorer (the measured bill) and the Price List (a cross-check)."""
