"""Tiny randomly initialised transformers models saved to disk, loaded back by the counters under test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from countboard.data.base import ImageItem
from countboard.models.hf_loading import byte_level_clip_tokenizer


def tiny_clip_tokenizer():
    """A byte-level CLIP tokenizer with no merges: every character is a token (vocabulary of 514)."""
    return byte_level_clip_tokenizer()


def tiny_bert_tokenizer(tmp_path):
    """A word-piece BERT tokenizer over a handful of words and all lowercase letters.

    Special tokens sit at their ids in ``bert-base-uncased`` ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, "." 1012):
    Grounding DINO finds phrase boundaries by those ids.
    """
    from transformers import BertTokenizer

    vocab = [f"[unused{i}]" for i in range(1030)]
    vocab[0], vocab[100], vocab[101], vocab[102], vocab[103], vocab[1012] = \
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."
    words = ["a", "red", "blue", "green", "circle", "square", "triangle", "circles", "squares", "apples", "zebras",
             "cat", "dog"] + list("bcdefghijklmnopqrstuvwxyz") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab[200:200 + len(words)] = words
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")
    return BertTokenizer(vocab_file=str(vocab_file))


def _clip_text_config(tok) -> dict:
    return dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                max_position_embeddings=16, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id)


@pytest.fixture(scope="session")
def tiny_owlv2_dir(tmp_path_factory):
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_owlv2")
    tok = tiny_clip_tokenizer()
    config = Owlv2Config(
        text_config=_clip_text_config(tok),
        vision_config=dict(image_size=64, patch_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2),
        projection_dim=32,
    )
    Owlv2ForObjectDetection(config).save_pretrained(path)
    Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 64, "width": 64}),
                   tokenizer=tok).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_clipseg_dir(tmp_path_factory):
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, ViTImageProcessor

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_clipseg")
    tok = tiny_clip_tokenizer()
    config = CLIPSegConfig(
        text_config=_clip_text_config(tok),
        vision_config=dict(image_size=64, patch_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2),
        projection_dim=32, extract_layers=[0, 1], reduce_dim=16, decoder_num_attention_heads=2,
        decoder_intermediate_size=32, conditional_layer=0, use_complex_transposed_convolution=True,
    )
    CLIPSegForImageSegmentation(config).save_pretrained(path)
    image_processor = ViTImageProcessor(size={"height": 64, "width": 64}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    CLIPSegProcessor(image_processor=image_processor, tokenizer=tok).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_grounding_dino_dir(tmp_path_factory):
    from transformers import (
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        SwinConfig,
    )

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_grounding_dino")
    tok = tiny_bert_tokenizer(path)
    backbone = SwinConfig(image_size=64, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1],
                          window_size=4, out_indices=[2, 3, 4])
    config = GroundingDinoConfig(
        backbone_config=backbone, use_timm_backbone=False, use_pretrained_backbone=False,
        text_config=dict(model_type="bert", vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=64),
        d_model=32, encoder_layers=1, decoder_layers=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=20, num_feature_levels=4,
        encoder_n_points=1, decoder_n_points=1, max_text_len=32,
    )
    GroundingDinoForObjectDetection(config).save_pretrained(path)
    image_processor = GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96})
    GroundingDinoProcessor(image_processor=image_processor, tokenizer=tok).save_pretrained(path)
    return path


def random_items(n: int, seed: int = 0, sizes=((40, 64), (64, 48), (56, 56))) -> list[ImageItem]:
    """``n`` seeded random RGB images of a few sizes (aspect ratios differ so padding and resizing are exercised)."""
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        items.append(ImageItem(image_id=f"img{i}", image=rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
    return items


@pytest.fixture(scope="session")
def make_items():
    """The :func:`random_items` factory."""
    return random_items
