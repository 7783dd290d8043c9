"""The semantic-similarity analysis of the negative test (the PrACo authors' notebook), against a direct loop."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from countboard.metrics.semantic_similarity import negative_pairs, similarity_bins, similarity_correlations


def _loop(counts, classes, images, positives, gt, emb):
    """The notebook's loops, written out: negatives per image, max cosine to a positive, error / its gt."""
    rows = []
    for n, image in enumerate(images):
        for j, c in enumerate(classes):
            if c in positives[n]:
                continue
            sims = [float(np.dot(emb[j], emb[classes.index(p)])) for p in positives[n]]
            best = positives[n][int(np.argmax(sims))]
            err = abs(counts[n][j])
            g = gt[n][best]
            rows.append((image, c, err, max(sims), err / g if g > 0 else err))
    return rows


def test_pairs_equal_the_notebook_loop_on_random_inputs():
    rng = np.random.default_rng(0)
    classes = [f"c{k}" for k in range(7)]
    emb = rng.normal(size=(7, 5))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    images = [f"i{k}" for k in range(9)]
    positives = [list(rng.choice(classes, size=int(rng.integers(1, 4)), replace=False)) for _ in images]
    gt = [{p: float(rng.integers(0, 5)) for p in pos} for pos in positives]
    counts = rng.gamma(1.0, 2.0, size=(9, 7))
    table = negative_pairs(counts, classes, images, positives, gt, emb)
    want = _loop(counts, classes, images, positives, gt, emb)
    got = list(table[["image", "class", "absolute", "max_sim_to_positive", "error_norm_by_pos_gt"]]
               .itertuples(index=False, name=None))
    assert len(got) == len(want) == sum(7 - len(p) for p in positives)
    for g, w in zip(got, want, strict=True):
        assert g[:2] == w[:2]
        np.testing.assert_allclose(g[2:], w[2:], rtol=1e-12)


def test_correlations_equal_scipy_and_need_ten_pairs():
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(1)
    pairs = pd.DataFrame({"max_sim_to_positive": rng.random(40), "absolute": rng.random(40)})
    pairs.loc[3, "absolute"] = np.nan                      # dropped, as the notebook's finite mask
    r = similarity_correlations(pairs)
    ok = pairs.dropna()
    assert r["pearson_r"] == pytest.approx(pearsonr(ok.iloc[:, 0], ok.iloc[:, 1])[0])
    assert r["spearman_r"] == pytest.approx(spearmanr(ok.iloc[:, 0], ok.iloc[:, 1])[0]) and r["n_pairs"] == 39
    assert np.isnan(similarity_correlations(pairs.iloc[:9])["pearson_r"])
    flat = pairs.assign(absolute=1.0)
    assert np.isnan(similarity_correlations(flat)["spearman_r"])


def test_bins_are_pandas_cut_and_quartiles():
    rng = np.random.default_rng(2)
    pairs = pd.DataFrame({"max_sim_to_positive": rng.random(200), "error_norm_by_pos_gt": rng.gamma(1.0, 1.0, 200)})
    bins = similarity_bins(pairs)
    cut, edges = pd.cut(pairs["max_sim_to_positive"], bins=5, retbins=True, labels=False)
    assert bins["n"].sum() == 200 and len(bins) == 5
    for k, row in bins.iterrows():
        values = pairs.loc[cut == k, "error_norm_by_pos_gt"]
        assert row["n"] == len(values) and row["median"] == pytest.approx(values.median())
        assert row["q1"] == pytest.approx(values.quantile(0.25)) and row["low"] == pytest.approx(edges[k])
    pooled = similarity_bins(pairs.iloc[:50], edges=edges)   # bins pooled over several models, as the notebook
    assert list(pooled["low"]) == pytest.approx(list(edges[:-1]))


def test_clip_class_embeddings_on_a_tiny_clip(tmp_path):
    import torch
    from transformers import CLIPModel

    from countboard.counting.models.text_encoder import class_embeddings
    from countboard.grounding.models.clip_gradcam import tiny_clip_config
    from countboard.models.hf_loading import byte_level_clip_tokenizer

    tok = byte_level_clip_tokenizer()
    config = tiny_clip_config(len(tok), image_size=32, patch_size=8, max_length=32)
    config.text_config.bos_token_id = tok.bos_token_id
    config.text_config.eos_token_id = config.text_config.pad_token_id = tok.eos_token_id
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    emb = class_embeddings(["red circles", "blue squares", "red circles"], encoder=str(tmp_path))
    assert emb.shape[0] == 3 and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(emb[0], emb[2], rtol=1e-5)
    assert not np.allclose(emb[0], emb[1])


@pytest.mark.parametrize("name", ["countboard.metrics.semantic_similarity", "countboard.counting.similarity"])
def test_docstring_examples(name):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(name)).failed == 0
