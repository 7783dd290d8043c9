"""GeckoNum (Kajić et al., 2024): prompts and human annotations of seven text-to-image generators.

The release has ``prompts.csv`` (1,386 prompts of 12 types) and ``geckonum_annotations.zip`` with one CSV per
(task, generator), named ``task_{1,2,3}_{generator}.csv``. ``read_annotations`` reads the zip or a folder holding
those CSVs and keeps, for each row, the file it came from and its line number, so that later checks can say
exactly where a bad row is.

Example:
    >>> prompts = read_prompts("data/geckonum/prompts.csv")  # doctest: +SKIP
    >>> t1 = read_annotations("data/geckonum/geckonum_annotations.zip", task=1)  # doctest: +SKIP
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from countboard.errors import CountboardError, DataNotFoundError

#: The seven generators of the study, as spelled in the file names and the ``model`` column.
GENERATORS: tuple[str, ...] = ("dalle_3", "imagen_a", "imagen_b", "imagen_c", "imagen_d", "muse_a", "muse_b")

#: The 12 prompt types, as spelled in ``prompts.csv``, grouped by the numerical task they probe.
PROMPT_TYPES_BY_TASK: dict[int, tuple[str, ...]] = {
    1: (
        "numeric_simple",
        "numeric_sentence",
        "2-additive",
        "3-additive",
        "attribute-color",
        "2-additive-color",
        "attribute-spatial",
    ),
    2: ("approx-1-entity", "approx-2-entity"),
    3: ("fractional-simple", "fractional-complex", "part-whole"),
}

#: Columns each annotation task's CSVs must have (the layout of the release's ``ANNOTATIONS.md``).
TASK_COLUMNS: dict[int, tuple[str, ...]] = {
    1: ("image_id", "model", "question_id", "question", "prompt", "annot_id", "raw_answer", "answer"),
    2: ("image_id", "model", "prompt", "gt_num", "annot_id", "answer_text", "answer_num"),
    3: ("image_id", "model", "question_id", "question", "prompt", "annot_id", "answer"),
}

#: Columns read as categoricals (few distinct values, many rows).
_CATEGORICAL = ("image_id", "model", "question", "prompt", "answer_text", "raw_answer", "answer")

_FILE_RE = re.compile(r"task_([123])_(.+)\.csv$")
_HOW_TO_GET = (
    "Download prompts.csv and geckonum_annotations.zip from "
    "https://github.com/google-deepmind/geckonum_benchmark_t2i (CC-BY 4.0) into that folder."
)


@dataclass(frozen=True)
class AnnotationFile:
    """One annotation CSV: where it is and what it holds."""

    name: str
    task: int
    generator: str


def _find_zip(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".zip":
        return path
    if path.is_dir():
        zips = sorted(path.glob("*annotations*.zip"))
        has_csv = any(path.glob("task_[123]_*.csv")) or any(path.glob("annotations/task_[123]_*.csv"))
        if zips and not has_csv:
            return zips[0]
    return None


def _csv_folder(path: Path) -> Path:
    if any(path.glob("task_[123]_*.csv")):
        return path
    if (path / "annotations").is_dir() and any((path / "annotations").glob("task_[123]_*.csv")):
        return path / "annotations"
    raise DataNotFoundError(
        path, "geckonum annotations", f"No task_<n>_<generator>.csv files there. {_HOW_TO_GET}"
    )


def list_annotation_files(path: str | Path, task: int | None = None) -> list[AnnotationFile]:
    """The annotation CSVs in a zip or folder, sorted by name; only those of ``task`` when given.

    Args:
        path: The release zip, or a folder with the CSVs (directly or under ``annotations/``), or a folder that
            holds the zip.
        task: 1, 2 or 3; ``None`` for all.
    """
    path = Path(path)
    if not path.exists():
        raise DataNotFoundError(path, "geckonum annotations", _HOW_TO_GET)
    zpath = _find_zip(path)
    names = _zip_names(zpath) if zpath is not None else [p.name for p in _csv_folder(path).glob("*.csv")]
    out = []
    for name in sorted(names):
        m = _FILE_RE.search(Path(name).name)
        if m and (task is None or int(m.group(1)) == task):
            out.append(AnnotationFile(name=name, task=int(m.group(1)), generator=m.group(2)))
    return out


def _zip_names(zpath: Path) -> list[str]:
    try:
        with zipfile.ZipFile(zpath) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise CountboardError(f"{zpath}: not a readable zip ({exc}); download it again. {_HOW_TO_GET}") from exc


def _read_bytes(path: Path, names: list[str]) -> list[bytes]:
    zpath = _find_zip(path)
    if zpath is not None:
        with zipfile.ZipFile(zpath) as zf:
            return [zf.read(n) for n in names]
    folder = _csv_folder(path)
    return [(folder / n).read_bytes() for n in names]


def _parse_csv(data: bytes, name: str, task: int) -> tuple[pa.Table, list[int], list[tuple[int, str]]]:
    """A task CSV as a table, the line of each row, and the rows that could not be split into fields.

    A row with too few or too many fields is skipped and reported as ``(line, reason)`` instead of failing the
    file; lines count from 1 (the header).
    """
    columns = TASK_COLUMNS[task]
    bad: list[tuple[int, str]] = []

    def skip(row) -> str:
        first = row.text.split("\n", 1)[0]
        text = first if len(first) <= 60 else first[:57] + "..."
        swallowed = row.text.count("\n")
        if swallowed:  # an unclosed quote runs to the end of the file or the next quote
            reason = f"unclosed quote: this row and the {swallowed} line(s) after it cannot be read ({text!r})"
        else:
            reason = f"expected {row.expected_columns} fields, got {row.actual_columns} ({text!r})"
        bad.append((int(row.number) if row.number is not None else 0, reason + "; fix or remove the row"))
        return "skip"

    def read(use_threads: bool) -> pa.Table:
        bad.clear()
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(use_threads=use_threads),
            parse_options=pacsv.ParseOptions(invalid_row_handler=skip),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in columns},
                strings_can_be_null=False,
            ),
        )

    try:
        table = read(use_threads=True)
        if any(line == 0 for line, _ in bad):  # row numbers of bad rows are known only when read on one thread
            table = read(use_threads=False)
    except pa.ArrowInvalid as exc:
        raise CountboardError(
            f"{name}: not a readable CSV ({exc}). Re-extract the file from the release."
        ) from exc
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise CountboardError(
            f"{name}: missing column(s) {', '.join(missing)} for task {task} annotations; expected "
            f"{', '.join(columns)} (see ANNOTATIONS.md of the release)."
        )
    skipped = {line for line, _ in bad}
    lines = [n for n in range(2, table.num_rows + len(bad) + 2) if n not in skipped][: table.num_rows]
    if len(lines) < table.num_rows:  # bad rows without a known number: fall back to counting good rows only
        lines = list(range(2, table.num_rows + 2))
    return table.select(list(columns)), lines, bad


def read_annotations(path: str | Path, task: int) -> pd.DataFrame:
    """All annotation rows of one task, from the release zip or a folder of CSVs.

    Values are kept as the text of the file (parsing and checks come later, so that a bad value can be reported
    with its place); repeated strings are categoricals. Two columns are added: ``file`` (CSV name) and ``line``
    (1-based line in that file; the header is line 1). Rows with the wrong number of fields are left out and
    listed in ``df.attrs["bad_rows"]`` as ``(file, line, reason)``.

    Args:
        path: The zip, a folder with the CSVs (or with them under ``annotations/``), or a folder holding the zip.
        task: 1 (counts), 2 (approximate quantities) or 3 (yes/no questions).

    Returns:
        One row per annotation, with the columns of ``TASK_COLUMNS[task]`` plus ``file`` and ``line``.

    Raises:
        DataNotFoundError: Nothing to read at ``path``.
        CountboardError: A file is not a CSV or lacks a column; the message names the file.
    """
    if task not in TASK_COLUMNS:
        raise CountboardError(f"GeckoNum annotation task must be 1, 2 or 3, got {task!r}")
    files = list_annotation_files(path, task)
    if not files:
        raise DataNotFoundError(
            Path(path), "geckonum annotations", f"No task_{task}_*.csv found. {_HOW_TO_GET}"
        )
    blobs = _read_bytes(Path(path), [f.name for f in files])
    with ThreadPoolExecutor(max_workers=2) as pool:
        tables = list(pool.map(lambda a: _parse_csv(a[0], a[1].name, task), zip(blobs, files, strict=True)))
    frames, bad_rows = [], []
    for f, (table, lines, bad) in zip(files, tables, strict=True):
        n = table.num_rows
        table = table.append_column(
            "file", pa.array([Path(f.name).name] * n, pa.string()).dictionary_encode()
        )
        table = table.append_column("line", pa.array(lines, pa.int32()))
        frames.append(table)
        bad_rows += [(Path(f.name).name, line, reason) for line, reason in bad]
    table = pa.concat_tables(frames, promote_options="permissive")
    df = table.to_pandas()
    for c in (*_CATEGORICAL, "file"):
        if c in df.columns and not isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype("category")
    df.attrs["bad_rows"] = bad_rows
    return df


def parse_entities(text: str) -> list[tuple[str, str]]:
    """``noun:number`` pairs of the ``entities`` column, numbers kept as text.

    Example:
        >>> parse_entities("corkscrew:3, crib:1, okra:1")
        [('corkscrew', '3'), ('crib', '1'), ('okra', '1')]
    """
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        noun, sep, value = part.rpartition(":")
        if not sep:
            raise ValueError(f"entity {part!r} is not of the form noun:number")
        out.append((noun.strip(), value.strip()))
    return out


def read_prompts(path: str | Path) -> pd.DataFrame:
    """GeckoNum's ``prompts.csv`` (or a folder holding it), indexed by ``prompt_id``.

    Returns:
        Columns ``prompt``, ``prompt_type``, ``dataset_id``, ``has_numeral`` (bool: the number is written as a
        word), ``is_frequent`` (1, 0, or -1 where not applicable), ``entities`` (list of ``(noun, value)`` text
        pairs) and ``task`` (1, 2 or 3); index ``prompt_id`` (int, the number in ``dataset_id`` and image ids).
        Rows that cannot be read are left out and listed in ``attrs["bad_rows"]`` as ``(file, line, reason)``.

    Raises:
        DataNotFoundError: No file at ``path``.
        CountboardError: A column is missing, or no row can be used.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "prompts.csv"
    if not path.is_file():
        raise DataNotFoundError(path, "geckonum prompts", _HOW_TO_GET)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    need = ("prompt", "has_numeral", "is_frequent", "entities", "prompt_type", "dataset_id")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise CountboardError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(need)}")
    task_of = {t: k for k, ts in PROMPT_TYPES_BY_TASK.items() for t in ts}
    reasons = [_prompt_row_problem(row, task_of) for row in df.itertuples(index=False)]
    ids = df["dataset_id"].str.rsplit("_", n=1).str[-1]
    duplicated = ids.duplicated(keep="first") & pd.Series([r is None for r in reasons])
    reasons = [r or (f"prompt id {i} repeats an earlier row" if d else None)
               for r, i, d in zip(reasons, ids, duplicated, strict=True)]  # fmt: skip
    bad = pd.Series([r is not None for r in reasons], index=df.index)
    if bad.all() and len(df):
        raise CountboardError(f"{path}: no usable prompt row (line 2: {reasons[0]}); is it GeckoNum's prompts.csv?")
    good = df[~bad]
    out = pd.DataFrame(
        {
            "prompt": good["prompt"],
            "prompt_type": good["prompt_type"],
            "dataset_id": good["dataset_id"],
            "has_numeral": good["has_numeral"].astype(int).astype(bool),
            "is_frequent": good["is_frequent"].astype(int),
            "entities": good["entities"].map(parse_entities),
            "task": good["prompt_type"].map(task_of).astype(int),
        }
    )
    out.index = pd.Index(ids[~bad].astype(int).to_numpy(), name="prompt_id")
    # Lines count from 1 at the header (no prompt spans two lines in the release).
    out.attrs["bad_rows"] = [(path.name, int(i) + 2, r) for i, r in zip(df.index, reasons, strict=True) if r]
    return out


def _prompt_row_problem(row, task_of: dict[str, int]) -> str | None:
    """Why a ``prompts.csv`` row cannot be used, or None."""
    if row.prompt_type not in task_of:
        return f"unknown prompt_type {row.prompt_type!r}; known: {', '.join(sorted(task_of))}"
    if row.has_numeral not in ("0", "1"):
        return f"has_numeral {row.has_numeral!r} is not 0 or 1"
    if not row.is_frequent.lstrip("-").isdigit():
        return f"is_frequent {row.is_frequent!r} is not an integer"
    if not row.dataset_id.rsplit("_", 1)[-1].isdigit():
        return f"dataset_id {row.dataset_id!r} does not end in _<number>"
    try:
        parse_entities(row.entities)
    except ValueError as exc:
        return str(exc)
    return None


def image_id(prompt_id: int, seed: int, prefix: str = "geckonum") -> str:
    """GeckoNum-style image id (the inverse of ``split_image_id``).

    Example:
        >>> image_id(42, 3)
        'geckonum_00042_3'
    """
    return f"{prefix}_{int(prompt_id):05d}_{int(seed)}"


def split_image_id(image_id: str) -> tuple[int, int]:
    """``(prompt_id, seed)`` of an image id ``geckonum_{prompt_id}_{seed}``.

    Example:
        >>> split_image_id("geckonum_00042_3")
        (42, 3)
    """
    parts = str(image_id).split("_")
    if len(parts) < 3 or not parts[-1].isdigit() or not parts[-2].isdigit():
        raise ValueError(f"image id {image_id!r} is not of the form geckonum_<prompt_id>_<seed>")
    return int(parts[-2]), int(parts[-1])


def annotation_digests(path: str | Path, task: int | None = None) -> dict[str, str]:
    """A content fingerprint per annotation file: CRC-32 and size (read from a zip's directory, or computed).

    The same file gives the same fingerprint inside the zip and extracted into a folder. Used in ``config_hash``
    so that re-importing unchanged files is skipped and changed ones are logged again.
    """
    path = Path(path)
    files = list_annotation_files(path, task)
    zpath = _find_zip(path)
    out = {}
    if zpath is not None:
        with zipfile.ZipFile(zpath) as zf:
            for f in files:
                info = zf.getinfo(f.name)
                out[Path(f.name).name] = f"crc32:{info.CRC:08x}:{info.file_size}"
        return out
    folder = _csv_folder(path)
    for f in files:
        data = (folder / f.name).read_bytes()
        out[f.name] = f"crc32:{zlib.crc32(data):08x}:{len(data)}"
    return out
