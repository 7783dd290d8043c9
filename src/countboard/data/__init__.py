"""Datasets: each yields ``ImageItem`` (``data.base``) or records of its own kind.

To add a dataset: a module here with a class whose constructor takes the config keys of
``conf/dataset/<name>.yaml``; raise ``countboard.errors.DataNotFoundError`` naming the path, the config key and where
the data is published when files are missing.
"""
