"""Inputs of the attribute-control protocols: text prompt sets and simulated classifier data."""
