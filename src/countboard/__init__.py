"""Countboard: counting-centred evaluation of vision and vision-language models.

Layout: ``data`` (datasets), ``models`` (counters, generators, evaluators, VLMs), ``tasks`` (protocols that turn a
model and a dataset into per-sample records and metrics), ``metrics`` (pure functions), ``quantify`` (Bayesian
classify & count), ``tracking`` (MLflow), ``index`` (DuckDB), ``engine`` (one sweep cell = one MLflow run).
"""

__version__ = "0.1.0"
