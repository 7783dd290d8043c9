"""Attribute-control protocols: ``bcc`` and ``text_acs``."""
