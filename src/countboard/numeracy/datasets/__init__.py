"""Prompt sets of the numeracy protocol: the GeckoNum release and prompt templates."""
