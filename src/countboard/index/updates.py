"""How an index update chooses what to read, in a module without DuckDB so that ``countboard index --help`` can
show the defaults."""

# Runs whose start or end time is up to this much older than the last listing are read again: writers on other
# machines stamp runs with their own clocks.
CLOCK_SKEW_MS = 5 * 60 * 1000
#: How often an ``update="auto"`` call compares every run of the store instead of reading only what moved.
SCAN_EVERY_S = 600
UPDATES = ("auto", "scan", "quick")
