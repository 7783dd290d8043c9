"""Numeracy protocols: automatic evaluation of generated images, corrected by BCC."""
