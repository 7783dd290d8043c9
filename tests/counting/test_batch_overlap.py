"""The negative-label test queues the next batch on the device before it reads this batch's counts."""

import numpy as np

from countboard.batching import Batching
from countboard.counting.tasks.praco import prompt_every_class
from countboard.items import ImageItem
from countboard.models.base import Counter


class _Logged(Counter):
    """Counts every pair as the length of its prompt and logs when each batch is encoded, queued and read."""

    def __init__(self, log, fail_read_of=None):
        super().__init__()
        self.log, self.fail_read_of = log, fail_read_of

    def encode_images(self, items):
        self.log.append(("encode", [it.image_id for it in items]))
        return list(items)

    def decode(self, features, prompts):
        return [np.full((1, 1), float(len(p))) for p in prompts]

    def decode_counts_later(self, features, prompts):
        first = features[0].image_id
        self.log.append(("queue", first))

        def read():
            self.log.append(("read", first))
            if first == self.fail_read_of:
                raise RuntimeError("the device lost this batch")
            return np.array([float(len(p)) for p in prompts])

        return read


class _Ctx:
    def __init__(self, items, size, log=None):
        self.items, self.batching, self.log = {it.image_id: it for it in items}, Batching(size, "cpu"), log

    def queued(self):
        if self.log is not None:
            self.log.append(("queued", None))

    def load(self, _dataset, uid):
        return self.items[uid]

    def batches(self, items, fn):
        return self.batching.batches(items, fn)


def _items(n):
    return [ImageItem(image_id=f"i{k}", image=np.zeros((2, 2, 3), np.uint8)) for k in range(n)]


def test_batch_k_plus_one_is_queued_before_batch_k_is_read():
    log, items = [], _items(5)
    out = prompt_every_class(_Logged(log), None, [it.image_id for it in items], ["ab", "abc"],
                             _Ctx(items, 2, log), lambda item, counts: {"unit_id": item.image_id, "counts": counts})
    steps = [(kind, x if kind != "encode" else x[0]) for kind, x in log]
    # the engine's pending checkpoint is written at the first "queued", while the first batch is on the device
    assert steps == [("encode", "i0"), ("queue", "i0"), ("queued", None), ("encode", "i2"), ("queue", "i2"),
                     ("queued", None), ("read", "i0"), ("encode", "i4"), ("queue", "i4"), ("queued", None),
                     ("read", "i2"), ("read", "i4")]
    assert [r["counts"] for r in out] == [[2.0, 3.0]] * 5


def test_a_batch_whose_read_fails_is_decoded_image_by_image():
    log, items = [], _items(4)
    out = prompt_every_class(_Logged(log, fail_read_of="i0"), None, [it.image_id for it in items], ["ab"],
                             _Ctx(items, 2), lambda item, counts: {"unit_id": item.image_id, "counts": counts})
    assert [r["counts"] for r in out] == [[2.0]] * 4  # the failed read's images counted again through decode


def test_to_host_later_reads_what_to_host_reads():
    import torch

    from countboard.models.transfer import to_host, to_host_later

    tensors = [torch.arange(6).reshape(2, 3), torch.tensor([True, False]), torch.tensor(2.5, dtype=torch.float32)]
    for got, want in zip(to_host_later(tensors).result(), to_host(tensors), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert to_host_later([]).result() == []


def test_queued_counts_equal_decode_counts_for_owlv2_and_clipseg(tiny_owlv2_dir, tiny_clipseg_dir, make_items):
    from countboard.counting.models.clipseg import ClipSegCounter
    from countboard.counting.models.owlv2 import Owlv2Counter

    items = make_items(3, seed=21)
    prompts = ["red circles", "cats", "blue squares"]
    for counter in (Owlv2Counter(str(tiny_owlv2_dir), score_threshold=0.05, nms_iou=0.5),
                    ClipSegCounter(str(tiny_clipseg_dir), mask_threshold=0.5, min_region_frac=0.002)):
        feats = counter.encode_images(items)
        pairs = [f for f in feats for _ in prompts], prompts * len(feats)
        want = counter.decode_counts(*pairs)
        np.testing.assert_array_equal(counter.decode_counts_later(*pairs)(), want)
        assert want.sum() > 0  # some pairs count something: the comparison is not of zeros
