"""Every published scoring convention on tricky answers, each case written from the harness's own code (quoted in
``countboard.models.conventions`` and docs/counters.md): lmms-eval's countbench, countbenchqa and pixmo_count,
VLMEvalKit's CountBenchQA and TallyQA, and ours."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.models.conventions import (
    CONVENTION_KEYS,
    CONVENTIONS,
    OURS,
    convention_accuracies,
    convention_hits,
    tallyqa_count,
)

CB, CBQA, PIXMO = "conv_lmms_eval_countbench", "conv_lmms_eval_countbenchqa", "conv_lmms_eval_pixmo_count"
VCBQA, TALLY = "conv_vlmevalkit_countbenchqa", "conv_vlmevalkit_tallyqa"

# (answer, target): the expected score under countbench, countbenchqa, pixmo_count, VLMEvalKit CountBenchQA, TallyQA
CASES = [
    ("3", 3, (1, 1, 1, 1, 1)),
    (" 3\n", 3, (1, 1, 1, 1, 1)),          # every rule strips, or looks inside
    ("3.", 3, (0, 0, 1, 1, 1)),            # lmms-eval's exact rules keep the period
    ("There are 3", 3, (0, 0, 1, 1, 1)),
    ("There are 3 dogs.", 3, (0, 0, 1, 1, 1)),
    ("three", 3, (1, 0, 0, 0, 1)),         # number words: countbench's map and TallyQA's word pattern only
    ("Three", 3, (1, 0, 0, 0, 1)),
    ("three dogs", 3, (0, 0, 0, 0, 1)),    # countbench maps a whole-answer word only
    ("12", 2, (0, 0, 0, 1, 0)),            # VLMEvalKit's substring test: "2" in "12"
    ("2", 12, (0, 0, 0, 0, 0)),
    ("12", 12, (1, 1, 1, 1, 1)),
    ("no", 0, (0, 0, 0, 0, 0)),            # "no" is no number word of any harness (countbench maps "none")
    ("none", 0, (1, 0, 0, 0, 0)),
    ("zero", 0, (1, 0, 0, 0, 1)),
    ("0", 0, (1, 1, 1, 1, 1)),
    ("", 3, (0, 0, 0, 0, 0)),
    ("", 0, (0, 0, 0, 0, 0)),
    ("2 or 3", 3, (0, 0, 0, 1, 0)),        # pixmo and TallyQA read the first number only
    ("3 or 4", 3, (0, 0, 1, 1, 1)),
    ("12.5", 12, (0, 0, 1, 1, 1)),         # pixmo's first \d+ is "12"; TallyQA's "12" ends at a word boundary (".")
    ("25", 25, (1, 1, 1, 1, 0)),           # TallyQA extracts 0-20 only: "25" gives nothing
    ("3rd", 3, (0, 0, 1, 1, 0)),           # TallyQA needs a word boundary after the digit
    ("twenty-one", 21, (0, 0, 0, 0, 0)),   # TallyQA reads "twenty" (20)
    ("twenty-one", 20, (0, 0, 0, 0, 1)),
    ("seventeen", 17, (1, 0, 0, 0, 1)),    # TallyQA's alternation backtracks from "seven"
    ("I count 3 cats and 2 dogs", 2, (0, 0, 0, 1, 0)),
    ("03", 3, (0, 0, 0, 1, 0)),            # "03" is not "3" as text; TallyQA finds no bounded 0-20 number in it
]


@pytest.mark.parametrize(("answer", "target", "expected"), CASES, ids=[repr(c[0]) + f"/{c[1]}" for c in CASES])
def test_each_convention_follows_its_harness(answer, target, expected):
    got = tuple(int(CONVENTIONS[k].score(answer, target)) for k in (CB, CBQA, PIXMO, VCBQA, TALLY))
    assert got == expected


def test_tallyqa_extraction_reads_the_leftmost_number_of_0_to_20():
    cases = {"3": 3, "There are twelve.": 12, "20": 20, "21": None, "I see 3 dogs and twelve cats": 3,
             "twelve cats and 3 dogs": 12, "Nineteen": 19, "": None, "no": None, "5,000": 5, "-3": 3, "3rd": None,
             "ten10": None, "10ten": None}
    assert {k: tallyqa_count(k) for k in cases} == cases
    # a number as pandas may read it from the harness's prediction file
    assert tallyqa_count(7) == 7 and tallyqa_count(7.0) == 7 and tallyqa_count(21) is None
    assert tallyqa_count(float("nan")) is None


def test_pixmo_reads_the_target_s_first_integer_when_the_target_is_text():
    score = CONVENTIONS[PIXMO].score
    assert score("4", " 4 ") and score("4", "4 objects") and not score("four", "4")
    assert score("no number here", "no number here")  # neither has digits: the stripped texts are compared


def test_vlmevalkit_countbenchqa_does_not_strip():
    score = CONVENTIONS[VCBQA].score
    assert score(" 3 ", 3) and score("3", 3) and not score("3", " 3")


def test_ours_scores_the_parsed_counts_and_an_unparsable_answer_is_wrong():
    hits = convention_hits(["three", "I cannot tell", "3-5"], [3, 3, 4], [3.0, np.nan, 4.0])
    assert hits[OURS].tolist() == [1.0, 0.0, 1.0]
    assert set(hits) == set(CONVENTION_KEYS) and CONVENTION_KEYS[-1] == OURS


def test_accuracies_over_every_answer():
    answers = ["3", "3.", "There are 3", "three", "12", ""]
    targets = [3, 3, 3, 3, 2, 3]
    counts = [3.0, 3.0, 3.0, 3.0, 12.0, np.nan]
    acc = convention_accuracies(answers, targets, counts)
    assert acc[CB] == pytest.approx(100 * 2 / 6)       # "3", "three"
    assert acc[CBQA] == pytest.approx(100 * 1 / 6)     # "3"
    assert acc[PIXMO] == pytest.approx(100 * 3 / 6)    # "3", "3.", "There are 3"
    assert acc[VCBQA] == pytest.approx(100 * 4 / 6)    # those three and "12" for 2
    assert acc[TALLY] == pytest.approx(100 * 4 / 6)    # "3", "3.", "There are 3", "three"
    assert acc[OURS] == pytest.approx(100 * 4 / 6)
    assert all(np.isnan(v) for v in convention_accuracies([], [], []).values())
    with pytest.raises(ValueError, match="one each"):
        convention_hits(["3"], [3, 4], [3.0])


def test_each_convention_names_its_file_and_function():
    for key, c in CONVENTIONS.items():
        assert key.startswith("conv_") and c.source.endswith(".py") and c.function
        assert c.label == f"{c.harness} {c.source}::{c.function}"


REASONING = "conv_lmms_eval_pixmo_count_reasoning"
# (answer, target, acc_score), each case followed through lmms-eval's reasoning_utils.py: extract_anwser_tag, then
# simple_parse, relax_exact_match and (plain numbers) math_verify's numeric equality
REASONING_CASES = [
    ("<analysis>two rows of 6</analysis><answer>12</answer>", 12, 1),
    ("<analysis>..</analysis>\n<answer>\n 12.\n</answer>", 12, 1),     # the tag spans lines; one period dropped
    ("<answer>12</answer> <answer>13</answer>", 13, 0),              # the first tag
    ("<answer>13</answer> so 12", 12, 0),                            # the tag wins over the closing number
    ("<answer>12.0</answer>", 12, 1),                                # numeric equality (math_verify's fallback)
    ("<answer>twelve</answer>", 12, 0),
    ("so the count is \\boxed{12}", 12, 1),
    ("\\boxed{3} then \\boxed{12}", 12, 1),                          # the last box
    ("\\boxed{12", 12, 1),                                           # unclosed: no box, but the line ends in 12
    ("There are 12.", 12, 1),                                        # the last line's closing number
    ("There are 12 cars", 12, 0),                                    # a number not at the line's end
    ("I see 12.\nThat is all", 12, 1),                               # lines without a closing number are skipped
    ("3 then 12", 12, 1),
    ("12", 2, 0),                                                    # no substring test: "2" is half of "12"
    ("", 0, 0),
    ("0", 0, 1),
    ("<answer>4</answer>", "4 objects", 1),                          # the target's first \d+
]


@pytest.mark.parametrize(("answer", "target", "expected"), REASONING_CASES,
                         ids=[repr(c[0]) + f"/{c[1]}" for c in REASONING_CASES])
def test_pixmo_count_reasoning_follows_lmms_eval_s_reasoning_utils(answer, target, expected):
    assert int(CONVENTIONS[REASONING].score(answer, target)) == expected


def test_the_reasoning_prompt_is_lmms_eval_s_system_message():
    from countboard.models.conventions import REASONING_SYSTEM_PROMPT

    assert REASONING_SYSTEM_PROMPT.startswith("You are a helpful assistant. When user asks a question, your response")
    assert "<analysis>...</analysis>" in REASONING_SYSTEM_PROMPT and "tags.Please provide" in REASONING_SYSTEM_PROMPT


def test_the_reasoning_preset_asks_with_that_system_message(hydra_init):
    from hydra import compose

    from countboard.models.conventions import REASONING_SYSTEM_PROMPT

    cfg = compose("config", overrides=["model=vlm_lmms_reasoning", "model.model_id=some/vlm"])
    assert cfg.model.system_prompt == REASONING_SYSTEM_PROMPT and cfg.model.max_new_tokens == 49152
    assert cfg.model._target_ == compose("config", overrides=["model=vlm"]).model._target_
