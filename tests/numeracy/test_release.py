"""GeckoNum readers on the released files and on small CSVs written in the test."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from countboard.errors import CountboardError, DataNotFoundError
from countboard.numeracy.release import (
    GENERATORS,
    annotation_digests,
    list_annotation_files,
    parse_entities,
    read_annotations,
    read_prompts,
    split_image_id,
)

REPO = Path(__file__).resolve().parents[2]


def test_prompts_counts_per_type(geckonum_dir):
    p = read_prompts(geckonum_dir)
    assert len(p) == 1386
    counts = p["prompt_type"].value_counts()
    assert counts["numeric_simple"] == 600
    assert counts["attribute-color"] == 160
    assert counts["fractional-complex"] == 6
    assert p["task"].value_counts().to_dict() == {1: 1260, 2: 69, 3: 57}
    assert p.loc[700, "entities"] == [("corkscrew", "3"), ("crib", "1"), ("okra", "1")]
    assert p.index.is_unique and p.index.min() == 0 and p.index.max() == 1385


def test_annotation_row_counts_match_paper(geckonum_dir):
    zpath = geckonum_dir / "geckonum_annotations.zip"
    sizes = {t: len(read_annotations(zpath, t)) for t in (1, 2, 3)}
    # The paper reports 479,570 human annotations in total.
    assert sum(sizes.values()) == 479570
    t1 = read_annotations(zpath, 1)
    assert set(t1["model"].cat.categories) == set(GENERATORS)
    assert t1.groupby("model", observed=True)["image_id"].nunique()["imagen_c"] > 10000
    first = t1.iloc[0]
    assert (first["file"], first["line"]) == ("task_1_dalle_3.csv", 2)


def test_zip_and_folder_give_same_rows(geckonum_dir, tmp_path):
    zpath = geckonum_dir / "geckonum_annotations.zip"
    with zipfile.ZipFile(zpath) as zf:
        zf.extract("task_2_muse_a.csv", tmp_path / "annotations")
    from_folder = read_annotations(tmp_path, 2)
    from_zip = read_annotations(zpath, 2)
    from_zip = from_zip[from_zip["model"] == "muse_a"].reset_index(drop=True)
    assert from_folder["answer_num"].tolist() == from_zip["answer_num"].tolist()
    assert from_folder["line"].tolist() == from_zip["line"].tolist()
    zip_digest = annotation_digests(zpath, 2)["task_2_muse_a.csv"]
    assert annotation_digests(tmp_path, 2) == {"task_2_muse_a.csv": zip_digest}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_small_folder_keeps_text_and_lines(tmp_path):
    _write(
        tmp_path / "task_3_gen_x.csv",
        "image_id,model,question_id,question,prompt,annot_id,answer\n"
        'geckonum_00969_0,gen_x,0,Is there bread?,"A loaf, cut",1,1\n'
        "geckonum_00969_0,gen_x,0,Is there bread?,A loaf,2,yes\n",
    )
    df = read_annotations(tmp_path, 3)
    assert df["answer"].astype(str).tolist() == ["1", "yes"]
    assert df["line"].tolist() == [2, 3]
    assert df["prompt"].astype(str).tolist() == ["A loaf, cut", "A loaf"]
    assert [f.generator for f in list_annotation_files(tmp_path)] == ["gen_x"]


def test_missing_column_names_the_file(tmp_path):
    _write(tmp_path / "task_2_gen_x.csv", "image_id,model,prompt,annot_id\nx,gen_x,p,1\n")
    with pytest.raises(CountboardError, match=r"task_2_gen_x\.csv: missing column\(s\) gt_num"):
        read_annotations(tmp_path, 2)


def test_missing_path_and_bad_task(tmp_path):
    with pytest.raises(DataNotFoundError, match="geckonum"):
        read_annotations(tmp_path / "nope", 1)
    with pytest.raises(DataNotFoundError, match="task_"):
        read_annotations(tmp_path, 1)
    with pytest.raises(CountboardError, match="1, 2 or 3"):
        read_annotations(tmp_path, 4)


def test_parse_entities_and_image_ids():
    assert parse_entities("black koala:2,black apple:2") == [("black koala", "2"), ("black apple", "2")]
    assert parse_entities("banana:1/2orange+1/2black") == [("banana", "1/2orange+1/2black")]
    assert split_image_id("geckonum_01385_4") == (1385, 4)
    with pytest.raises(ValueError, match="geckonum_<prompt_id>_<seed>"):
        split_image_id("image7")
    with pytest.raises(ValueError, match="noun:number"):
        parse_entities("dog")
