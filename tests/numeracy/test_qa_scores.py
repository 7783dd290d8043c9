"""DSG and TIFA scores: question making, DSG's dependency rule by hand, answers forced from a tiny random VLM."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from countboard.errors import CountboardError
from countboard.models.asked import AskedModel
from countboard.models.tiny_asked import build_tiny_vlm, force_answer
from countboard.numeracy.datasets.prompts import Entity, PromptSpec
from countboard.numeracy.qa_scores import (
    DsgScore,
    Question,
    TifaScore,
    ask_questions,
    dsg_judge,
    dsg_questions,
    release_questions,
    tifa_judge,
    tifa_questions,
)
from countboard.resources import GECKONUM_DIR

TWO = PromptSpec(7, "1 cat and 3 dogs.", "2-additive", (Entity("cat", "1"), Entity("dog", "3")))


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    path = build_tiny_vlm(tmp_path_factory.mktemp("tiny_yes_no_vlm"), "llava", words=("yes", "no"))
    return path


def vlm_node(path) -> dict:
    return {"_target_": "countboard.counting.models.vlm.VlmCounter", "name": "tiny_vlm", "kind": "counter",
            "model_id": str(path), "max_new_tokens": 1}


def test_dsg_questions_pair_each_entity_with_its_count_as_a_child():
    qs = dsg_questions(TWO)
    assert [(q.qid, q.text, q.parents, q.target) for q in qs] == [
        (1, "Is there a cat?", (), None), (2, "Is there one cat?", (1,), 1),
        (3, "Are there dogs?", (), None), (4, "Are there 3 dogs?", (3,), 3)]
    assert dsg_questions(PromptSpec(1, "few apples", "approx-1-entity", (Entity("apple", "few"),))) == []


def test_tifa_questions_ask_existence_and_the_count_of_each_entity():
    qs = tifa_questions(TWO)
    assert [(q.text, q.kind, q.target) for q in qs] == [
        ("Is there a cat?", "yes_no", None), ("How many cats are in the image?", "count", 1),
        ("Is there a dog?", "yes_no", None), ("How many dogs are in the image?", "count", 3)]
    assert tifa_questions(PromptSpec(2, "An apple.", "numeric_simple", (Entity("apple", "1"),)))[0].text \
        == "Is there an apple?"


CHAIN = [Question(1, "a"), Question(2, "b", parents=(1,)), Question(3, "c", parents=(2,)), Question(4, "d")]


@pytest.mark.parametrize(("said", "score", "counted"), [
    ([True, True, True, True], 1.0, [1, 1, 1, 1]),
    ([True, True, False, True], 0.75, [1, 1, 0, 1]),
    ([False, True, True, True], 0.25, [0, 0, 0, 1]),        # a no zeroes the children and grandchildren
    ([True, False, True, False], 0.25, [1, 0, 0, 0]),
    ([False, None, None, True], 0.25, [0, 0, 0, 1]),        # zeroed by the rule: the child's answer is not needed
    ([None, True, True, True], 1.0, [None, None, None, 1]),  # an unanswered parent: its children cannot be judged
    ([True, None, True, False], 0.5, [1, None, None, 0]),
    ([None, None, None, None], math.nan, [None] * 4)])
def test_dsg_rule_on_hand_computed_cases(said, score, counted):
    got, values = dsg_judge(CHAIN, said)
    assert (math.isnan(got) and math.isnan(score)) or got == pytest.approx(score)
    assert values == counted


def test_dsg_rule_with_two_parents_needs_both():
    qs = [Question(1, "cat?"), Question(2, "dog?"), Question(3, "cat left of dog?", parents=(1, 2))]
    assert dsg_judge(qs, [True, False, True]) == (pytest.approx(1 / 3), [1.0, 0.0, 0.0])
    assert dsg_judge(qs, [True, True, True])[0] == 1.0


def test_tifa_is_the_share_answered_as_the_prompt_says():
    qs = tifa_questions(TWO)
    assert tifa_judge(qs, [1.0, 1.0, 1.0, 2.0]) == (0.75, [1.0, 1.0, 1.0, 0.0])
    assert tifa_judge(qs, [0.0, None, None, 3.0]) == (0.5, [0.0, None, None, 1.0])
    assert math.isnan(tifa_judge(qs, [None] * 4)[0])


def _task3_folder(tmp_path, rows: pd.DataFrame):
    (tmp_path / "annotations").mkdir()
    rows.to_csv(tmp_path / "annotations" / "task_3_muse_b.csv", index=False)
    return tmp_path


def _bundled_task3(n: int) -> pd.DataFrame:
    import io
    import zipfile

    with zipfile.ZipFile(GECKONUM_DIR / "geckonum_annotations.zip") as zf:
        return pd.read_csv(io.BytesIO(zf.read("task_3_muse_b.csv")), dtype=str, keep_default_na=False).head(n)


def test_release_questions_are_grouped_by_prompt_as_roots(tmp_path):
    rows = _bundled_task3(400)
    got = release_questions(_task3_folder(tmp_path, rows))
    pids = rows["image_id"].str.split("_").str[1].astype(int)
    assert set(got) == set(pids)
    first = pids.iloc[0]
    expect = rows[pids == first].drop_duplicates("question_id")
    assert [q.text for q in got[first]] == list(expect["question"])
    assert all(q.parents == () and q.source == "release" and q.kind == "yes_no" for qs in got.values() for q in qs)
    spec = PromptSpec(int(first), str(expect["prompt"].iloc[0]), "fractional-simple", ())
    assert [q.text for q in DsgScore(got).questions(spec)] == list(expect["question"])
    assert DsgScore(got).questions(TWO) == dsg_questions(TWO)  # a prompt without Task 3 questions


def test_release_questions_refuse_two_texts_for_one_question(tmp_path):
    rows = _bundled_task3(20)
    rows.loc[rows.index[-1], "question"] = "Is this another question?"
    with pytest.raises(CountboardError, match="task_3_muse_b.csv line"):
        release_questions(_task3_folder(tmp_path, rows))


def test_forced_answers_scored_and_kept_with_each_image_asked_once(tiny_vlm):
    asked = AskedModel(str(tiny_vlm), max_new_tokens=1)
    vocab = asked.tokenizer.get_vocab()
    images = [np.full((16, 16, 3), 40 * k, np.uint8) for k in range(2)]
    specs = [TWO, PromptSpec(8, "3 dogs.", "numeric_simple", (Entity("dog", "3"),))]
    # pairs in order: image 0 TIFA (4), DSG (4); image 1 TIFA (2), DSG (2)
    said = ["yes", "1", "no", "3", "yes", "no", "3", "yes", "yes", "2", "three", "yes"]
    handle = force_answer(asked.model, [vocab[w] for w in said])
    try:
        calls = []
        real = asked.ask
        asked.ask = lambda ims, qs: calls.append((len({id(i) for i in ims}), len(qs))) or real(ims, qs)
        out = ask_questions(asked, images, specs, [TifaScore(), DsgScore()])
    finally:
        handle.remove()
    assert calls == [(2, 12)]  # one call, two distinct image objects
    rows = [json.loads(o["vlm_answers"]) for o in out]
    assert [r["answer"] for r in rows[0] + rows[1]] == said
    # image 0, TIFA: yes (1), "1" == 1 (1), no (0), "3" == 3 (1); DSG: yes (1), no (0), "3" unparsable, its child
    # unjudged
    assert out[0]["score_tifa"] == 0.75 and out[0]["score_dsg"] == 0.5
    assert [r["counted"] for r in rows[0]] == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, None, None]
    dsg = [r for r in rows[0] if r["metric"] == "dsg"]
    assert dsg[2]["error"] == "neither yes nor no in the answer"
    assert dsg[3]["error"] == "a parent question has no answer" and dsg[3]["parents"] == "3"
    # image 1: TIFA yes (1), "2" != 3 (0); DSG: "three" is no yes/no, so nothing is judged: NaN
    assert out[1]["score_tifa"] == 0.5 and math.isnan(out[1]["score_dsg"])
