"""Kernels per (image, class) pair of the transformers counters, counted on the CPU at their checkpoints' depth.

A GPU idles when the host cannot launch kernels as fast as the GPU runs them; how many kernels a counter asks for is
a number a CPU counts exactly, under any load (``countboard.models.kernel_count``). Each counter is built with the
depth of its hub checkpoint and a tiny width, random weights, offline (OWLv2-base: 12 vision + 12 text layers at
64 px; CLIPSeg rd64: 12 + 12 layers, extract layers 3/6/9, at 352 px; grounding-dino-tiny: Swin-T, a 12-layer
BERT, 6 + 6 fusion-encoder and decoder layers, 64-96 px; omdet-turbo-swin-tiny: Swin-T, a 12-layer CLIP text
tower, 1 encoder + 6 decoder layers, 64 px), and runs the negative-label test's own code
(``counting.tasks.praco.prompt_every_class``: each batch encoded once, every (image, class) pair of the batch in one
``decode_counts`` call) over synthetic-shapes-like images of its 8 classes, ``--batch-size`` images per batch, in
``fp32`` and ``bf16`` (``models.precision.numerics``, as a sweep job runs). The figure is the marginal count between
``--small`` and ``--large`` images per class, divided by the images added (each image is one unit: its 8 pairs),
so that loading and text encoding cancel out: a sweep's ``n_samples`` is the same unit.

Printed per counter and precision: kernels, casts, fills and host syncs per image, bf16 over fp32, and the budget
(``BUDGETS``; ``tests/models/test_dispatch_budget.py`` fails when a counter grows past it).

    python benchmarks/dispatch_budget.py                 # owlv2 and clipseg, fp32 and bf16
    python benchmarks/dispatch_budget.py --counters grounding_dino,omdet_turbo
    python benchmarks/dispatch_budget.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from countboard.batching import Batching
from countboard.counting.tasks.praco import prompt_every_class
from countboard.items import ImageItem
from countboard.models.hf_loading import byte_level_clip_tokenizer
from countboard.models.kernel_count import Figures, KernelCount, per_pair_marginal
from countboard.models.precision import numerics

#: Kernels per image (8 pairs) each counter may dispatch in fp32 in the task's code (measured 4.1 and 11.0: about
#: twice that, so that an image's or a pair's own loop coming back fails; Grounding DINO 446 and OmDet-Turbo 37.4,
#: with a little headroom: DINO's Swin backbone, one image per call by design, is most of its figure, and its
#: per-image head loop coming back would add about 1800); bf16 may cost ``BF16_OVER_FP32`` times that. A whole sweep
#: process adds about 12 per image around the counter (docs/benchmarks.md).
BUDGETS = {"owlv2": 8.0, "clipseg": 22.0, "grounding_dino": 500.0, "omdet_turbo": 45.0}
BF16_OVER_FP32 = 1.25
CLASSES = ["red circles", "blue squares", "green triangles", "yellow stars", "purple crosses", "orange rings",
           "cyan diamonds", "pink hexagons"]


def _text(tok, layers: int, positions: int) -> dict:
    return dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                num_attention_heads=4, max_position_embeddings=positions)


def build_owlv2(path: Path) -> Path:
    """OWLv2 at OWLv2-base's depth (12 + 12 layers), 32 wide, 64 px, patch 16, seeded random weights."""
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    tok = byte_level_clip_tokenizer()
    torch.manual_seed(0)
    cfg = Owlv2Config(text_config=_text(tok, 12, 16),
                      vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=12,
                                         num_attention_heads=4, image_size=64, patch_size=16), projection_dim=32)
    Owlv2ForObjectDetection(cfg).save_pretrained(path)
    Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 64, "width": 64}),
                   tokenizer=tok).save_pretrained(path)
    return path


def build_clipseg(path: Path) -> Path:
    """CLIPSeg at rd64's depth (12 + 12 layers, extract layers 3/6/9, complex transposed convolution), 32 wide,
    352 px processor, seeded random weights."""
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, ViTImageProcessor

    tok = byte_level_clip_tokenizer()
    torch.manual_seed(0)
    cfg = CLIPSegConfig(text_config=_text(tok, 12, 77),
                        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=12,
                                           num_attention_heads=4, patch_size=16, image_size=224),
                        projection_dim=32, extract_layers=[3, 6, 9], reduce_dim=16, decoder_num_attention_heads=4,
                        decoder_intermediate_size=64, use_complex_transposed_convolution=True)
    CLIPSegForImageSegmentation(cfg).save_pretrained(path)
    CLIPSegProcessor(image_processor=ViTImageProcessor(size={"height": 352, "width": 352}),
                     tokenizer=tok).save_pretrained(path)
    return path


def _swin(depths: list[int]) -> dict:
    """A Swin-T backbone's depth (4 stages, ``depths`` blocks) at 8 wide, patch 4, window 4."""
    return dict(image_size=64, patch_size=4, embed_dim=8, depths=depths, num_heads=[1, 1, 1, 1], window_size=4,
                out_indices=[2, 3, 4])


def bert_tokenizer(path: Path):
    """A word-piece BERT tokenizer whose vocabulary holds the classes' words (each class two tokens, as in
    ``bert-base-uncased``) at ``bert-base-uncased``'s special ids (Grounding DINO finds phrases by them)."""
    from transformers import BertTokenizer

    vocab = [f"[unused{i}]" for i in range(1030)]
    vocab[0], vocab[100], vocab[101], vocab[102], vocab[103], vocab[1012] = \
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."
    words = sorted({w for c in CLASSES for w in c.split()})
    vocab[200:200 + len(words)] = words
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return BertTokenizer(vocab_file=str(path / "vocab.txt"))


def build_grounding_dino(path: Path) -> Path:
    """Grounding DINO at grounding-dino-tiny's depth (Swin-T 2/2/6/2 blocks, a 12-layer BERT, 6 fusion-encoder and
    6 decoder layers, 4 feature levels), 8 to 32 wide, 64-96 px processor, seeded random weights."""
    from transformers import (
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        SwinConfig,
    )

    tok = bert_tokenizer(path)
    torch.manual_seed(0)
    cfg = GroundingDinoConfig(
        backbone_config=SwinConfig(**_swin([2, 2, 6, 2])), use_timm_backbone=False, use_pretrained_backbone=False,
        text_config=dict(model_type="bert", vocab_size=len(tok), hidden_size=16, num_hidden_layers=12,
                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=64),
        d_model=32, encoder_layers=6, decoder_layers=6, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=20, num_feature_levels=4,
        encoder_n_points=1, decoder_n_points=1, max_text_len=32)
    GroundingDinoForObjectDetection(cfg).save_pretrained(path)
    GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(
        size={"shortest_edge": 64, "longest_edge": 96}), tokenizer=tok).save_pretrained(path)
    return path


def build_omdet_turbo(path: Path) -> Path:
    """OmDet-Turbo at omdet-turbo-swin-tiny's depth (Swin-T 2/2/6/2 blocks, a 12-layer CLIP text tower, one
    hybrid-encoder layer, 6 decoder layers), 8 to 32 wide, 64 px, seeded random weights."""
    from transformers import DetrImageProcessorPil, OmDetTurboConfig, OmDetTurboForObjectDetection, SwinConfig

    tok = byte_level_clip_tokenizer()
    torch.manual_seed(0)
    cfg = OmDetTurboConfig(
        backbone_config=SwinConfig(**_swin([2, 2, 6, 2])), text_config=dict(
            _text(tok, 12, 77), model_type="clip_text_model", hidden_size=24),
        image_size=64, apply_layernorm_after_vision_backbone=False, text_projection_in_dim=24,
        text_projection_out_dim=24, class_embed_dim=24, task_encoder_hidden_dim=32, num_queries=20,
        encoder_hidden_dim=16, vision_features_channels=[16, 16, 16], encoder_in_channels=[16, 32, 64],
        encoder_layers=1, encoder_attention_heads=2, encoder_dim_feedforward=32, decoder_hidden_dim=16,
        decoder_num_heads=2, decoder_num_layers=6, decoder_dim_feedforward=32, decoder_num_points=1,
        disable_custom_kernels=True)
    OmDetTurboForObjectDetection(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    DetrImageProcessorPil(size={"height": 64, "width": 64}).save_pretrained(path)
    return path


BUILDERS = {"owlv2": build_owlv2, "clipseg": build_clipseg, "grounding_dino": build_grounding_dino,
            "omdet_turbo": build_omdet_turbo}


def counter(name: str, folder: Path):
    """The counter ``name`` as its config builds it (defaults of ``conf/model/<name>.yaml``), from ``folder``."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from countboard.paths import conf_dir

    node = OmegaConf.load(conf_dir() / "model" / f"{name}.yaml")
    keep = {k: v for k, v in node.items() if k not in ("name", "kind", "display_name", "description")}
    return instantiate({**keep, "model_id": str(folder), "device": "cpu"})


def images(n_per_class: int, size: tuple[int, int] = (96, 128)) -> list[ImageItem]:
    """``n_per_class`` seeded random images for each of the 8 classes (one size, as synthetic shapes)."""
    rng = np.random.default_rng(0)
    return [ImageItem(image_id=f"{c}-{k}", image=rng.integers(0, 256, (*size, 3), dtype=np.uint8), class_name=c)
            for c in CLASSES for k in range(n_per_class)]


class _Context:
    """What ``prompt_every_class`` reads of a job: its loader, its batching and ``queued`` (no checkpoint waits
    here)."""

    def __init__(self, items: list[ImageItem], batch_size: int):
        self._items = {it.image_id: it for it in items}
        self.batching = Batching(batch_size, "cpu")

    def load(self, _dataset, uid: str) -> ImageItem:
        return self._items[uid]

    def batches(self, items, fn):
        return self.batching.batches(items, fn)

    def queued(self) -> None:
        pass


def count_cell(model, n_per_class: int, precision: str, batch_size: int) -> Figures:
    """Kernels of one negative-label cell of ``n_per_class`` images per class (after a warm-up cell)."""
    items = images(n_per_class)
    ctx = _Context(items, batch_size)
    ids = [it.image_id for it in items]
    with numerics("cpu", precision):
        prompt_every_class(model, None, ids[:1], CLASSES, ctx, lambda item, counts: {})  # text cache, lazy init
        with KernelCount() as k:
            prompt_every_class(model, None, ids, CLASSES, ctx, lambda item, counts: {})
    return k.figures()


def per_image(model, precision: str, small: int = 4, large: int = 12, batch_size: int = 64) -> Figures:
    """Kernels per image (its 8 pairs) between cells of ``small`` and ``large`` images per class."""
    a, b = count_cell(model, small, precision, batch_size), count_cell(model, large, precision, batch_size)
    return per_pair_marginal(a, b, (large - small) * len(CLASSES))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counters", default="owlv2,clipseg")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--small", type=int, default=4)
    ap.add_argument("--large", type=int, default=12)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.counters.split(","):
            model = counter(name, BUILDERS[name](Path(tmp) / name))
            fp32 = None
            for precision in args.precision.split(","):
                f = per_image(model, precision, args.small, args.large, args.batch_size)
                fp32 = f.kernels if precision == "fp32" else fp32
                budget = BUDGETS[name] if precision == "fp32" else BUDGETS[name] * BF16_OVER_FP32
                over = f"{f.kernels / fp32:.2f}" if fp32 and precision != "fp32" else "-"
                ok = f.kernels <= budget and (over == "-" or float(over) <= BF16_OVER_FP32)
                failed |= not ok
                rows.append(dict(counter=name, precision=precision, kernels=f.kernels, casts=f.casts, fills=f.fills,
                                 syncs=f.syncs, over_fp32=over, budget=budget, ok=ok))
                print(f"{name:8s} {precision:5s} kernels/image {f.kernels:7.1f}  casts {f.casts:5.1f}  fills "
                      f"{f.fills:4.1f}  syncs {f.syncs:4.2f}  bf16/fp32 {over:>5s}  budget {budget:5.1f}  "
                      f"{'ok' if ok else 'OVER'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
