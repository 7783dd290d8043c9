"""Grounding loaders on small files written here in each dataset's published format, and the synthetic set."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from PIL import Image

from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES
from countboard.errors import ConfigError, DataNotFoundError
from countboard.grounding.datasets.public import (
    Flickr30kEntities,
    RefCocoPlus,
    SpatialSense,
    parse_flickr_sentence,
)
from countboard.grounding.datasets.synthetic import SyntheticGrounding, singular


def _jpg(path, h=30, w=40):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((h, w, 3), 128, np.uint8)).save(path)


FLICKR_CAPTION = "A man pets a dog and the man smiles ."
# Entity 1 ("A man", "the man") has two boxes whose union is (3, 2, 20, 14); entity 2 ("a dog") one box.
FLICKR_BOXES = {"1": [(3.0, 2.0, 15.0, 10.0), (5.0, 4.0, 20.0, 14.0)], "2": [(10.0, 20.0, 15.0, 28.0)]}


@pytest.fixture
def flickr_root(tmp_path):
    """MDETR's merged-GT layout as its converter writes it: one annotation per entity, listing the spans of every
    phrase of that entity, and the per-phrase list in ``tokens_positive_eval``."""
    caption = FLICKR_CAPTION
    doc = {
        "images": [{"file_name": "1000.jpg", "height": 30, "width": 40, "id": 0, "caption": caption,
                    "dataset_name": "flickr", "tokens_negative": [[0, len(caption)]], "sentence_id": 0,
                    "original_img_id": 1000, "tokens_positive_eval": [[[0, 5]], [[11, 16]], [[21, 28]]]}],
        "annotations": [
            {"area": 170, "iscrowd": 0, "image_id": 0, "category_id": 1, "id": 0, "bbox": [2, 3, 12, 17],
             "tokens_positive": [[0, 5], [21, 28]]},
            {"area": 40, "iscrowd": 0, "image_id": 0, "category_id": 1, "id": 1, "bbox": [20, 10, 8, 5],
             "tokens_positive": [[11, 16]]},
        ],
        "categories": [{"supercategory": "object", "id": 1, "name": "object"}],
    }
    (tmp_path / "final_flickr_mergedGT_test.json").write_text(json.dumps(doc))
    _jpg(tmp_path / "flickr30k-images" / "1000.jpg")
    return tmp_path


def test_flickr30k_entities_one_sample_per_phrase(flickr_root):
    ds = Flickr30kEntities(flickr_root)
    assert ds.ids() == ["1000_0_0", "1000_0_1", "1000_0_2"]
    assert [ds[i].phrase for i in ds.ids()] == ["A man", "a dog", "the man"]
    assert ds["1000_0_0"].box == ds["1000_0_2"].box == (3.0, 2.0, 20.0, 14.0)  # [x, y, w, h] -> (y0, x0, y1, x1)
    assert ds["1000_0_1"].box == (10.0, 20.0, 15.0, 28.0)
    s = ds["1000_0_1"]
    assert s.load_image().shape == (30, 40, 3) and s.meta["image_size"] == (30, 40)
    assert s.meta["caption"] == FLICKR_CAPTION
    assert len(Flickr30kEntities(flickr_root, max_samples=1)) == 1


def test_flickr30k_entities_mdetr_file_without_phrase_list_is_rejected(flickr_root):
    path = flickr_root / "final_flickr_mergedGT_test.json"
    doc = json.loads(path.read_text())
    del doc["images"][0]["tokens_positive_eval"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="tokens_positive_eval"):
        Flickr30kEntities(flickr_root)


def _xml_object(names, box=None):
    inner = "".join(f"<name>{n}</name>" for n in names)
    if box is None:
        return f"<object>{inner}<nobndbox>1</nobndbox><scene>0</scene></object>"
    y0, x0, y1, x1 = box
    return (f"<object>{inner}<bndbox><xmin>{x0:g}</xmin><ymin>{y0:g}</ymin><xmax>{x1:g}</xmax>"
            f"<ymax>{y1:g}</ymax></bndbox></object>")


@pytest.fixture
def flickr_raw_root(tmp_path):
    """The original release for the same image: Sentences/ with [/EN#id/type ...] markup, Annotations/ XML."""
    (tmp_path / "Sentences").mkdir()
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Sentences" / "1000.txt").write_text(
        "[/EN#1/people A man] pets [/EN#2/animals a dog] and [/EN#1/people the man] smiles .\n"
        "[/EN#0/notvisual It] is [/EN#3/scene a sunny park] with [/EN#2/animals/other dog] .\n")
    objects = [_xml_object(["1"], FLICKR_BOXES["1"][0]), _xml_object(["1"], FLICKR_BOXES["1"][1]),
               _xml_object(["2"], FLICKR_BOXES["2"][0]), _xml_object(["3"])]
    (tmp_path / "Annotations" / "1000.xml").write_text(
        "<annotation><filename>1000.jpg</filename><size><width>40</width><height>30</height><depth>3</depth>"
        f"</size>{''.join(objects)}</annotation>")
    (tmp_path / "test.txt").write_text("1000\n")
    _jpg(tmp_path / "flickr30k-images" / "1000.jpg")
    return tmp_path


def test_flickr30k_entities_raw_release(flickr_raw_root):
    ds = Flickr30kEntities(flickr_raw_root, layout="raw")
    # Sentence 1: "It" (not visual) and "a sunny park" (no box) are not grounded; "dog" is.
    assert ds.ids() == ["1000_0_0", "1000_0_1", "1000_0_2", "1000_1_0"]
    assert [ds[i].phrase for i in ds.ids()] == ["A man", "a dog", "the man", "dog"]
    assert ds["1000_0_0"].box == ds["1000_0_2"].box == (3.0, 2.0, 20.0, 14.0)  # union of entity 1's boxes
    assert ds["1000_1_0"].box == FLICKR_BOXES["2"][0]
    assert ds["1000_1_0"].meta["caption"] == "It is a sunny park with dog ."
    assert ds["1000_1_0"].meta["phrase_type"] == "animals/other"
    assert ds["1000_0_0"].load_image().shape == (30, 40, 3) and ds["1000_0_0"].meta["image_size"] == (30, 40)


def test_flickr30k_entities_layouts_agree(flickr_root, flickr_raw_root):
    mdetr = Flickr30kEntities(flickr_root)
    raw = Flickr30kEntities(flickr_raw_root, layout="raw")
    for i in mdetr.ids():
        assert (mdetr[i].phrase, mdetr[i].box, mdetr[i].meta["caption"]) == \
            (raw[i].phrase, raw[i].box, raw[i].meta["caption"])


def test_flickr30k_entities_raw_errors(flickr_raw_root):
    with pytest.raises(ConfigError, match="layout"):
        Flickr30kEntities(flickr_raw_root, layout="coco")
    with pytest.raises(DataNotFoundError, match="val.txt"):
        Flickr30kEntities(flickr_raw_root, layout="raw", split="val")
    (flickr_raw_root / "Sentences" / "1000.txt").write_text("[/EN#1/people A man walks .\n")
    with pytest.raises(ConfigError, match=r"1000.txt:1: .*not closed"):
        Flickr30kEntities(flickr_raw_root, layout="raw")


@pytest.mark.parametrize("line", [
    "[/EN#5/people A] [/EN#6/other b c] d",
    "x [/EN#7/bodyparts/clothing his hand] , and [/EN#8/other ball] .",
])
def test_parse_flickr_sentence_spans_index_the_sentence(line):
    sentence, phrases = parse_flickr_sentence(line)
    assert "[" not in sentence and "]" not in sentence
    for p in phrases:
        assert sentence[p["span"][0]:p["span"][1]] == p["phrase"]


@pytest.fixture
def refcoco_root(tmp_path):
    refs = [
        {"ref_id": 7, "ann_id": 70, "image_id": 5, "split": "testA", "category_id": 1,
         "file_name": "COCO_train2014_000000000005_70.jpg",
         "sentences": [{"raw": "Left man", "sent": "left man", "sent_id": 100, "tokens": ["left", "man"]},
                       {"raw": "man in blue", "sent": "man in blue", "sent_id": 101, "tokens": []}]},
        {"ref_id": 8, "ann_id": 71, "image_id": 5, "split": "testB", "category_id": 2,
         "file_name": "COCO_train2014_000000000005_71.jpg",
         "sentences": [{"raw": "red car", "sent": "red car", "sent_id": 102, "tokens": []}]},
    ]
    with (tmp_path / "refs(unc).p").open("wb") as f:
        pickle.dump(refs, f, protocol=2)
    inst = {"images": [{"id": 5, "file_name": "COCO_train2014_000000000005.jpg", "height": 30, "width": 40}],
            "annotations": [{"id": 70, "image_id": 5, "bbox": [1.5, 2.0, 10.0, 12.0], "category_id": 1},
                            {"id": 71, "image_id": 5, "bbox": [20.0, 5.0, 15.0, 10.0], "category_id": 2}],
            "categories": [{"id": 1, "name": "person"}, {"id": 2, "name": "car"}]}
    (tmp_path / "instances.json").write_text(json.dumps(inst))
    _jpg(tmp_path / "train2014" / "COCO_train2014_000000000005.jpg")
    return tmp_path


def test_refcoco_plus_splits(refcoco_root):
    a = RefCocoPlus(refcoco_root, split="testA")
    assert a.ids() == ["7_100", "7_101"]
    assert [a[i].phrase for i in a.ids()] == ["left man", "man in blue"]
    assert a["7_100"].box == (2.0, 1.5, 14.0, 11.5) and a["7_100"].meta["category"] == "person"
    b = RefCocoPlus(refcoco_root, split="testB")
    assert b.ids() == ["8_102"] and b["8_102"].box == (5.0, 20.0, 15.0, 35.0)
    assert b["8_102"].load_image().shape == (30, 40, 3)
    with pytest.raises(ConfigError, match="testA, testB"):
        RefCocoPlus(refcoco_root, split="testC")


@pytest.fixture
def spatialsense_root(tmp_path):
    def rel(_id, label, pred="on"):
        return {"_id": _id, "predicate": pred, "label": label,
                "subject": {"name": "cat", "x": 5, "y": 6, "bbox": [2, 12, 3, 9]},
                "object": {"name": "mat", "x": 20, "y": 25, "bbox": [20, 29, 1, 38]}}

    doc = [
        {"url": "https://farm4.staticflickr.com/35/5704_ab.jpg", "nsid": "x", "height": 30, "width": 40,
         "split": "test", "annotations": [rel("r1", True), rel("r2", False, "under")]},
        {"url": "http://example.org/nyu/nyu_0001.jpg", "height": 30, "width": 40, "split": "test",
         "annotations": [rel("r3", True, "next to")]},
        {"url": "https://farm4.staticflickr.com/35/9999_cd.jpg", "height": 30, "width": 40, "split": "train",
         "annotations": [rel("r4", True)]},
    ]
    (tmp_path / "annotations.json").write_text(json.dumps(doc))
    _jpg(tmp_path / "images" / "flickr" / "5704_ab.jpg")
    _jpg(tmp_path / "images" / "nyu" / "nyu_0001.jpg")
    return tmp_path


def test_spatialsense_settings(spatialsense_root):
    trip = SpatialSense(spatialsense_root, setting="triplet")
    assert trip.ids() == ["r1", "r3"]  # positive test relations only
    assert trip["r3"].phrase == "cat next to mat"
    assert trip["r1"].box == (2.0, 3.0, 12.0, 9.0)  # [y0, y1, x0, x1] -> (y0, x0, y1, x1), subject box
    subj = SpatialSense(spatialsense_root, setting="subject")
    assert subj["r1"].phrase == "cat" and subj["r1"].box == trip["r1"].box
    obj = SpatialSense(spatialsense_root, setting="object")
    assert obj["r1"].phrase == "mat" and obj["r1"].box == (20.0, 1.0, 29.0, 38.0)
    assert trip["r3"].image_path.parts[-2:] == ("nyu", "nyu_0001.jpg")
    assert trip["r1"].load_image().shape == (30, 40, 3)
    assert SpatialSense(spatialsense_root, split="train").ids() == ["r4"]
    with pytest.raises(ConfigError, match="triplet, subject, object"):
        SpatialSense(spatialsense_root, setting="predicate")


@pytest.mark.parametrize(("cls", "missing", "key"), [
    (Flickr30kEntities, "final_flickr_mergedGT_test.json", "dataset.annotation_file"),
    (RefCocoPlus, "refs(unc).p", "dataset.refs_file"),
    (SpatialSense, "annotations.json", "dataset.annotation_file"),
])
def test_missing_files_name_path_key_and_source(tmp_path, cls, missing, key):
    with pytest.raises(DataNotFoundError) as err:
        cls(tmp_path / "nowhere")
    msg = str(err.value)
    assert missing in msg and key in msg and "http" in msg


def test_missing_image_is_a_clear_error(flickr_root):
    (flickr_root / "flickr30k-images" / "1000.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="sample 1000_0_0 not found"):
        Flickr30kEntities(flickr_root)["1000_0_0"].load_image()


def test_synthetic_grounding_is_deterministic_and_boxes_hold_the_target():
    a = SyntheticGrounding(n_samples=6, image_size=(128, 128), size_range=(20, 32), seed=3)
    b = SyntheticGrounding(n_samples=6, image_size=(128, 128), size_range=(20, 32), seed=3)
    assert a.ids() == b.ids() == [f"g{k:05d}" for k in range(6)]
    for s, t in zip(a.samples, b.samples, strict=True):
        assert s.phrase == t.phrase and s.box == t.box and np.array_equal(s.image, t.image)
        colour = np.array(SHAPE_CLASSES[s.meta["class_name"]][1])
        close = np.abs(s.image.astype(int) - colour).max(axis=2) <= 20
        y0, x0, y1, x1 = (int(v) for v in s.box)
        assert close.sum() > 20 and close[y0:y1, x0:x1].sum() == close.sum()
        assert s.phrase == f"the {singular(s.meta['class_name'])}"
        assert 2 <= s.meta["n_objects"] <= 4
    other = SyntheticGrounding(n_samples=6, image_size=(128, 128), size_range=(20, 32), seed=4)
    assert not np.array_equal(other.samples[0].image, a.samples[0].image)


def test_synthetic_grounding_rejects_impossible_settings():
    with pytest.raises(ConfigError, match="objects_range"):
        SyntheticGrounding(n_samples=1, objects_range=(2, 12))
    with pytest.raises(ConfigError, match="cannot place"):
        SyntheticGrounding(n_samples=1, image_size=(40, 40), objects_range=(4, 4), size_range=(30, 30))


@pytest.mark.parametrize("module", ["countboard.grounding.datasets.public", "countboard.grounding.datasets.synthetic",
                                    "countboard.grounding.datasets.safe_pickle"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


class _RunsCode:
    """Unpickling this calls ``Path.touch`` on ``marker``: what a crafted refs file could do with ``os.system``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return Path.touch, (Path(self.marker),)


def _write_refs(root, refs):
    with (root / "refs(unc).p").open("wb") as f:
        pickle.dump(refs, f, protocol=2)


def test_refcoco_refs_file_cannot_run_code(refcoco_root):
    marker = refcoco_root / "pwned"
    with (refcoco_root / "refs(unc).p").open("rb") as f:
        refs = pickle.load(f)
    refs[0]["payload"] = _RunsCode(str(marker))
    _write_refs(refcoco_root, refs)
    with pytest.raises(ConfigError, match=r"refs\(unc\)\.p \(dataset.refs_file\): refused .*"
                                          r"dataset.allow_unsafe_pickle=true"):
        RefCocoPlus(refcoco_root, split="testA")
    assert not marker.exists()
    # The explicit opt-in loads it with the full pickle module (and so runs the payload).
    assert RefCocoPlus(refcoco_root, split="testA", allow_unsafe_pickle=True).ids() == ["7_100", "7_101"]
    assert marker.exists()


def test_refcoco_refs_with_numpy_values_load_restricted(refcoco_root):
    with (refcoco_root / "refs(unc).p").open("rb") as f:
        refs = pickle.load(f)
    refs[0]["ref_id"] = np.int64(7)
    refs[0]["box"] = np.array([1.5, 2.0, 10.0, 12.0])
    refs[0]["tags"] = {"left", "man"}
    _write_refs(refcoco_root, refs)
    assert RefCocoPlus(refcoco_root, split="testA").ids() == ["7_100", "7_101"]


def test_refcoco_refs_that_are_not_a_pickle(refcoco_root):
    (refcoco_root / "refs(unc).p").write_bytes(b"not a pickle at all")
    with pytest.raises(ConfigError, match="not a readable pickle"):
        RefCocoPlus(refcoco_root, split="testA")
