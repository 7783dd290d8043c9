"""Text generators: controlled prompts → texts, in batches; a transformers causal-LM adapter.

``TextGenerator.generate_batch`` turns a list of ``TextPrompt`` into one ``GeneratedText`` each; ``generate`` walks
a prompt list in batches of ``batch_size``. ``CausalLMGenerator`` loads any causal LM by hub id (or local
directory) with ``from_pretrained``, wraps prompts in the tokenizer's chat template where it has one, and samples
with the ``generation`` settings of its config. ``TinyRandomCausalLM`` is the same adapter on a seeded, randomly
initialised two-layer Llama with a word-level tokenizer, built in a temporary directory: it exercises the pipeline
offline and its texts are noise.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from countboard.acs.datasets.text_prompts import TextPrompt
from countboard.errors import ConfigError
from countboard.items import GeneratedText
from countboard.models.base import TextGenerator, stable_seed

#: Sampling defaults of ``CausalLMGenerator`` (any ``transformers.GenerationConfig`` key may be set in config).
DEFAULT_GENERATION = {"max_new_tokens": 120, "do_sample": True, "temperature": 0.7, "top_p": 0.95}


class CausalLMGenerator(TextGenerator):
    """A transformers causal LM (``AutoModelForCausalLM``) as a text generator.

    Args:
        model_id: Hub id or local directory.
        device: ``"cpu"`` or ``"cuda"``.
        batch_size: Prompts per ``generate`` call (left-padded).
        seed: Sampling seed (combined with each batch's prompt ids).
        generation: ``GenerationConfig`` settings (default ``DEFAULT_GENERATION``; keys given here replace those).
        chat_template: ``"auto"`` (use the tokenizer's template when it has one), ``True`` (required) or
            ``False`` (plain prompt).
        system_prompt: Optional system message for chat templates.
        dtype: ``"auto"``, ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        revision: Hub revision (commit, tag or branch).
    """

    def __init__(self, model_id: str, device: str = "cpu", batch_size: int = 8, seed: int = 0,
                 generation: Mapping[str, Any] | None = None, chat_template: bool | str = "auto",
                 system_prompt: str | None = None, dtype: str = "auto", revision: str | None = None):
        super().__init__(device, batch_size, seed)
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if chat_template not in ("auto", True, False):
            raise ConfigError(f"model.chat_template must be auto, true or false, got {chat_template!r}")
        self.model_id = str(model_id)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_id, revision=revision)
            self.model = AutoModelForCausalLM.from_pretrained(self.model_id, revision=revision, dtype=_dtype(dtype))
        except OSError as exc:
            raise ConfigError(f"cannot load causal LM {self.model_id!r} (model.model_id): {exc}. Offline, point "
                              "model.model_id at a local directory or use model=tiny_causal_lm") from exc
        self.model.to(device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if chat_template is True and not has_template:
            raise ConfigError(f"model.chat_template=true but the tokenizer of {self.model_id!r} has no chat template")
        self.use_chat = has_template if chat_template == "auto" else bool(chat_template)
        self.system_prompt = system_prompt
        settings = {**DEFAULT_GENERATION, **dict(generation or {})}
        settings.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        try:
            self.generation_config = GenerationConfig(**settings)
            self.generation_config.validate()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"model.generation is not a valid GenerationConfig: {exc}") from exc

    def format_prompt(self, prompt: str) -> str:
        """The prompt as the model sees it (through the chat template when one is used)."""
        if not self.use_chat:
            return prompt
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def generate_batch(self, prompts: Sequence[TextPrompt]) -> list[GeneratedText]:
        import torch

        texts = [self.format_prompt(p.prompt) for p in prompts]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not self.use_chat)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        torch.manual_seed(stable_seed(self.seed, *(p.prompt_id for p in prompts)))
        with torch.inference_mode():
            out = self.model.generate(**enc, generation_config=self.generation_config)
        new = out[:, enc["input_ids"].shape[1]:]
        decoded = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return [GeneratedText(p, t.strip()) for p, t in zip(prompts, decoded, strict=True)]


def _dtype(name: str):
    import torch

    choices = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in choices:
        raise ConfigError(f"model.dtype must be one of {list(choices)}, got {name!r}")
    return choices[name]


#: Words of the tiny model's vocabulary (its random weights string them together).
_TINY_TEXT = ("the a she he they it was is felt day story sun rain happy sad calm good bad home friend dog cat "
              "walked smiled cried laughed lost found morning night garden school city train quiet . , !")
TINY_WORDS = tuple(_TINY_TEXT.split(" "))
TINY_CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                      "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def build_tiny_causal_lm(path: str | Path, *, seed: int = 0, chat_template: bool = True) -> Path:
    """Save a seeded, randomly initialised two-layer Llama and a word-level tokenizer to ``path``.

    The tokenizer knows ``TINY_WORDS``, the chat role markers and ``<s> </s> <pad> <unk>``; with
    ``chat_template`` it carries ``TINY_CHAT_TEMPLATE``. Random weights: the texts are word salad.
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    specials = ["<pad>", "<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
    vocab = {w: i for i, w in enumerate(dict.fromkeys([*specials, *TINY_WORDS]))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>", additional_special_tokens=specials[4:])
    if chat_template:
        tok.chat_template = TINY_CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


class TinyRandomCausalLM(CausalLMGenerator):
    """RANDOM WEIGHTS: ``CausalLMGenerator`` on a tiny Llama built by ``build_tiny_causal_lm`` (pipeline check only).

    Args:
        model_seed: Seed of the random weights.
        chat_template: Whether the tiny tokenizer carries a chat template.
        Other arguments as ``CausalLMGenerator``.
    """

    def __init__(self, device: str = "cpu", batch_size: int = 8, seed: int = 0, model_seed: int = 0,
                 generation: Mapping[str, Any] | None = None, chat_template: bool = True,
                 system_prompt: str | None = None):
        self._tmp = tempfile.TemporaryDirectory(prefix="countboard-tiny-lm-")
        path = build_tiny_causal_lm(self._tmp.name, seed=model_seed, chat_template=chat_template)
        super().__init__(str(path), device=device, batch_size=batch_size, seed=seed, generation=generation,
                         chat_template=chat_template, system_prompt=system_prompt, dtype="float32")
