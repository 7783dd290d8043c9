"""Run tags: one dataclass that writers log and the index reads back."""

from __future__ import annotations

from countboard.index.source import RunSnapshot
from countboard.tracking import tags as tg
from countboard.tracking.tags import RunTags


def test_to_tags_writes_set_fields_under_their_names_and_leaves_none_out():
    tags = RunTags(role=tg.ROLE_CELL, model="m", seed=3, partial=False, parent="p1",
                   extra={tg.PRACO_ORIENTATION: "upper"}).to_tags()
    assert tags == {"countboard.role": "cell", "model": "m", "seed": "3", "partial": "false",
                    "mlflow.parentRunId": "p1", "praco.orientation": "upper"}


def test_from_tags_reads_known_tags_and_keeps_the_rest():
    t = RunTags.from_tags({"model": "m", "seed": "7", "partial": "true", "owner": "h:1", "config_hash": "abc"})
    assert (t.model, t.seed, t.partial, t.config_hash) == ("m", 7, True, "abc")
    assert t.extra == {"owner": "h:1"} and t.task is None
    assert RunTags.from_tags({"seed": "x", "partial": "maybe"}) == RunTags()  # unreadable values: not set


def test_round_trip():
    t = RunTags(role=tg.ROLE_COMPARISON, task="bcc", dataset="d", classifier="c", family="acs", config_hash="h",
                seed=-1, partial=True, extra={"bcc_method": "exact"})
    assert RunTags.from_tags(t.to_tags()) == t


def test_judge_is_the_evaluator_else_a_model_scoring_another_generator():
    assert RunTags(model="clf", generator="gen").judge == "clf"
    assert RunTags(model="gen", generator="gen").judge is None
    assert RunTags(model="gen").judge is None
    assert RunTags(model="gen", evaluator="gemini").judge == "gemini"


def test_the_index_reads_what_a_writer_wrote():
    written = RunTags(role=tg.ROLE_SWEEP, model="clf", generator="gen", dataset="d", task="bcc", family="acs",
                      config_hash="h", parent="p0").to_tags()
    row = RunSnapshot("r1", "0", "name", "FINISHED", "u", 1, 2, "active", "file:///x", tags=written,
                      params={"dataset.split": "test"}).row()
    assert row["is_sweep"] and row["parent_run_id"] == "p0" and row["evaluator"] == "clf"
    assert (row["model"], row["generator"], row["dataset"], row["split"], row["task"], row["config_hash"]) == (
        "clf", "gen", "d", "test", "bcc", "h")
