"""A Placement service wire-compatible with the OpenStack Placement API."""
