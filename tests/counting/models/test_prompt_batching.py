import torch

from countboard.counting.models.prompt_batching import EmbeddingCache, group_by_image


def test_group_by_image_keeps_first_appearance_order():
    a, b, c = object(), object(), object()
    groups = group_by_image([b, a, b, c, a])
    assert [f for f, _ in groups] == [b, a, c]
    assert [idx for _, idx in groups] == [[0, 2], [1, 4], [3]]


def test_embedding_cache_encodes_each_prompt_once_and_evicts_oldest():
    calls = []

    def encode(prompts):
        calls.append(list(prompts))
        return torch.tensor([[float(len(p)), float(ord(p[0]))] for p in prompts])

    cache = EmbeddingCache(encode, max_size=2)
    out = cache(["ab", "c", "ab"])
    assert out.tolist() == [[2.0, 97.0], [1.0, 99.0], [2.0, 97.0]]
    cache(["c", "dddd"])
    assert calls == [["ab", "c"], ["dddd"]]
    cache(["ab"])  # evicted ("ab" was least recently used when "dddd" arrived)
    assert calls[-1] == ["ab"]
