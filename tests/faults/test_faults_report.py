"""``benchmarks/faults.py`` rewrites the tables of ``docs/reliability.md`` and keeps what it does not write: rows of
faults not run again, sections of its own, and paragraphs written by hand after its tables."""

from __future__ import annotations

from tests.fixtures.benchmark_scripts import load_benchmark

DOC = """# Reliability under faults

Intro.

## Kills and races

| fault | trials | survived | units recomputed | units lost |
|---|---|---|---|---|
| kill -9 during store creation | 3 | 3/3 | 0 | 0 |

3 of the 3 store-creation kills landed while the schema was being built.

A paragraph written by hand about an earlier run.

## What users do to a store

| fault | trials |
|---|---|

## A section of its own

Kept too.
"""


def test_a_partial_run_keeps_hand_written_paragraphs_rows_and_sections(tmp_path):
    faults = load_benchmark("faults")
    path = tmp_path / "reliability.md"
    path.write_text(DOC)
    faults.write_doc([], path, "python benchmarks/faults.py --only misfit_cells", "0.1", 6.0)
    text = path.read_text()
    assert "A paragraph written by hand about an earlier run." in text
    assert "3 of the 3 store-creation kills landed" in text  # not run again: its count stays
    assert "| kill -9 during store creation | 3 | 3/3 | 0 | 0 |" in text
    assert text.count("## A section of its own") == 1 and "Kept too." in text
    faults.write_doc([], path, "python benchmarks/faults.py --only misfit_cells", "0.1", 6.0)
    assert path.read_text() == text  # a second run changes nothing it keeps


def test_the_count_of_where_creation_kills_landed_is_replaced_when_that_fault_ran(tmp_path):
    faults = load_benchmark("faults")
    path = tmp_path / "reliability.md"
    path.write_text(DOC)
    assert faults._own_notes(path, "Kills and races") == ["A paragraph written by hand about an earlier run."]
    assert len(faults._own_notes(path, "Kills and races", keep_count=True)) == 2
