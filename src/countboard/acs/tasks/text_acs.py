"""Task ``text_acs``: attribute control success of a text generator, judged by a classifier, corrected by BCC.

The model is a text generator, the dataset a controlled prompt set (``data.text_prompts``), the classifier a task
parameter (config group ``task/classifier``).

- ``units``: the prompt ids.
- ``run_units``: generate the texts of a chunk of prompts, classify them; the record keeps the prompt, the
  requested label, the text, its ``text_id``, the classifier's label and scores, and the label the text really
  expresses when the generator knows it. An empty (or blank) text, or a classifier answer outside the label set,
  is a failed output: an attribute-control failure ("not satisfied"), recorded with ``failed = 1`` and the reason
  in ``failure``, and kept in every denominator. A prompt with an unknown requested label, or a generation batch
  that raises, is a failed unit (reported in ``failures.json``, retried on resume); the others go on.
- ``summarize``: human labels of a random subset of ``B`` of the judged texts (simulated from the true labels, or
  read from a label file by ``text_id``); a text succeeds when its label equals the requested one. BCC (binary
  match/mismatch) cells per requested label and pooled (``all``, the summed counts: the labelled texts are a simple
  random sample of all judged texts) are fitted together (``bcc_method``: ``auto`` = exact, or ``nuts``, for these
  and the multi-class cells; a cell with no human positive is fitted with a prior-only TPR and flagged
  ``no_human_positives`` in ``bcc_cells``).
  Failed outputs are known failures: every rate of a cell is that of its judged texts times their share, CC counts
  them as "not satisfied", and ``acs_failure_rate`` is their share. The run logs the pooled cell's report
  (``schema/bcc.yaml``); the multi-class (Dirichlet) BCC per requested label gives ``acs_mc_*``; the
  classifier's TPR/FPR and macro-F1 against the human labels and Cohen's kappa between two annotators go beside
  them (``schema/text.yaml``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from countboard.acs import annotation as ann
from countboard.errors import ConfigError
from countboard.metrics.agreement import (
    binary_rates,
    cohen_kappa,
    confusion_matrix,
    macro_f1,
    one_vs_rest_rates,
)
from countboard.models.base import TextClassifier
from countboard.quantify.bcc import METHODS, SamplerConfig
from countboard.quantify.beta import beta_mean, cc_posterior
from countboard.quantify.cells import NO_HUMAN_POSITIVES, counts_from_labels, credible_interval, report_cells
from countboard.quantify.errors import BCCWarning, QuantifyInputError
from countboard.quantify.multiclass import fit_bcc_multiclass
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg
from countboard.tracking.tags import RunTags

POOLED = "all"
HUMAN_SALT = 7321  # seeds the labelled subset and the simulated annotators (with the job seed)


@dataclass(frozen=True)
class HumanConfig:
    """Where the human labels come from.

    Attributes:
        source: ``simulated`` (from the generator's true labels), ``file`` (a label file) or ``none`` (CC only).
        n_labelled: ``B``, texts drawn at random for simulated labels.
        error_rate: Chance that a simulated annotator picks a wrong label.
        annotators: Simulated annotators (two give Cohen's kappa; disagreements resolve to the truth).
        path: Label file for ``source=file`` (see ``data.text_annotations``).
    """

    source: str = "simulated"
    n_labelled: int = 100
    error_rate: float = 0.03
    annotators: int = 2
    path: str | None = None

    def __post_init__(self) -> None:
        if self.source not in ("simulated", "file", "none"):
            raise ConfigError(f"task.human.source must be simulated, file or none, got {self.source!r}")
        if self.source == "file" and not self.path:
            raise ConfigError("task.human.source=file needs task.human.path (a label file)")
        if self.n_labelled < 1:
            raise ConfigError(f"task.human.n_labelled must be at least 1, got {self.n_labelled}")


class TextACSTask(Task):
    """CC and BCC success rates of one (text generator, classifier) pair on a controlled prompt set.

    Args:
        classifier: The metric annotator (built from ``task/classifier``).
        human: ``HumanConfig`` fields.
        sampler: ``SamplerConfig`` fields for the BCC fits (the seed is the job's).
        multiclass: Also fit the multi-class BCC (one Dirichlet model per requested label).
        bcc_method: ``auto`` (exact importance sampling, for the binary and the multi-class cells), ``exact`` or
            ``nuts`` (PyMC).
    """

    name = "text_acs"
    family = "acs"
    model_kinds = ("text_generator",)
    dataset_kinds = ("text_prompts",)
    operational_params = {"sampler": "NUTS draws, tuning, chains and cores: the posterior's precision"}
    path_params = ("human.path",)
    protocol_defaults = {f"human.{f.name}": f.default for f in dataclasses.fields(HumanConfig)}

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """The classifier's own check (a language model's weights), before any run exists."""
        from countboard.models.base import preflight_node

        preflight_node(node.get("classifier"), "task.classifier")

    def __init__(self, classifier: TextClassifier, human: Mapping[str, Any] | None = None,
                 sampler: Mapping[str, Any] | None = None, multiclass: bool = True, bcc_method: str = "auto"):
        if not isinstance(classifier, TextClassifier):
            raise ConfigError(f"task.classifier must build a TextClassifier (pick one with task/classifier=…), got "
                              f"{type(classifier).__name__}")
        self.classifier = classifier
        try:
            self.human = HumanConfig(**dict(human or {}))
            self.sampler = dict(sampler or {})
            SamplerConfig(**self.sampler)
        except TypeError as exc:
            raise ConfigError(f"task.human / task.sampler: {exc}") from exc
        self.multiclass = bool(multiclass)
        if bcc_method not in METHODS:
            raise ConfigError(f"task.bcc_method must be one of {', '.join(METHODS)}, got {bcc_method!r}")
        self.bcc_method = bcc_method

    def units(self, model: Any, dataset: Any, ctx: RunContext) -> Sequence[str]:
        if not hasattr(model, "generate_batch"):
            raise ConfigError(f"text_acs needs a text generator (model kind text_generator), got "
                              f"{type(model).__name__}")
        if not all(hasattr(dataset, a) for a in ("ids", "labels", "__getitem__")):
            raise ConfigError(f"text_acs needs a controlled prompt set (e.g. dataset=sentiment_stories), got "
                              f"{type(dataset).__name__}")
        if self.human.source == "simulated" and not getattr(model, "knows_truth", False):
            raise ConfigError(f"{type(model).__name__} does not know the label of its texts, so human labels cannot "
                              "be simulated: label texts on the annotation page and set task.human.source=file")
        if tuple(self.classifier.labels) != tuple(dataset.labels):
            raise ConfigError(f"classifier {self.classifier.name} labels {list(self.classifier.labels)} differ from "
                              f"the dataset's {list(dataset.labels)}; set task.classifier.labels")
        return dataset.ids()

    def run_units(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        self.classifier.load(ctx.device)
        prompts = [dataset[u] for u in unit_ids]
        problems = getattr(dataset, "problems", {})
        records: dict[str, dict] = {p.prompt_id: {"unit_id": p.prompt_id, "error": problems[p.prompt_id]}
                                    for p in prompts if p.prompt_id in problems}
        todo = [p for p in prompts if p.prompt_id not in problems]
        generated = []
        for start in range(0, len(todo), model.batch_size):
            chunk = todo[start:start + model.batch_size]
            try:
                generated.extend(model.generate_batch(chunk))
            except Exception as exc:  # a failing batch fails its units; the job goes on
                ctx.log.warning("generation failed for %d prompts: %s", len(chunk), exc)
                records.update({p.prompt_id: {"unit_id": p.prompt_id, "error": f"generation failed: {exc}"}
                                for p in chunk})
        decisions = self.classifier.classify([g.text for g in generated])
        for g, c in zip(generated, decisions, strict=True):
            records[g.prompt.prompt_id] = self._record(g, c, dataset.labels)
        return [records[u] for u in unit_ids]

    def _record(self, g, c, labels: Sequence[str]) -> dict:
        """One text's record; an output the classifier could not judge is a failed output (``failed = 1``)."""
        rec = {"unit_id": g.prompt.prompt_id, "title": g.prompt.title, "prompt": g.prompt.prompt,
               "requested": g.prompt.label, "text": g.text or "", "text_id": ann.text_id(g.text or ""),
               "classifier_label": c.label or "", "classifier_raw": c.raw_label,
               "classifier_score": np.nan if c.score is None else float(c.score),
               "cc_success": int(c.error is None and c.label == g.prompt.label), "true_label": g.true_label or "",
               "failed": int(c.error is not None), "failure": c.error or ""}
        for lab in labels:
            rec[f"score_{lab}"] = np.nan if c.scores is None else float(c.scores.get(lab, np.nan))
        return rec

    def human_labels(self, df: pd.DataFrame, labels: Sequence[str], ctx: RunContext) -> tuple[pd.DataFrame, dict]:
        """Per text the human label (NaN outside the labelled subset) and, where two exist, two annotators' labels.

        Returns the per-text frame (columns ``human``, ``annotator_a``, ``annotator_b``) and notes for the log.
        """
        out = pd.DataFrame(index=df.index, columns=["human", "annotator_a", "annotator_b"], dtype=object)
        notes: dict[str, Any] = {tg.HUMAN_SOURCE: self.human.source}
        judged = np.flatnonzero(_failed(df) == 0)  # a failed output needs no label: it is a known failure
        if self.human.source == "simulated":
            b = self.human.n_labelled
            if b >= len(judged):
                raise ConfigError(f"task.human.n_labelled={b} but the run has {len(judged)} judged texts: BCC needs "
                                  "texts without a human label; lower task.human.n_labelled or raise "
                                  "dataset.n_prompts")
            rng = ctx.rng(HUMAN_SALT)
            chosen = np.sort(rng.choice(judged, size=b, replace=False))
            truth = df["true_label"].iloc[chosen].tolist()
            votes = ann.simulate_annotations(truth, labels, self.human.error_rate, self.human.annotators, rng)
            out.iloc[chosen, 0] = ann.adjudicate_simulated(votes, truth)
            if votes.shape[0] >= 2:
                out.iloc[chosen, 1], out.iloc[chosen, 2] = votes[0], votes[1]
                notes[tg.ANNOTATORS] = "simulated_a,simulated_b"
        elif self.human.source == "file":
            rows, problems = ann.read_label_file(self.human.path, labels)
            for p in problems:
                ctx.log.warning("human labels: %s", p)
            notes[tg.LABEL_FILE_PROBLEMS] = len(problems)
            final = ann.adjudicate(rows)["label"]
            out["human"] = df["text_id"].map(final).where(_failed(df) == 0)
            pair = ann.annotator_pair(rows)
            if pair is not None:
                a, b, both = pair
                out["annotator_a"], out["annotator_b"] = df["text_id"].map(both[a]), df["text_id"].map(both[b])
                notes[tg.ANNOTATORS] = f"{a},{b}"
        return out, notes

    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        labels = list(dataset.labels)
        df = records.sort_values("unit_id").reset_index(drop=True)
        human, notes = self.human_labels(df, labels, ctx)
        df = df.assign(human=human["human"], annotator_a=human["annotator_a"], annotator_b=human["annotator_b"])
        metrics: dict[str, float] = {}
        tables: dict[str, pd.DataFrame] = {
            "requested_confusion": _long_confusion(df["requested"], df["classifier_label"], labels, "requested",
                                                   "classifier")}
        arrays: dict[str, dict[str, np.ndarray]] = {}
        failed = _failed(df)
        df = df.assign(failed=failed, cc_success=np.where(failed == 1, 0, df["cc_success"]))
        metrics["acs_failure_rate"] = float(failed.mean())
        if (df["true_label"] != "").all():
            metrics["acs_true_rate"] = float(((df["true_label"] == df["requested"]) & (failed == 0)).mean())
        labelled = df[df["human"].notna()]
        if len(labelled) and len(labelled) < len(df):
            bcc_metrics, cells, draws = self._binary_bcc(df, labels, ctx)
            metrics.update(bcc_metrics)
            tables["bcc_cells"] = cells
            arrays["bcc_draws"] = draws
            metrics.update(_classifier_metrics(labelled, labels))
            tables["confusion"] = _long_confusion(labelled["human"], labelled["classifier_label"], labels, "human",
                                                  "classifier")
            tables["requested_human"] = _long_confusion(labelled["requested"], labelled["human"], labels,
                                                        "requested", "human")
            tables["classifier_rates"] = pd.DataFrame(
                [{"label": k, **v} for k, v in one_vs_rest_rates(labelled["human"], labelled["classifier_label"],
                                                                 labels).items()])
            if self.multiclass:
                mc_metrics, mc_table = self._multiclass_bcc(df, labels, ctx)
                metrics.update(mc_metrics)
                tables["multiclass"] = mc_table
        elif self.human.source != "none":
            ctx.log.warning("text_acs: %d of %d texts have a human label; BCC needs some labelled and some "
                            "unlabelled texts, so only CC is logged", len(labelled), len(df))
        if "acs_cc_mean" not in metrics:
            metrics["acs_cc_mean"] = beta_mean(*cc_posterior(int(df["cc_success"].sum()), len(df)))
        pair = df[["annotator_a", "annotator_b"]].dropna()
        if len(pair):
            kappa = cohen_kappa(pair["annotator_a"].tolist(), pair["annotator_b"].tolist(), labels)
            if np.isfinite(kappa):
                metrics["cohen_kappa"] = kappa
        tables["per_prompt_type"] = _per_label(df, labels, tables.get("bcc_cells"))
        tables["human_labels"] = df.loc[df["human"].notna(), ["unit_id", "text_id", "requested", "human",
                                                              "annotator_a", "annotator_b"]].astype(str)
        tags = RunTags(classifier=self.classifier.name, evaluator=self.classifier.name, extra={
            tg.ATTRIBUTE: str(getattr(dataset, "attribute", "")), **{k: str(v) for k, v in notes.items()}}).to_tags()
        return TaskResult(metrics={k: float(v) for k, v in metrics.items()}, tables=tables, arrays=arrays, tags=tags)

    def _binary_bcc(self, df: pd.DataFrame, labels: Sequence[str], ctx: RunContext):
        """BCC cells per requested label (those with labelled and unlabelled texts) and pooled, in one fit."""
        human_success = np.where(df["human"].notna(), (df["human"] == df["requested"]).astype(float), np.nan)
        decision = df["cc_success"].to_numpy()
        failed = df["failed"].to_numpy() == 1
        counts, names = [], []
        for lab in labels:
            mask = (df["requested"] == lab).to_numpy()
            c = counts_from_labels(decision[mask], human_success[mask], failed[mask])
            if c.n_human and c.n_m:
                counts.append(c)
                names.append(lab)
        counts.append(counts_from_labels(decision, human_success, failed))
        names.append(POOLED)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BCCWarning)
            table, fit = report_cells(counts, names, SamplerConfig(**{**self.sampler, "seed": ctx.seed}),
                                      allow_no_human_positives=True, method=self.bcc_method)
        for w in caught:
            if issubclass(w.category, BCCWarning):
                ctx.log.warning("BCC: %s", w.message)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        cells = table.reset_index().assign(classifier=self.classifier.name)
        for k, c in enumerate(counts):
            cells.loc[k, "s_m"], cells.loc[k, "n_m"] = c.s_m, c.n_m
        metrics = {k: float(v) for k, v in table.loc[POOLED].drop(NO_HUMAN_POSITIVES).items() if np.isfinite(v)}
        shares = np.array([[c.judged_share] for c in counts])  # draws of the rate of all texts, failures in
        return metrics, cells, {"cells": np.array(names), "p": fit.draws * shares}

    def _multiclass_bcc(self, df: pd.DataFrame, labels: Sequence[str], ctx: RunContext
                        ) -> tuple[dict[str, float], pd.DataFrame]:
        """Dirichlet BCC per requested label; the success draws are combined with the labels' shares of texts."""
        rows, combined = [], 0.0
        for lab in labels:
            part = df[df["requested"] == lab]
            if part.empty:
                continue
            judged = part[part["failed"] == 0]
            known = judged[judged["human"].notna()]
            unknown = judged[judged["human"].isna()]
            conf = confusion_matrix(known["human"].tolist(), known["classifier_label"].tolist(), labels)
            s = np.array([(unknown["classifier_label"] == x).sum() for x in labels])
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", BCCWarning)
                    fit = fit_bcc_multiclass(conf, s, labels=labels, method=self.bcc_method,
                                             sampler=SamplerConfig(**{**self.sampler, "seed": ctx.seed}))
            except QuantifyInputError as exc:
                ctx.log.warning("multi-class BCC for requested label %r skipped: %s", lab, exc)
                return {}, pd.DataFrame(rows)
            for j, x in enumerate(labels):
                lo, hi = credible_interval(fit.draws[:, j])
                rows.append({"requested": lab, "label": x, "mean": float(fit.mean[j]), "low": float(lo),
                             "high": float(hi), "rhat": float(fit.rhat[j]), "ess": float(fit.ess[j]),
                             "mcse": float(fit.mcse[j]), "method": fit.method})
            # the judged texts' success rate times their share: failed outputs are failures
            combined = combined + len(judged) / len(df) * fit.draws[:, labels.index(lab)]
        lo, hi = credible_interval(combined)
        return {"acs_mc_mean": float(np.mean(combined)), "acs_mc_low": float(lo), "acs_mc_high": float(hi)}, \
            pd.DataFrame(rows)


def _classifier_metrics(labelled: pd.DataFrame, labels: Sequence[str]) -> dict[str, float]:
    truth = (labelled["human"] == labelled["requested"]).astype(int).tolist()
    rates = binary_rates(labelled["cc_success"].astype(int).tolist(), truth)
    out = {"classifier_macro_f1": macro_f1(labelled["human"].tolist(), labelled["classifier_label"].tolist(),
                                           labels)}
    out.update({f"classifier_{k}": v for k, v in rates.items()})
    return {k: v for k, v in out.items() if np.isfinite(v)}


def _long_confusion(rows: pd.Series, cols: pd.Series, labels: Sequence[str], row_name: str,
                    col_name: str) -> pd.DataFrame:
    """A confusion matrix in long form (row label, column label, count), the layout the leaderboard draws."""
    known = rows.isin(labels) & cols.isin(labels)
    conf = confusion_matrix(rows[known].tolist(), cols[known].tolist(), labels)
    return pd.DataFrame([{row_name: r, col_name: c, "count": int(conf[i, j])}
                         for i, r in enumerate(labels) for j, c in enumerate(labels)])


def _per_label(df: pd.DataFrame, labels: Sequence[str], cells: pd.DataFrame | None) -> pd.DataFrame:
    """Per requested label: texts, CC, human and true success rates, BCC mean and 90% interval where fitted."""
    rows = []
    for lab in labels:
        part = df[df["requested"] == lab]
        known = part[part["human"].notna()]
        row = {"prompt_type": lab, "n": len(part),
               "failure_rate": float(part["failed"].mean()) if len(part) else np.nan,
               "cc_rate": float(part["cc_success"].mean()) if len(part) else np.nan,
               "human_rate": float((known["human"] == lab).mean()) if len(known) else np.nan,
               "n_human": len(known)}
        if (part["true_label"] != "").all() and len(part):
            row["true_rate"] = float(((part["true_label"] == lab) & (part["failed"] == 0)).mean())
        if cells is not None and lab in set(cells["cell"]):
            cell = cells.loc[cells["cell"] == lab].iloc[0]
            row.update(bcc_rate=float(cell["acs_bcc_mean"]), bcc_low=float(cell["acs_bcc_low"]),
                       bcc_high=float(cell["acs_bcc_high"]))
        rows.append(row)
    return pd.DataFrame(rows)


def _failed(df: pd.DataFrame) -> np.ndarray:
    """1 for failed outputs (records from before the ``failed`` column count as judged), else 0."""
    if "failed" not in df:
        return np.zeros(len(df), dtype=int)
    return df["failed"].fillna(0).astype(int).to_numpy()
