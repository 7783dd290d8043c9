"""Controlled prompt sets for text generators: each item asks for one value of an attribute (e.g. a sentiment).

Two sources, one item type (``TextPrompt``):

* ``controlled_prompts``: the BCC study's Sentiment Stories template over a title list, with the requested labels
  in fixed ratios (e.g. 35/30/35) and a seeded order;
* ``read_prompt_file``: a user's CSV or JSON-lines file with a ``label`` column and either a ``prompt`` or a
  ``title`` column (the template is applied to titles).

``TextPromptSet`` is the dataset object the ``text_acs`` task reads. Items whose label is missing or outside the
label set, or whose prompt is empty, stay in the set with their label as given and a note in ``problems``: the task
reports them as failed units and evaluates the rest.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import TextPrompt

#: The labels of the default controlled attribute (sentiment).
SENTIMENT_LABELS = ("positive", "neutral", "negative")

#: The prompt of the BCC study's Sentiment Stories dataset.
STORY_TEMPLATE = ('Write a very short story with the title: "{title}"\n'
                  'The story should have a "{label}" sentiment.\n'
                  "The story should be shorter than 5 sentences.")
#: Generic story titles for offline prompt sets (the study drew its titles from ROC Stories).
DEFAULT_TITLES = (
    "Lemonade", "The Accident", "The New Puppy", "Moving Day", "The Job Interview", "Lost Keys", "The Storm",
    "First Day of School", "The Garden", "A Late Train", "The Birthday Party", "The Broken Phone", "Camping Trip",
    "The Old Bicycle", "Snow Day", "The Piano Lesson", "A Letter from Home", "The Bake Sale", "Night Shift",
    "The Marathon", "Flat Tire", "The Science Fair", "A Day at the Beach", "The Haircut", "Grandma's Recipe",
    "The Power Outage", "The Road Trip", "Rainy Afternoon", "The Lottery Ticket", "The Spelling Bee",
    "The Wedding", "Traffic Jam", "The Fishing Trip", "The Move Abroad", "The Last Exam", "The Yard Sale",
    "The Concert", "Keith Wants to Be a Star", "The Missing Cat", "The Surprise Visit", "The Lost Wallet",
    "A Quiet Morning", "The Soccer Game", "The Kitten", "The Long Flight", "The Paint Job", "The Farmers Market",
    "The Exam Results",
)


def allocate(n: int, ratios: Mapping[str, float]) -> dict[str, int]:
    """Split ``n`` items over labels in proportion to ``ratios`` (largest remainder; ties go to the earlier label).

    Example:
        >>> allocate(10, {"positive": 35, "neutral": 30, "negative": 35})
        {'positive': 4, 'neutral': 3, 'negative': 3}
    """
    weights = np.array([float(v) for v in ratios.values()])
    if n < 0 or weights.size == 0 or np.any(~np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
        raise ConfigError(f"label ratios must be non-negative with a positive sum and n >= 0, got {dict(ratios)}, "
                          f"n={n}")
    exact = n * weights / weights.sum()
    counts = np.floor(exact).astype(int)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - counts.sum()]:
        counts[i] += 1
    return {label: int(c) for label, c in zip(ratios, counts, strict=True)}


def controlled_prompts(titles: Sequence[str], n: int, ratios: Mapping[str, float], *, template: str = STORY_TEMPLATE,
                       seed: int = 0, id_prefix: str = "story") -> list[TextPrompt]:
    """``n`` prompts from ``template`` with labels in ``ratios`` and titles from ``titles``, in a seeded order.

    Titles are taken from a seeded permutation, cycling when ``n`` exceeds the list; ids are ``<prefix>_00000``….

    Example:
        >>> items = controlled_prompts(["Lemonade"], 2, {"positive": 1, "negative": 1}, template="{title}: {label}")
        >>> sorted(p.prompt for p in items)
        ['Lemonade: negative', 'Lemonade: positive']
    """
    titles = [t.strip() for t in titles if t and t.strip()]
    if not titles:
        raise ConfigError("controlled prompts need at least one non-empty title (dataset.titles / titles_file)")
    counts = allocate(n, ratios)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(list(counts), list(counts.values())))
    reps = -(-n // len(titles)) if n else 0
    order = np.concatenate([rng.permutation(len(titles)) for _ in range(reps)]) if reps else np.array([], int)
    items = []
    for i, label in enumerate(labels):
        title = titles[int(order[i])]
        items.append(TextPrompt(f"{id_prefix}_{i:05d}", template.format(title=title, label=label), str(label),
                                title))
    return items


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    if path.suffix in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{n} is not a JSON object ({exc.msg}); one object per line") from exc
        return rows
    raise ConfigError(f"prompt file {path} must end in .csv or .jsonl")


def read_prompt_file(path: str | Path, labels: Sequence[str], *, template: str = STORY_TEMPLATE,
                     id_prefix: str = "prompt") -> tuple[list[TextPrompt], dict[str, str]]:
    """Prompts from a CSV or JSON-lines file, and the problems found (prompt id → what is wrong).

    Columns: ``label`` (required), ``prompt`` or ``title`` (a title goes through ``template``), ``id``
    (optional; default ``<prefix>_<row>``). Every row becomes an item that keeps its label as written.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(path, "dataset.prompt_file", "Give a CSV or JSON-lines file with a label column and "
                                "a prompt or title column.")
    items, problems, seen = [], {}, set()
    for i, row in enumerate(_rows(path)):
        pid = str(row.get("id") or f"{id_prefix}_{i:05d}")
        label = str(row.get("label") or "").strip().lower()
        title = str(row.get("title") or "").strip()
        prompt = str(row.get("prompt") or "").strip() or (template.format(title=title, label=label) if title else "")
        if pid in seen:
            raise ConfigError(f"{path}: id {pid!r} appears twice; ids must be unique")
        seen.add(pid)
        if not prompt:
            problems[pid] = f"row {i + 1} of {path.name} has neither a prompt nor a title"
        elif label not in labels:
            problems[pid] = (f"row {i + 1} of {path.name} asks for label {label!r}, not one of {list(labels)}"
                             if label else f"row {i + 1} of {path.name} has no label")
        items.append(TextPrompt(pid, prompt, label, title))
    if not items:
        raise ConfigError(f"prompt file {path} holds no rows")
    return items, problems


class TextPromptSet:
    """A controlled prompt set: generated from a template and title list, or read from a prompt file.

    Args:
        attribute: The controlled attribute (e.g. ``"sentiment"``).
        labels: Its values; the order is the label order of every table.
        n_prompts: Number of template prompts (ignored with ``prompt_file``).
        label_ratios: Share of each label (any positive scale; default equal shares).
        titles: Title list (default ``DEFAULT_TITLES``); ``titles_file`` (one per line) replaces it.
        prompt_file: A user's CSV/JSONL prompt file instead of the template.
        template: Prompt template with ``{title}`` and ``{label}``.
        seed: Seed of the label order and title draw.
        id_prefix: Prefix of the prompt ids.

    Example:
        >>> ps = TextPromptSet(n_prompts=20, label_ratios={"positive": 35, "neutral": 30, "negative": 35})
        >>> len(ps), ps.label_counts()
        (20, {'positive': 7, 'neutral': 6, 'negative': 7})
    """

    def __init__(self, attribute: str = "sentiment", labels: Sequence[str] = SENTIMENT_LABELS, n_prompts: int = 300,
                 label_ratios: Mapping[str, float] | None = None, titles: Sequence[str] | None = None,
                 titles_file: str | None = None, prompt_file: str | None = None, template: str = STORY_TEMPLATE,
                 seed: int = 0, id_prefix: str = "story"):
        self.attribute = attribute
        self.labels = tuple(str(x).lower() for x in labels)
        if len(set(self.labels)) != len(self.labels) or len(self.labels) < 2:
            raise ConfigError(f"dataset.labels must hold at least two distinct labels, got {list(labels)}")
        self.problems: dict[str, str] = {}
        if prompt_file:
            self.items, self.problems = read_prompt_file(prompt_file, self.labels, template=template)
        else:
            ratios = dict(label_ratios) if label_ratios else {label: 1.0 for label in self.labels}
            unknown = sorted(set(ratios) - set(self.labels))
            if unknown:
                raise ConfigError(f"dataset.label_ratios names {unknown}, not in dataset.labels {list(self.labels)}")
            if titles_file:
                path = Path(titles_file)
                if not path.is_file():
                    raise DataNotFoundError(path, "dataset.titles_file", "Give a text file with one title a line.")
                titles = path.read_text(encoding="utf-8").splitlines()
            self.items = controlled_prompts(titles or DEFAULT_TITLES, int(n_prompts), ratios, template=template,
                                            seed=seed, id_prefix=id_prefix)
        self._by_id = {p.prompt_id: p for p in self.items}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, prompt_id: str) -> TextPrompt:
        return self._by_id[prompt_id]

    def ids(self) -> list[str]:
        return [p.prompt_id for p in self.items]

    def label_counts(self) -> dict[str, int]:
        """Items per requested label, in label order (labels outside the set are not counted)."""
        return {label: sum(p.label == label for p in self.items) for label in self.labels}
