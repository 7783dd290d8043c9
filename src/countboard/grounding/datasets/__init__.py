"""Grounding datasets: phrase, image and boxes per sample."""
