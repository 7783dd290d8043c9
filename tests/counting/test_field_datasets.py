"""PixMo-Count, TallyQA, CAPTURe, FSCD-147, CountQA and MUCCA read from fixtures written in their publishers'
layouts: counts, classes, questions and answers, splits, boxes, and the one line each gives when data is missing."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets.capture import CaptureDataset
from countboard.counting.datasets.countqa import CountQADataset
from countboard.counting.datasets.fscd147 import FSCD147Dataset, coco_boxes
from countboard.counting.datasets.mucca import MuccaDataset, density_map, letterbox_rows, read_image_classes
from countboard.counting.datasets.pixmo_count import PixmoCountDataset, failed_download, row_points, url_key
from countboard.counting.datasets.questions import counted_noun, decode_image, integer_answer
from countboard.counting.datasets.tallyqa import TallyQADataset
from countboard.errors import ConfigError, DataNotFoundError
from tests.fixtures.field_datasets import (
    LABELS,
    MUCCA_CLASSES,
    write_capture,
    write_countqa,
    write_fscd147,
    write_mucca,
    write_pixmo_count,
    write_tallyqa,
)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# --- shared helpers


def test_counted_noun_reads_how_many_questions():
    assert counted_noun("How many headlights does the black bus have?") == "headlights"
    assert counted_noun("how many red apples in the bowl") == "red apples"
    assert counted_noun("Look closely. How many zebras can be seen?") == "zebras"
    assert counted_noun("Count the people.") is None and counted_noun("How many are there?") is None


def test_decode_image_and_integer_answer_refuse_what_they_cannot_read():
    with pytest.raises(ValueError, match="row 3: no image bytes"):
        decode_image({"bytes": b"", "path": "x"}, "row 3")
    assert integer_answer("7", "x") == 7 and integer_answer(3.0, "x") == 3
    for bad in ("seven", "2.5", "-1", None):
        with pytest.raises(ConfigError, match="is not a count"):
            integer_answer(bad, "row 1")


# --- PixMo-Count


def test_pixmo_count_reads_the_hub_parquet_and_molmo_image_cache(tmp_path):
    truth = write_pixmo_count(tmp_path, n=6)
    for split in ("train", "validation", "test"):
        ds = PixmoCountDataset(tmp_path, split=split)
        assert ds.image_ids == [f"pixmo_{split}_{k:05d}" for k in range(6)]
        assert [(ds.class_of(i), ds.count_of(i)) for i in ds.image_ids] == [truth[i] for i in ds.image_ids]
        assert ds.classes == LABELS
        first = ds.image_ids[0]
        assert ds.question_of(first) == f"How many {LABELS[0]} are in the image?"
        assert ds.answer_of(first) == str(truth[first][1])
        item = ds.load(first)
        assert item.image.shape == (64, 80, 3) and item.count_of() == truth[first][1]
        # train rows carry points (as many as the count); the eval splits have none
        assert (LABELS[0] in item.points) == (split == "train")
    train = PixmoCountDataset(tmp_path, split="train", check_sha=True)
    assert all(train.load(i).count_of() == train.count_of(i) for i in train.image_ids)


def test_pixmo_count_finds_images_by_url_hash_or_content_hash(tmp_path):
    write_pixmo_count(tmp_path, n=2)
    frame = pd.read_parquet(tmp_path / "data" / "test-00000-of-00001.parquet")
    assert (tmp_path / "images" / url_key(frame["image_url"][0])).is_file()           # Molmo's cache name
    assert (tmp_path / "images" / f"{frame['image_sha256'][1]}.jpg").is_file()        # the bytes' hash
    assert url_key("x") == hashlib.sha256(b"x").hexdigest()
    assert row_points({"x": [1.0, 2.0], "y": [3.0, 4.0]}).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert row_points([{"x": 1, "y": 2}]).tolist() == [[1.0, 2.0]] and row_points(None) is None


def test_pixmo_count_missing_images_refused_or_skipped(tmp_path, caplog):
    write_pixmo_count(tmp_path, n=5, absent=2)
    with pytest.raises(DataNotFoundError) as caught:
        PixmoCountDataset(tmp_path)
    line = _one_line(caught)
    assert "2 of the 5 images of split 'test' are not downloaded" in line and "dataset.missing=skip" in line
    ds = PixmoCountDataset(tmp_path, missing="skip")
    assert len(ds) == 3 and ds.left_out == 2 and "2 of 5 images" in caplog.text
    with pytest.raises(DataNotFoundError) as caught:
        PixmoCountDataset(tmp_path / "nowhere")
    assert "allenai/pixmo-count" in _one_line(caught)
    with pytest.raises(ConfigError, match="use split in"):
        PixmoCountDataset(tmp_path, split="dev")


def test_pixmo_count_an_error_note_in_the_cache_is_a_missing_image(tmp_path):
    write_pixmo_count(tmp_path, n=3)
    frame = pd.read_parquet(tmp_path / "data" / "test-00000-of-00001.parquet")
    (tmp_path / "images" / url_key(frame["image_url"][0])).write_text("Error: 404 Client Error: Not Found")
    ds = PixmoCountDataset(tmp_path, missing="skip")
    assert ds.left_out == 1 and ds.image_ids == ["pixmo_test_00001", "pixmo_test_00002"]
    assert not failed_download(ds._files["pixmo_test_00001"])


def test_pixmo_count_check_sha_catches_a_replaced_image(tmp_path):
    write_pixmo_count(tmp_path, n=1)
    ds = PixmoCountDataset(tmp_path, check_sha=True)
    path = ds._files[ds.image_ids[0]]
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="is not the row's image_sha256"):
        ds.load(ds.image_ids[0])


# --- TallyQA


def test_tallyqa_reads_vlmevalkit_tsv_with_its_subsets(tmp_path):
    truth = write_tallyqa(tmp_path, n=8)
    ds = TallyQADataset(tmp_path)
    assert ds.image_ids == [f"tallyqa_{1000 + k}" for k in range(8)]
    assert [(ds.class_of(i), ds.count_of(i)) for i in ds.image_ids] == [truth[i][:2] for i in ds.image_ids]
    assert ds.question_of("tallyqa_1001") == "How many blue squares are on the left side?"
    assert ds.answer_of("tallyqa_1003") == "3"
    # row 1001 refers to row 1000's image by its index
    assert np.array_equal(ds.load("tallyqa_1001").image, ds.load("tallyqa_1000").image)
    simple, complex_ = TallyQADataset(tmp_path, subset="simple"), TallyQADataset(tmp_path, subset="complex")
    assert simple.image_ids == [i for i in ds.image_ids if truth[i][2]]
    assert complex_.image_ids == [i for i in ds.image_ids if not truth[i][2]]
    assert ds.unit_fields("tallyqa_1001") == {"question": ds.question_of("tallyqa_1001"), "subset": "complex"}
    assert ds.load("tallyqa_1000").count_of() == 0  # TallyQA asks about absent objects too


def test_tallyqa_subset_from_category_or_refused_without_a_flag(tmp_path):
    truth = write_tallyqa(tmp_path / "cat", flag="category")
    assert TallyQADataset(tmp_path / "cat", subset="simple").image_ids == [i for i in truth if truth[i][2]]
    write_tallyqa(tmp_path / "none", flag=None)
    assert len(TallyQADataset(tmp_path / "none")) == 8
    with pytest.raises(ConfigError) as caught:
        TallyQADataset(tmp_path / "none", subset="complex")
    assert "needs an issimple or category column" in _one_line(caught)


def test_tallyqa_refusals(tmp_path):
    with pytest.raises(DataNotFoundError) as caught:
        TallyQADataset(tmp_path)
    assert "TallyQA.tsv or tallyqa_data.tsv" in _one_line(caught) and "moondream/TallyQA-VLMEvalKit" in str(caught.value)
    pd.DataFrame({"index": [1], "image": ["x" * 80], "question": ["How many?"]}).to_csv(
        tmp_path / "tallyqa_data.tsv", sep="\t", index=False)
    with pytest.raises(ConfigError, match=r"columns \['answer'\] are missing"):
        TallyQADataset(tmp_path)
    pd.DataFrame({"index": [1], "image": ["7"], "question": ["How many?"], "answer": [1]}).to_csv(
        tmp_path / "tallyqa_data.tsv", sep="\t", index=False)
    with pytest.raises(ConfigError, match="refers to row '7', which holds no image"):
        TallyQADataset(tmp_path)


# --- CAPTURe


def test_capture_reads_real_and_synthetic_splits(tmp_path):
    truth = write_capture(tmp_path, n=4)
    real = CaptureDataset(tmp_path)
    assert real.image_ids == [f"capture_real_{1455 + k}" for k in range(4)]
    assert [(real.class_of(i), real.count_of(i)) for i in real.image_ids] == [truth[i] for i in real.image_ids]
    q = real.question_of(real.image_ids[0])
    assert q.startswith("Count the exact number of red circles in the image. Assume the pattern of red circles")
    item = real.load(real.image_ids[0])
    assert item.points == {} and item.count_of() == 3 and item.image[15, 15].max() < 40  # the black box
    syn = CaptureDataset(tmp_path, split="synthetic")
    assert len(syn) == 8 and syn.classes == ["circles", "squares"]
    assert [(syn.class_of(i), syn.count_of(i)) for i in syn.image_ids] == [truth[i] for i in syn.image_ids]
    first = syn.load(syn.image_ids[0])
    assert first.points["circles"].shape == (5, 2)  # positions, the hidden ones included
    assert syn.unit_fields(syn.image_ids[0])["num_occluded"] == 1
    plain = CaptureDataset(tmp_path, split="synthetic", occluded=False)
    assert plain.image_dir.name == "unoccluded_dataset" and not np.array_equal(plain[0].image, first.image)


def test_capture_refusals(tmp_path):
    with pytest.raises(DataNotFoundError) as caught:
        CaptureDataset(tmp_path)
    assert "Missing real_metadata.json" in _one_line(caught) and "atinp/CAPTURe" in str(caught.value)
    write_capture(tmp_path, n=2)
    with pytest.raises(DataNotFoundError) as caught:
        CaptureDataset(tmp_path, occluded=False)  # unocc_real_dataset/: FSC-147's images, not in the release
    assert "unocc_real_dataset" in _one_line(caught) and "2 of the 2 images" in str(caught.value)
    with pytest.raises(ConfigError, match="use one of"):
        CaptureDataset(tmp_path, split="val")
    meta = json.loads((tmp_path / "real_metadata.json").read_text())
    del meta[1]["ground_truth"]
    (tmp_path / "real_metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"entry 1 lacks \['ground_truth'\]"):
        CaptureDataset(tmp_path)


# --- FSCD-147


def test_fscd147_gives_every_object_box_of_val_and_test(tmp_path):
    truth = write_fscd147(tmp_path, n_per_split=3)
    for split in ("val", "test"):
        ds = FSCD147Dataset(tmp_path, split=split)
        assert ds.image_ids == [i for i, t in truth.items() if t[0] == split]
        for image_id in ds.image_ids:
            _, label, count, boxes = truth[image_id]
            item = ds.load(image_id)
            assert item.class_name == label and item.count_of() == count == ds.count_of(image_id)
            assert list(item.object_boxes) == [label] and item.object_boxes[label].shape == (count, 4)
            got = item.object_boxes[label]
            np.testing.assert_allclose(got, boxes, atol=1e-9)   # (y0, x0, y1, x1)
            assert (got[:, 2] > got[:, 0]).all()
            assert item.boxes[label].shape == (3, 4)                           # FSC-147's exemplars stay
    coco = json.loads((tmp_path / "instances_test.json").read_text())
    x, y, w, h = coco["annotations"][0]["bbox"]
    first = coco_boxes(tmp_path / "instances_test.json")[coco["images"][0]["file_name"]][0]
    assert first.tolist() == [y, x, y + h, x + w]


def test_fscd147_refusals(tmp_path):
    write_fscd147(tmp_path)
    with pytest.raises(ConfigError, match="boxes the objects of"):
        FSCD147Dataset(tmp_path, split="train")
    (tmp_path / "instances_val.json").unlink()
    with pytest.raises(DataNotFoundError) as caught:
        FSCD147Dataset(tmp_path, split="val")
    assert "Missing instances_val.json" in _one_line(caught) and "Counting-DETR" in str(caught.value)
    coco = json.loads((tmp_path / "instances_test.json").read_text())
    coco["images"] = coco["images"][1:]
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] in {i["id"] for i in coco["images"]}]
    (tmp_path / "instances_test.json").write_text(json.dumps(coco))
    with pytest.raises(ConfigError, match="1 of the 3 images of split 'test' are not in its images"):
        FSCD147Dataset(tmp_path)
    assert FSCD147Dataset.__init__.__defaults__[1] is None  # FSCD-147 keeps every image by default


# --- CountQA


def test_countqa_reads_questions_and_text_answers(tmp_path):
    truth = write_countqa(tmp_path, n=6)
    ds = CountQADataset(tmp_path)
    assert ds.image_ids == [f"countqa_{k:04d}" for k in range(6)]
    assert [(ds.class_of(i), ds.count_of(i)) for i in ds.image_ids] == [truth[i] for i in ds.image_ids]
    assert ds.answer_of("countqa_0001") == "7" and ds.question_of("countqa_0001").startswith("Count the blue")
    assert ds.load("countqa_0002").image.shape == (64, 64, 3)
    assert len(CountQADataset(tmp_path, max_images=2)) == 2


def test_countqa_class_from_the_question_without_an_object_column(tmp_path):
    write_countqa(tmp_path)
    path = tmp_path / "data" / "test-00000-of-00001.parquet"
    pd.read_parquet(path).drop(columns=["object"]).to_parquet(path)
    ds = CountQADataset(tmp_path)
    assert ds.class_of("countqa_0000") == "red circles"
    assert ds.class_of("countqa_0001") == "Count the blue squares on the table. How many are there"


def test_countqa_refusals(tmp_path):
    with pytest.raises(DataNotFoundError) as caught:
        CountQADataset(tmp_path)
    assert "No CountQA parquet file" in _one_line(caught)
    (tmp_path / "data").mkdir()
    pd.DataFrame({"image": [b""], "question": ["How many?"]}).to_parquet(tmp_path / "data" / "x.parquet")
    with pytest.raises(ConfigError, match=r"columns \['answer'\] are missing"):
        CountQADataset(tmp_path)


# --- MUCCA


def test_mucca_reads_the_zenodo_layout_with_points_in_pixels(tmp_path):
    truth = write_mucca(tmp_path)
    ds = MuccaDataset(tmp_path)
    assert ds.image_ids == list(truth) and ds.classes == MUCCA_CLASSES
    for image_id, t in truth.items():
        assert ds.counts_of(image_id) == t["counts"]
        assert ds.image_classes(image_id) == [c for c in t["points"]]
        item = ds.load(image_id)
        for cls, pts in t["points"].items():
            np.testing.assert_allclose(item.points[cls], pts, atol=1e-6)  # mcac_22's white band added back
        assert ds.count_of(image_id) == max(t["counts"].values())
    assert read_image_classes(tmp_path / "multiclass_image_classes.txt")["mcac_2.jpg"] == ["cups", "forks"]


def test_mucca_density_maps_as_the_authors_script_makes_them(tmp_path):
    from scipy import ndimage

    write_mucca(tmp_path)
    ds = MuccaDataset(tmp_path)
    ann = json.loads((tmp_path / "annotations.json").read_text())
    # mcac_1.jpg is 96 x 128: the map is 384 x 512; cups' sigma is [1.5, 1.0], plates' 2.0, others 1.0
    raw = np.asarray([p for p, c in zip(ann["mcac_1.jpg"]["points"], ann["mcac_1.jpg"]["classes"], strict=True)
                      if c == MUCCA_CLASSES.index("cups")])
    direct = np.zeros((384, 512), np.float32)
    for x, y in raw:  # annotation space equals the target grid here (both 384 px high)
        direct[min(383, max(0, int(round(y)))), min(511, max(0, int(round(x))))] += 1.0
    got = ds.gt_density_map("mcac_1.jpg", "cups")
    np.testing.assert_allclose(got, ndimage.gaussian_filter(direct, sigma=(1.5, 1.0)), atol=1e-6)
    assert ds.sigma_of("plates") == 2.0 and ds.sigma_of("forks") == 1.0
    assert ds.gt_density_map("mcac_2.jpg", "forks").shape == (512, 384)   # portrait: 384 wide
    assert ds.gt_density_map("mcac_22.jpg", "forks").shape == (384, 608)  # the 80 x 128 content, not 112 x 128
    assert ds.gt_density_map("mcac_1.jpg", "grapes") is None               # not in the image
    assert density_map(np.zeros((0, 2)), 100, 300, 1.0).shape == (384, 1152)
    # a map the user generated with the authors' script wins
    (tmp_path / "density_maps").mkdir()
    np.save(tmp_path / "density_maps" / "mcac_1_cups.npy", np.ones((4, 4), np.float32))
    assert ds.gt_density_map("mcac_1.jpg", "cups").shape == (4, 4)


def test_letterbox_rows_is_the_authors_detection():
    image = np.full((10, 4, 3), 255, np.uint8)
    image[3:8] = 100
    assert letterbox_rows(image) == (3, 8) and letterbox_rows(np.full((5, 2, 3), 255, np.uint8)) == (0, 5)


def test_mucca_refusals(tmp_path):
    with pytest.raises(DataNotFoundError) as caught:
        MuccaDataset(tmp_path)
    assert "multiclass_image_classes.txt" in _one_line(caught) and "zenodo.org/records/19231375" in str(caught.value)
    write_mucca(tmp_path)
    (tmp_path / "multiclass_image_classes.txt").write_text("mcac_1.jpg\tplates\n")
    with pytest.raises(ConfigError, match=r"'mcac_1.jpg' lists \['plates'\], but its counts give"):
        MuccaDataset(tmp_path)
    write_mucca(tmp_path)
    (tmp_path / "images" / "mcac_3.jpg").unlink()
    with pytest.raises(DataNotFoundError, match="1 of the 4 images are missing"):
        MuccaDataset(tmp_path)


def test_mucca_reads_the_released_praco_metadata(shared_data):
    """The PrACo repository's multi-class metadata (the layout MUCCA's package unpacks to), without its images:
    200 images, 45 classes, every image's class list agreeing with its counts, every map's mass its count."""
    ds = MuccaDataset(shared_data / "praco_multiclass", check_files=False)
    assert len(ds) == 200 and len(ds.classes) == 45
    for image_id in ds.image_ids[:8]:
        for cls, n in ds.counts_of(image_id).items():
            if n:
                assert ds.gt_density_map(image_id, cls).sum() == pytest.approx(n, rel=1e-4)
    assert ds.gt_density_map("mcac_1.jpg", "bowls").shape == (384, 496)  # 699 x 894: 384 x 16 * round(30.7)
