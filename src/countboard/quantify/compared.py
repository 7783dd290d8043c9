"""Which tasks ``countboard compare`` compares: each domain declares its own (``COMPARED`` in its ``tasks``
package) with the run tags that name a cell's generator and classifier. No numpy here: the CLI lists the tasks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComparedTask:
    """A task whose cells carry a BCC posterior of the pooled cell, and the tags naming the two sides of a cell."""

    task: str
    generator_tag: str
    classifier_tag: str
    #: The family of the task's cells: its comparisons are logged in that family's experiment.
    cells_family: str = "acs"
