"""Grounding protocols."""
