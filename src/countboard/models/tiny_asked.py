"""RANDOM WEIGHTS: tiny image-text-to-text models saved to a folder, for running the asked-in-words path offline.

``build_tiny_vlm(path, arch)`` saves a seeded, randomly initialised LLaVA, PaliGemma or Idefics3 (32 px images, one
or two layers) with a word-level tokenizer built by the ``tokenizers`` library and the architecture's processor;
``AskedModel(path)`` loads it like a hub checkpoint. None of these processors needs ``torchvision``. The saved
generation config suppresses the special tokens, so that every answer is made of vocabulary words (digits and
number words among them): with ``max_new_tokens=1`` every answer is one word, and where a test needs an exact
answer it forces the logits (``force_answer``). Used by the tests, ``benchmarks/vlm_throughput.py`` and sweeps
over a tiny folder.
"""

from __future__ import annotations

from pathlib import Path

ARCHS = ("llava", "paligemma", "idefics3")
#: Words of the tiny vocabulary: digits, number words and the words of the default question.
WORDS = (*"0123456789", "zero", "one", "two", "three", "four", "five", "none", "how", "many", "are", "in", "the",
         "image", "?", "circles", "squares", "triangles", "cats", "dogs", "there", "is")
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {% for c in m['content'] %}"
                 "{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
_IDEFICS_TOKENS = ("<fake_token_around_image>", "<global-img>", "<end_of_utterance>")


def _tokenizer(extra: tuple[str, ...] = (), words: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>", "<image>", "<|user|>", "<|assistant|>", *extra]
    vocab = {w: i for i, w in enumerate(dict.fromkeys([*specials, *WORDS, *words]))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(r"\s+|(?=\?)", behavior="removed")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>", additional_special_tokens=specials[4:])
    return tok, vocab


def _text_config(vocab: dict[str, int], cls):
    return cls(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
               bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])


def build_tiny_vlm(path: str | Path, arch: str = "llava", seed: int = 0, words: tuple[str, ...] = (),
                   answers: tuple[str, ...] = (), size: str = "tiny", **vision: int) -> Path:
    """Save a seeded random ``arch`` model (``ARCHS``), its tokenizer and processor to ``path``; returns it.

    ``words`` are added to the vocabulary after ``WORDS`` (``("yes", "no")`` for yes/no questions); without them
    the model is the same as before they could be given. ``answers``, when given, are the only words the saved
    generation config lets the model answer (every other token suppressed), so that a sweep over the folder gets
    answers a parser reads, still decided by the random weights from the image and the question.

    ``vision`` (LLaVA only: ``image_size``, ``layers``, ``hidden``) sizes the vision tower, so that a benchmark can
    give it a realistic share of the work (the default tower is 32 px, one layer of width 32). ``size``
    (idefics3 only): ``"smolvlm-256m"`` builds SmolVLM-256M's architecture (``SMOLVLM_256M``; the tiny vocabulary),
    for the GPU check's questions per second.
    """
    import torch
    from transformers import GenerationConfig

    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r}: use one of {', '.join(ARCHS)}")
    path = Path(path)
    torch.manual_seed(seed)
    if vision and arch != "llava":
        raise ValueError(f"vision tower sizes are for arch=llava, not {arch!r}")
    if size != "tiny" and (arch, size) != ("idefics3", "smolvlm-256m"):
        raise ValueError(f"size={size!r}: only arch=idefics3 has another size (smolvlm-256m)")
    if arch == "llava":
        model, processor, vocab = _llava(words, **vision)
    elif arch == "idefics3":
        model, processor, vocab = _idefics3(words, size)
    else:
        model, processor, vocab = _paligemma(words)
    suppress = [i for w, i in vocab.items() if w.startswith("<") or (answers and w not in answers)]
    model.generation_config = GenerationConfig(suppress_tokens=suppress, bos_token_id=vocab["<s>"],
                                               eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def _llava(words: tuple[str, ...] = (), image_size: int = 32, layers: int = 1, hidden: int = 32):
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tok, vocab = _tokenizer((), words)
    vision = CLIPVisionConfig(image_size=image_size, patch_size=8 if image_size <= 64 else 16, hidden_size=hidden,
                              intermediate_size=2 * hidden, num_hidden_layers=layers,
                              num_attention_heads=max(2, hidden // 64), projection_dim=32)
    config = LlavaConfig(vision_config=vision, text_config=_text_config(vocab, LlamaConfig),
                         image_token_id=vocab["<image>"], vision_feature_layer=-1, projector_hidden_act="gelu")
    images = CLIPImageProcessorPil(size={"shortest_edge": image_size},
                                   crop_size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=vision.patch_size,
                               num_additional_image_tokens=1,
                               vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE)
    return LlavaForConditionalGeneration(config).eval(), processor, vocab


def _paligemma(words: tuple[str, ...] = ()):
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessorPil,
        SiglipVisionConfig,
    )

    tok, vocab = _tokenizer((), words)
    vision = SiglipVisionConfig(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=1, num_attention_heads=2)
    text = _text_config(vocab, GemmaConfig)
    config = PaliGemmaConfig(vision_config=vision, text_config=text, image_token_id=vocab["<image>"],
                             projection_dim=32)
    config.vision_config.projection_dim = 32
    images = SiglipImageProcessorPil(size={"height": 32, "width": 32})
    images.image_seq_length = 16
    processor = PaliGemmaProcessor(image_processor=images, tokenizer=tok)
    return PaliGemmaForConditionalGeneration(config).eval(), processor, vocab


#: SmolVLM-256M's architecture (HuggingFaceTB/SmolVLM-256M-Instruct's config): a SigLIP-B/16 vision tower at
#: 512 px, pixel shuffle by 4 (64 image tokens), a 30-layer Llama of width 576 (9 heads, 3 key-value heads).
SMOLVLM_256M = {"vision": {"image_size": 512, "patch_size": 16, "hidden_size": 768, "intermediate_size": 3072,
                           "num_hidden_layers": 12, "num_attention_heads": 12},
                "text": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                         "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                         "max_position_embeddings": 8192},
                "scale_factor": 4, "image_seq_len": 64}


def _idefics3(words: tuple[str, ...] = (), size: str = "tiny"):
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
        LlamaConfig,
    )

    tok, vocab = _tokenizer(_IDEFICS_TOKENS, words)
    text = _text_config(vocab, LlamaConfig)
    if size == "smolvlm-256m":
        text = LlamaConfig(**{**text.to_dict(), **SMOLVLM_256M["text"]})
        vision, scale, seq_len = SMOLVLM_256M["vision"], SMOLVLM_256M["scale_factor"], SMOLVLM_256M["image_seq_len"]
    else:
        vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 1, "num_attention_heads": 2}
        scale, seq_len = 2, 4
    config = Idefics3Config(vision_config=vision, text_config=text.to_dict(), image_token_id=vocab["<image>"],
                            scale_factor=scale)
    side = {"longest_edge": vision["image_size"]}
    images = Idefics3ImageProcessorPil(size=side, max_image_size=side, do_image_splitting=False)
    processor = Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=seq_len,
                                  chat_template=CHAT_TEMPLATE)
    return Idefics3ForConditionalGeneration(config).eval(), processor, vocab


def force_answer(model, token_ids: list[int]):
    """Make ``model`` (loaded) answer token ``token_ids[b % len(token_ids)]`` at every step for row ``b`` of a
    batch, whatever it is asked. Returns the hook's handle (``.remove()`` undoes it)."""
    import torch

    def hook(module, args, out):
        rows = torch.tensor([token_ids[b % len(token_ids)] for b in range(out.shape[0])], device=out.device)
        forced = torch.full_like(out, -1e4)
        forced.scatter_(-1, rows[:, None, None].expand(-1, out.shape[1], 1), 1e4)
        return forced

    return model.get_output_embeddings().register_forward_hook(hook)
