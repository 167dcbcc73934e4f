"""Console scripts: placement-api, placement-manage, placement-status."""
