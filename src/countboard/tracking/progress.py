"""A multirun read as a whole: one progress line while it runs, a summary table when it ends.

Cells run in the launcher's worker processes, so they tell the process that launched the multirun where they are
through a status folder of the sweep (``STATUS_ENV``): each job keeps one small JSON file there,
``cell-<job number>.json`` (its cell, state, start and end times, run id, units done, a failure's reason),
replaced atomically on every change; a job in a local worker process (``RELAY_ENV``) also writes its stdout and
stderr to ``cell-<job number>.out`` and ``.err`` there. The launching process reads the folder a few times a
second and draws, on its stdout (errors keep stderr to themselves)::

    sweep 1/4 cells: 1 finished, 0 failed, 0 skipped, 2 running | 41s elapsed, ~1m10s left | #1 oracle · … 16/24

On a terminal the line is redrawn in place, and every other line (the workers' output, relayed line by line, and
the sweep's own log lines) is written above it, never through it; to a file or a pipe a plain line is printed each
time a cell ends. At the end a table gives each cell's status (FINISHED, FAILED, SKIPPED: finished before or run
by another process, KILLED: stopped while running, NOT RUN: never started), time and run id, then each failure's
reason in one line.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

#: The status folder of the multirun being launched, set by the launching process for its jobs.
STATUS_ENV = "COUNTBOARD_SWEEP_STATUS"
#: ``1`` when the launcher's worker processes are local: a job there writes its output into the status folder.
RELAY_ENV = "COUNTBOARD_SWEEP_RELAY"
#: The folder, under the sweep's output folder, holding the status files.
STATUS_DIR = ".countboard_status"

RUNNING, FINISHED, FAILED, SKIPPED, KILLED, NOT_RUN = "RUNNING", "FINISHED", "FAILED", "SKIPPED", "KILLED", "NOT RUN"
ENDED = (FINISHED, FAILED, SKIPPED, KILLED)

_CLEAR = "\r\x1b[2K"  # carriage return, then erase the whole line


@dataclass
class CellState:
    """What one job says of its cell (the content of its status file)."""

    num: int
    overrides: str
    name: str = ""
    state: str = RUNNING
    start: float = 0.0
    end: float | None = None
    run_id: str | None = None
    saved: int = 0
    total: int = 0
    reason: str = ""

    @property
    def label(self) -> str:
        """The cell's run name, else (a job that failed before naming it) its overrides, where results go left out."""
        kept = " ".join(o for o in self.overrides.split() if not o.lstrip("+~").startswith(("tracking", "hydra")))
        return self.name or kept or f"job #{self.num}"

    def seconds(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start


def _status_path(folder: Path, num: int) -> Path:
    return folder / f"cell-{num}.json"


def log_path(folder: Path, num: int, fd: int) -> Path:
    """Where job ``num`` writes its descriptor ``fd`` (1: stdout, 2: stderr)."""
    return folder / f"cell-{num}.{'out' if fd == 1 else 'err'}"


class CellReport:
    """A job's status file, rewritten on every change; a ``Progress`` report callback (``engine.run_job``).

    A write the file system refuses is dropped: the line is the user's view of the sweep, never a cell's cause
    of failure.
    """

    def __init__(self, folder: Path, num: int, overrides: list[str]):
        self.folder = Path(folder)
        self.path = _status_path(self.folder, num)
        self.cell = CellState(num, " ".join(overrides), start=time.time())
        self._write()

    def __call__(self, progress: Any) -> None:
        """Take the cell's name, run id and units from the job's ``engine.Progress``."""
        cell = self.cell
        now = (progress.name or cell.name, progress.run_id or cell.run_id, progress.saved, progress.total)
        if now != (cell.name, cell.run_id, cell.saved, cell.total):
            cell.name, cell.run_id, cell.saved, cell.total = now
            self._write()

    def end(self, state: str, run_id: str | None = None, reason: str = "") -> None:
        self.cell.state, self.cell.end, self.cell.reason = state, time.time(), " ".join(reason.split())
        self.cell.run_id = run_id or self.cell.run_id
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(asdict(self.cell)))
            os.replace(tmp, self.path)
        except OSError:
            pass


def job_report(num: int, overrides: list[str]) -> CellReport | None:
    """The status file of job ``num`` of the multirun being launched, None when no process reads one."""
    folder = os.environ.get(STATUS_ENV)
    if not folder or not Path(folder).is_dir():
        return None
    return CellReport(Path(folder), num, overrides)


@contextlib.contextmanager
def relayed_output(report: CellReport | None, here: bool) -> Iterator[None]:
    """Send this process's stdout and stderr (the descriptors: every library's output) to the job's two files in
    the status folder while the job runs, for the launching process to write above its line, each on its stream;
    a no-op for a job run in the launching process itself (``here``), without a status folder, or on a remote
    launcher."""
    if report is None or here or os.environ.get(RELAY_ENV) != "1":
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        fds = [os.open(log_path(report.folder, report.cell.num, target), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                       0o644) for target in (1, 2)]
    except OSError:
        yield
        return
    saved = os.dup(1), os.dup(2)
    for target, fd in zip((1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for target, fd in zip((1, 2), saved):
            os.dup2(fd, target)
            os.close(fd)


def read_cells(folder: Path) -> dict[int, CellState]:
    """The status files of ``folder`` by job number (a file being replaced, or unreadable, is skipped)."""
    cells = {}
    for path in Path(folder).glob("cell-*.json"):
        try:
            cell = CellState(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        cells[cell.num] = cell
    return cells


def duration(seconds: float) -> str:
    """``7s``, ``1m05s``, ``2h03m``.

    Example:
        >>> [duration(s) for s in (7.4, 65, 7390)]
        ['7s', '1m05s', '2h03m']
    """
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def time_left(cells: list[CellState], total: int, now: float, lanes: int) -> float | None:
    """Seconds until the last cell ends, from the mean time of the finished cells: the cells not started and what
    the running ones have left, over ``lanes`` cells at a time; None before a cell has finished.

    Example:
        >>> done = CellState(0, "a", state=FINISHED, start=0.0, end=10.0)
        >>> time_left([done, CellState(1, "b", start=4.0)], total=4, now=10.0, lanes=2)  # (2 * 10 + 4) / 2
        12.0
    """
    times = [c.seconds(now) for c in cells if c.state == FINISHED]
    if not times:
        return None
    mean = sum(times) / len(times)
    running = [c for c in cells if c.state == RUNNING]
    work = max(total - len(cells), 0) * mean + sum(max(mean - c.seconds(now), 0.0) for c in running)
    return work / max(lanes, len(running), 1)


def status_line(cells: list[CellState], total: int, elapsed: float, left: float | None,
                tail: str | None = None) -> str:
    """The sweep's line: cells done of ``total``, by outcome, times, then ``tail`` (the running cells' units, or
    the cell that just ended).

    Example:
        >>> cells = [CellState(0, "a", state=FINISHED), CellState(1, "b", name="b", saved=8, total=24)]
        >>> status_line(cells, 3, 41, 70)
        'sweep 1/3 cells: 1 finished, 0 failed, 0 skipped, 1 running | 41s elapsed, ~1m10s left | #1 b 8/24'
    """
    count = {state: sum(c.state == state for c in cells) for state in (*ENDED, RUNNING)}
    done = sum(count[s] for s in ENDED)
    parts = [f"{count[FINISHED]} finished", f"{count[FAILED]} failed", f"{count[SKIPPED]} skipped"]
    if count[KILLED]:
        parts.append(f"{count[KILLED]} killed")
    if tail is None:
        parts.append(f"{count[RUNNING]} running")
        tail = ", ".join(f"#{c.num} {c.label}" + (f" {c.saved}/{c.total}" if c.total else "")
                         for c in sorted(cells, key=lambda c: c.num) if c.state == RUNNING)
    times = f"{duration(elapsed)} elapsed" + ("" if done >= total else
                                              f", ~{duration(left)} left" if left is not None else ", time left: ?")
    return f"sweep {done}/{total} cells: {', '.join(parts)} | {times}" + (f" | {tail}" if tail else "")


def summary(cells: list[CellState], jobs: list[str], elapsed: float, now: float) -> list[str]:
    """The closing table (cell, status, time, run id), then each failed cell's reason in one line.

    ``jobs`` are the multirun's cells as overrides, by job number; a cell whose job never wrote a file is NOT
    RUN, one still RUNNING when the sweep ends was stopped: KILLED.
    """
    by_num = {c.num: c for c in cells}
    rows = []
    for num in sorted(set(range(len(jobs))) | set(by_num)):
        cell = by_num.get(num) or CellState(num, jobs[num], state=NOT_RUN, start=now, end=now)
        if cell.state == RUNNING:
            cell = CellState(**{**asdict(cell), "state": KILLED, "end": now, "reason": "stopped while running"})
        rows.append(cell)
    names = [c.label for c in rows]
    labels = [_cut(f"{c.label} ({c.overrides})" if names.count(c.label) > 1 and c.overrides else c.label, 80)
              for c in rows]
    count = {state: sum(c.state == state for c in rows) for state in (*ENDED, NOT_RUN)}
    outcome = ", ".join(f"{n} {state.lower()}" for state, n in count.items() if n or state in (FINISHED, FAILED))
    table = [("#", "cell", "status", "time", "run id")] + [
        (str(c.num), label, c.state, "-" if c.state == NOT_RUN else duration(c.seconds(now)), c.run_id or "-")
        for c, label in zip(rows, labels)]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = [f"sweep summary: {len(rows)} cells in {duration(elapsed)}: {outcome}"]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(row[:4], widths)) + "  " + row[4] for row in table]
    failures = [(c, label) for c, label in zip(rows, labels) if c.state == FAILED]
    if failures:
        lines.append("failed:")
        lines += [f"  #{c.num} {label}: {_cut(c.reason or 'no reason recorded', 400)}" for c, label in failures]
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


class _Console:
    """The terminal while the line is shown: a write clears the line first and draws it again once the text ends
    its own line, so output and the line never share a row."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.lock = threading.RLock()
        self.line = ""
        self.shown = False
        self.partial = False

    def write(self, stream: TextIO, text: str) -> None:
        with self.lock:
            if not text:
                return
            if self.shown:
                self.stream.write(_CLEAR)
                self.stream.flush()
                self.shown = False
            stream.write(text)
            stream.flush()
            self.partial = not text.endswith("\n")
            self._draw()

    def draw(self, line: str) -> None:
        with self.lock:
            self.line = line
            self._draw()

    def _draw(self) -> None:
        if self.partial or not self.line:
            return
        # two columns spare: the last would wrap, and so would the terminal's echo of a Ctrl-C (^C)
        width = max(shutil.get_terminal_size((100, 24)).columns - 3, 10)
        line = _cut(self.line, width)
        self.stream.write(_CLEAR + line)
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        with self.lock:
            if self.shown:
                self.stream.write(_CLEAR)
                self.stream.flush()
            self.shown, self.line = False, ""


class _Through(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` (and the logging handlers writing to them) while the line is shown."""

    def __init__(self, console: _Console, stream: TextIO):
        self._console, self._stream = console, stream

    def write(self, text: str) -> int:
        self._console.write(self._stream, text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _stream_handlers() -> list[logging.StreamHandler]:
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers
            if type(h) is logging.StreamHandler or type(h).__name__ == "_StderrHandler"]


class SweepProgress:
    """The launching process's view of a multirun: the line while it runs, the summary when it ends.

    Args:
        folder: The status folder (emptied at start).
        jobs: The multirun's cells as overrides, by job number.
        lanes: How many cells the launcher runs at once (for the time left).
        stream: Where the line and the summary go (stdout).
        tty: Redraw the line in place (default: whether ``stream`` is a terminal); else print a line per ended cell.
    """

    def __init__(self, folder: Path, jobs: list[str], lanes: int = 1, stream: TextIO | None = None,
                 tty: bool | None = None, interval_s: float = 0.2):
        self.folder, self.jobs, self.lanes = Path(folder), list(jobs), max(int(lanes), 1)
        self.stream = stream or sys.stdout
        self.err = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = interval_s
        self.t0 = time.time()
        self._ended: set[int] = set()
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._console: _Console | None = None
        self._restore: list[tuple[Any, ...]] = []
        self._finished = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in [*self.folder.glob("cell-*"), *self.folder.glob(".cell-*")]:
            with contextlib.suppress(OSError):
                path.unlink()
        if self.tty:
            self._install()
        self._thread = threading.Thread(target=self._run, name="countboard-sweep-progress", daemon=True)
        self._thread.start()

    def _install(self) -> None:
        """Route the process's streams and its logging handlers' through the console."""
        console = self._console = _Console(self.stream)
        originals = {}
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream.isatty():
                originals[id(stream)] = through = _Through(console, stream)
                self._restore.append((sys, name, stream))
                setattr(sys, name, through)
        for handler in _stream_handlers():
            through = originals.get(id(handler.stream))
            if through is not None:
                self._restore.append((handler, "stream", handler.stream))
                handler.stream = through

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # a vanished file, a closed stream: the next tick tries again
                self.tick()

    def _write(self, text: str, stream: TextIO | None = None) -> None:
        stream = stream or self.stream
        if self._console is not None:
            self._console.write(stream, text)
        else:
            stream.write(text)
            stream.flush()

    def _relay(self) -> None:
        """Write the workers' new complete output lines (what a terminal would show of a ``\\r``-redrawn one)."""
        for path in sorted([*self.folder.glob("cell-*.out"), *self.folder.glob("cell-*.err")]):
            start = self._offsets.get(path, 0)
            try:
                with path.open("rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            if not data:
                continue
            self._offsets[path] = start + len(data)
            text = self._partial.pop(path, "") + data.decode("utf-8", errors="replace")
            *lines, rest = text.split("\n")
            if rest:
                self._partial[path] = rest
            shown = [line.rsplit("\r", 1)[-1] for line in lines]
            shown = [line for line in shown if line.strip()]
            if shown:
                self._write("".join(line + "\n" for line in shown), self.err if path.suffix == ".err" else None)

    def tick(self) -> None:
        with self._lock:
            self._relay()
            cells = read_cells(self.folder)
            now = time.time()
            running = sum(c.state == RUNNING for c in cells.values())
            self.lanes = max(self.lanes, running)
            left = time_left(list(cells.values()), len(self.jobs), now, self.lanes)
            if self._console is not None:
                self._console.draw(status_line(list(cells.values()), len(self.jobs), now - self.t0, left))
                return
            for num in sorted(cells):
                cell = cells[num]
                if cell.state in ENDED and num not in self._ended:
                    self._ended.add(num)
                    done = [c for c in cells.values() if c.state in ENDED and c.num in self._ended]
                    tail = f"#{num} {cell.label} {cell.state} in {duration(cell.seconds(now))}"
                    self._write(status_line(done, len(self.jobs), now - self.t0, left, tail) + "\n")

    def finish(self) -> None:
        """Stop the line and print the summary (once)."""
        if self._finished:
            return
        self._finished = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self.tick()
        for path, rest in list(self._partial.items()):
            if rest.strip():
                self._write(rest.rsplit("\r", 1)[-1] + "\n", self.err if path.suffix == ".err" else None)
        self._partial.clear()
        if self._console is not None:
            self._console.clear()
        for owner, name, value in reversed(self._restore):
            setattr(owner, name, value)
        self._restore.clear()
        self._console = None
        now = time.time()
        lines = summary(list(read_cells(self.folder).values()), self.jobs, now - self.t0, now)
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()


#: The line of this process's multirun, between its start and its end.
_open: SweepProgress | None = None


def start_progress(folder: Path, jobs: list[str], lanes: int, relay: bool) -> SweepProgress:
    """Start the line of the multirun being launched, and tell its jobs where to report (in the environment the
    launcher's processes inherit)."""
    global _open
    finish_progress()
    progress = _open = SweepProgress(folder, jobs, lanes)
    progress.start()
    os.environ[STATUS_ENV] = str(folder)
    os.environ[RELAY_ENV] = "1" if relay else "0"
    return progress


def finish_progress() -> None:
    """End the open line with its summary (idempotent; the launching process calls it however the sweep ends)."""
    global _open
    progress, _open = _open, None
    os.environ.pop(STATUS_ENV, None)
    os.environ.pop(RELAY_ENV, None)
    if progress is not None:
        progress.finish()
