"""``countboard doctor``: find what is inconsistent in a store, and repair it with ``--fix``.

Checks: the database file (SQLite's full ``integrity_check``; a half-created, damaged or foreign file; artifact
locations of a copied or moved store; what a stopped repair left); expired leases; RUNNING cell runs without a live
owner; RUNNING sweep parents whose children have all ended; cell runs without params or ``config.yaml``; runs whose
files differ from their artifact manifest; artifact folders of runs the store does not know; an index older than
the store. Without ``--fix`` nothing is changed (dry run). Every repair brings the
store to a state the checks accept, so a second ``--fix`` finds nothing.

A run a live process owns is never repaired, only named (``[live] … is owned by a live sweep (pid P on host H,
heartbeat 3 s ago): left as it is``): a cell's live lease, a sweep parent's owner record (``lease.Owner``: a
process of this host while it exists; of another host while its heartbeat is at most ``--lease-ttl-s`` old).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from countboard.commands import store_argument

if TYPE_CHECKING:
    from countboard.tracking.address import StoreAddress

log = logging.getLogger("countboard")


@dataclass
class Finding:
    """One inconsistency: what it is, where, and the repair ``--fix`` applies."""

    kind: str
    what: str
    repair: str
    fix: Callable[[], None]

    def line(self) -> str:
        return f"[{self.kind}] {self.what} -> {self.repair}"


#: Store findings after which nothing else of the store can be read (or proven) until they are repaired.
BLOCKING = ("half-created", "damaged", "not an MLflow store", "older MLflow schema", "repair was stopped before",
            "is missing")


def _repair_findings(db: Path) -> list[Finding]:
    """What a stopped repair left (``tracking.repair``): a swap to complete, a database to put back in a folder
    that lost it, recovered files of a build that was stopped, a stale intent file."""
    from countboard.tracking import repair

    steps = repair.pending(db)
    if steps is not None:
        return [Finding("store", f"a repair was stopped before {steps[0].name} replaced {db} (the damaged "
                        f"database is kept as {steps[1].name})", "complete it", lambda: _complete(db))]
    out = []
    if repair.intent_path(db).exists():
        out.append(Finding("store", f"{repair.intent_path(db)} was left by a repair that finished", "delete it",
                           lambda: repair.intent_path(db).unlink(missing_ok=True)))
    if not db.is_file() and (seen := repair.traces(db)):
        names = ", ".join(p.name for p in seen[:4]) + (f" and {len(seen) - 4} more" if len(seen) > 4 else "")
        source = repair.restorable(db)
        if source is None:
            return [*out, Finding("store", f"{db} is missing but the store holds {names}", "none: restore it from "
                                  "a backup, or move those files away to start a new store there", lambda: None)]
        what = "put it back" if repair.RECOVERED in source.name else "put it back and repair it"
        return [*out, Finding("store", f"{db} is missing but the store holds {names} (its database was lost, e.g. "
                              f"by a repair that was stopped)", f"{what} from {source.name}", lambda: _restore(db))]
    for build in repair.stopped_builds(db):
        out.append(Finding("store", f"{build} was left by a repair that was stopped", "delete it",
                           lambda b=build: _locked(db, lambda: repair.delete_build(b))))
    return out


def _complete(db: Path) -> None:
    from countboard.tracking.local_store import finish_repair
    from countboard.tracking.relocate import rewrite_locations

    finish_repair(db)
    rewrite_locations(db)  # as after a recovery: one --fix repairs all


def _locked(db: Path, action: Callable[[], object]) -> None:
    from countboard.tracking.local_store import LOCK_NAME, file_lock

    with file_lock(db.parent / LOCK_NAME):
        action()


def _restore(db: Path) -> None:
    from countboard.tracking import integrity, repair

    sources = []
    _locked(db, lambda: sources.append(repair.restore(db)))
    print(f"put {sources[0].name} back as {db}")
    if integrity.check_db(db, full=True).kind == integrity.DAMAGED:
        _recover(db)
    else:
        from countboard.tracking.relocate import rewrite_locations

        rewrite_locations(db)  # as after a recovery: one --fix repairs all


def _store_file_findings(where: StoreAddress) -> list[Finding]:
    """The database file itself: SQLite's full ``integrity_check``, MLflow's schema, leftovers of a stopped
    creation, and artifact locations that name another folder (a copied or moved store)."""
    from countboard.tracking import integrity
    from countboard.tracking.local_store import DB_NAME, ensure_local_store
    from countboard.tracking.relocate import rewrite_locations, stale_locations

    root, db = where.folder, where.db
    if not where.is_embedded:
        return []
    out = _repair_findings(db)
    if not db.is_file() or any(any(b in f.what for b in BLOCKING) for f in out):
        return out
    health = integrity.check_db(db, full=True)
    if health.kind == integrity.HALF:
        out.append(Finding("store", f"{db} is half-created ({health.detail})",
                           "move it aside and create the store again", lambda: ensure_local_store(root)))
    elif health.kind == integrity.DAMAGED:
        out.append(Finding("store", f"{db} is damaged: {health.detail}",
                           f"copy what SQLite can read into a new {DB_NAME}, keeping the damaged file beside it",
                           lambda: _recover(db)))
    elif health.kind == integrity.FOREIGN:
        out.append(Finding("store", f"{db} is not an MLflow store: {health.detail}",
                           "none (it is never replaced): move that file away, or point --store at the store",
                           lambda: None))
    elif health.kind == integrity.OLD:
        out.append(Finding("store", f"{db} has an older MLflow schema: {health.detail}",
                           f"none: back it up, then run `mlflow db upgrade {where.uri}`", lambda: None))
    for stale in root.glob(f"{DB_NAME}.creating-*"):
        out.append(Finding("store", f"{stale} was left by a store creation that was stopped", "delete it",
                           lambda p=stale: p.unlink(missing_ok=True)))
    if health.ok and not where.read_only and (moved := stale_locations(db)):  # read-only: read in place anyway
        old, new = next(iter(moved.values()))
        out.append(Finding("store", f"artifact locations of {len(moved)} experiment(s) name another folder (the "
                           f"store was copied or moved; e.g. {old})", f"point them inside the store (e.g. {new})",
                           lambda: rewrite_locations(db)))
    return out


def _recover(db: Path) -> None:
    from countboard.tracking.local_store import recover_store
    from countboard.tracking.relocate import rewrite_locations

    aside, health = recover_store(db)
    print(f"recovered {db} ({health.runs} runs readable); the damaged file is kept as {aside}")
    rewrite_locations(db)  # a recovered copy of a moved store points at its own folder too (one --fix repairs all)


#: The kind of a line that names a run a live process owns: said, never repaired, not an inconsistency.
LIVE = "live"


def _left(what: str, owner) -> Finding:
    return Finding(LIVE, f"{what} is owned by a live {owner[0]} ({owner[1].describe()})", "left as it is",
                   lambda: None)


def _run_findings(tracker, exp_ids: list[str], ttl_s: float) -> list[Finding]:
    """Expired leases, RUNNING runs whose owner is gone, sweep parents whose children have all ended, finished
    cells without their config. A run a live process owns (a cell's live lease or owner, a sweep's owner record)
    is named as such and left; each repair checks again, when it is applied, that no live process owns it."""
    from countboard.tracking import store as st
    from countboard.tracking import tags as tg
    from countboard.tracking.lease import Owner, list_leases, owner_gone

    out: list[Finding] = []
    runs = tracker.find_runs(exp_ids, {})  # before the leases: a run RUNNING here had its lease before it ran
    leases = list_leases(tracker, exp_ids)
    live = set()
    for lease in leases:
        holder = lease.holder()
        if lease.expired(ttl_s) and not holder.live(ttl_s):
            out.append(Finding("lease", f"lease on {lease.key} of {lease.owner()} expired", "delete it",
                               lambda r=lease.run_id: tracker.delete_run(r)))
        else:
            live.add(lease.key)
    orphaned = set()
    for run in runs:
        role, name = run.tags.get(tg.ROLE), run.tags.get(tg.RUN_NAME, "")
        if role == tg.ROLE_CELL and run.status == st.RUNNING and run.tags.get(tg.CONFIG_HASH) not in live:
            owner = Owner.from_run_tags(run.tags)
            if owner is not None and owner.here() and owner.live(ttl_s):  # its lease is gone, its process is not
                out.append(_left(f"cell run {run.run_id} ({name})", ("process", owner)))
                continue
            orphaned.add(run.run_id)
            out.append(Finding("orphan", f"cell run {run.run_id} ({name}) is RUNNING "
                               "without a live owner", "mark it KILLED (the next sweep resumes it)",
                               lambda r=run: _end_orphan(tracker, exp_ids, r, ttl_s)))
        if role not in (tg.ROLE_CELL, tg.ROLE_SWEEP, tg.ROLE_LEASE) and run.status == st.RUNNING and owner_gone(run.tags):
            out.append(Finding("orphan", f"run {run.run_id} ({name}) is RUNNING but "
                               f"its process {run.tags.get(tg.OWNER)} is gone", "mark it KILLED",
                               lambda r=run.run_id: _end(tracker, r, st.KILLED, "owner gone; ended by doctor")))
        if role == tg.ROLE_CELL and run.status == st.FINISHED:  # a stopped run gets them when the next sweep resumes it
            missing = _missing_config(tracker, run.run_id)
            if missing:
                out.append(Finding("config", f"cell run {run.run_id} has no {missing}",
                                   "mark it FAILED so that the next sweep of the cell logs it (its units are kept)",
                                   lambda r=run.run_id, m=missing: _end(tracker, r, st.FAILED, f"no {m}")))
    for run in runs:  # after the cells: a parent is closed once the orphans among its children are ended
        if run.tags.get(tg.ROLE) != tg.ROLE_SWEEP or run.status != st.RUNNING:
            continue
        children = [c for c in runs if c.tags.get(tg.PARENT) == run.run_id]
        if any(c.status == st.RUNNING and c.run_id not in orphaned for c in children):
            continue
        owner = Owner.from_run_tags(run.tags)
        if owner is not None and owner.live(ttl_s):
            out.append(_left(f"sweep run {run.run_id}", ("sweep", owner)))
            continue
        gone = f" and {owner.why_gone(ttl_s)}" if owner is not None else ""
        out.append(Finding("parent", f"sweep run {run.run_id} is RUNNING but its {len(children)} children "
                           f"have ended{gone}", "end it FINISHED or FAILED with its children",
                           lambda r=run.run_id: _close_parent(tracker, exp_ids, r, ttl_s)))
    return out


def _end_orphan(tracker, exp_ids: list[str], run, ttl_s: float) -> None:
    """Mark the cell run KILLED unless, by now, it ended or a live process claimed its cell (then say so)."""
    from countboard.tracking import store as st
    from countboard.tracking import tags as tg
    from countboard.tracking.lease import list_leases

    status = tracker.get_status(run.run_id)
    key = run.tags.get(tg.CONFIG_HASH)
    holders = [lease.holder() for lease in list_leases(tracker, exp_ids, key)] if key else []
    owner = next((h for h in holders if h.live(ttl_s)), None)
    if status != st.RUNNING or owner is not None:
        why = f"is owned by a live process ({owner.describe()})" if owner is not None else f"is {status} by now"
        print(f"[{LIVE}] cell run {run.run_id} {why}: left as it is")
        return
    _end(tracker, run.run_id, st.KILLED, "owner gone; ended by doctor")


def _close_parent(tracker, exp_ids: list[str], run_id: str, ttl_s: float) -> None:
    """Close the sweep's parent run from its children unless, by now, a live sweep owns it (then say so)."""
    from countboard.tracking import store as st
    from countboard.tracking.callbacks import close_parent
    from countboard.tracking.lease import Owner

    run = tracker.client.get_run(run_id)
    owner = Owner.from_run_tags(run.data.tags)
    if run.info.status != st.RUNNING or (owner is not None and owner.live(ttl_s)):
        why = (f"is {run.info.status} by now" if run.info.status != st.RUNNING
               else f"is owned by a live sweep ({owner.describe()})")
        print(f"[{LIVE}] sweep run {run_id} {why}: left as it is")
        return
    close_parent(tracker, exp_ids, run_id, ttl_s)


def _manifest_findings(tracker, found: list[Finding], damaged: str = "recompute") -> list[Finding]:
    """Runs whose files differ from their artifact manifest (``tracking.audit``), each named once; ``damaged``
    says what ``--fix`` does with them: ``recompute`` (the run FAILED, for the next sweep) or ``accept`` (the
    manifest records the files as they are now; the run stays as it is)."""
    from countboard.tracking import audit

    out = []
    for damage in audit.damaged_runs(tracker):
        if any(f"run {damage.run_id} " in f.what for f in found):  # already named (no config.yaml, RUNNING)
            continue
        if damaged == "accept":
            out.append(Finding("artifacts", f"{damage.line()} (against its artifact manifest)",
                               "record its files as they are now in its manifest (--damaged-runs accept)",
                               lambda d=damage: tracker.record_artifacts(d.run_id)))
            continue
        out.append(Finding("artifacts", f"{damage.line()} (against its artifact manifest)",
                           "mark it FAILED so that the next sweep recomputes it (differing files kept as "
                           "<name>.damaged-<time>; nothing is deleted)",
                           lambda d=damage: audit.mark_for_recompute(tracker, d)))
    return out


def _missing_config(tracker, run_id: str) -> str | None:
    if not tracker.params(run_id):
        return "params"
    if "config.yaml" not in tracker.list_artifacts(run_id):
        return "config.yaml"
    return None


def _end(tracker, run_id: str, status: str, why: str) -> None:
    from countboard.tracking.tags import ERROR

    tracker.set_tags(run_id, {ERROR: why})
    tracker.set_status(run_id, status)


def _artifact_findings(tracker, root: Path) -> list[Finding]:
    """Run folders under local experiment artifact locations that belong to no run (active or deleted).

    A folder is moved only when it is proven to be an orphan: the database passed ``integrity_check`` and no
    earlier recovery (a ``mlflow.db.damaged-*`` file beside it) may have lost the run it belongs to.
    """
    from countboard.tracking.relocate import EXPERIMENT_DEPTH, store_relative

    out = []
    lost = root / "lost+found"
    recovered = sorted(p.name for p in root.glob("mlflow.db.damaged-*") if not p.name.endswith(_SIDECARS))
    for exp in tracker.experiments(include_deleted=True):
        location = store_relative(exp.artifact_location or "", root, EXPERIMENT_DEPTH)
        parsed = urlparse(location)
        if parsed.scheme not in ("file", ""):
            continue
        if parsed.scheme == "file":
            from urllib.request import url2pathname  # http.client and email with it: not for every --help

            folder = Path(url2pathname(parsed.path))
        else:
            folder = Path(location)
        if not folder.is_dir() or not folder.resolve().is_relative_to(root.resolve()):
            continue
        folders = sorted(p for p in folder.iterdir() if p.is_dir())
        known = tracker.run_ids(exp.experiment_id)  # after the folders: a run starting now is in one or neither
        for child in folders:
            if child.name in known:
                continue
            if recovered:
                out.append(Finding("artifacts", f"{child} belongs to no run of experiment {exp.name!r}, but it may "
                                   f"be a run lost when the database was recovered ({recovered[-1]} keeps the "
                                   "damaged one)", "none: kept where it is (delete the damaged file once you have "
                                   "checked it)", lambda: None))
                continue
            dest = lost / folder.name / child.name
            out.append(Finding("artifacts", f"{child} belongs to no run of experiment {exp.name!r}",
                               f"move it to {dest}", lambda s=child, d=dest: _move(s, d)))
    return out


_SIDECARS = ("-wal", "-shm", "-journal")


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dest))


def _index_findings(tracker, db: Path) -> list[Finding]:
    from countboard.index.builder import build_index
    from countboard.index.reader import connect_readonly

    out = [Finding("index", f"{p} was left by an index build that was stopped", "delete it",
                   lambda p=p: p.unlink(missing_ok=True)) for p in db.parent.glob(f"{db.name}.tmp-*")]
    if not db.is_file():
        return out
    con = connect_readonly(db)
    try:
        listed = int(dict(con.execute("SELECT key, value FROM meta").fetchall()).get("listed_ms", 0))
    finally:
        con.close()
    if tracker.last_change_ms() > listed:
        out.append(Finding("index", f"index {db} is older than the store", "update it (countboard index)",
                           lambda: build_index(tracker.uri, db, update="scan")))
    return out


def diagnose(arg: str | None, db: Path | None = None, ttl_s: float = 60.0, damaged: str = "recompute"
             ) -> list[Finding]:
    """Every inconsistency of the store named by ``arg`` (as ``--store``) and of its index."""
    from countboard.tracking.address import resolve
    from countboard.tracking.store import open_address

    where = resolve(arg)
    findings = _store_file_findings(where)
    if any(f.kind == "store" and any(b in f.what for b in BLOCKING) for f in findings):
        return findings  # nothing else can be read (or proven an orphan) until the store is whole
    tracker = open_address(where, create=False)
    tracker.check()
    # one pass over every experiment: a sweep's children and leases sit in their families' experiments
    findings += _run_findings(tracker, [str(e.experiment_id) for e in tracker.experiments()], ttl_s)
    findings += _manifest_findings(tracker, findings, damaged)
    if where.folder is not None:
        findings += _artifact_findings(tracker, where.folder)
    findings += _index_findings(tracker, db or where.index_path())
    return findings


def run(args: argparse.Namespace) -> int:
    findings = diagnose(args.store, args.db.expanduser().resolve() if args.db else None, args.lease_ttl_s,
                        args.damaged_runs)
    for f in findings:
        if f.kind == LIVE:  # a run a live process owns: said, and left to it
            print(f"[{LIVE}] {f.what}: {f.repair}")
    findings = [f for f in findings if f.kind != LIVE]
    if not findings:
        print("store is consistent: nothing to repair")
        return 0
    for f in findings:
        print(f.line())
    if not args.fix:
        print(f"{len(findings)} inconsistencies; run again with --fix to repair them", file=sys.stderr)
        return 1
    from countboard.tracking.address import resolve

    if resolve(args.store).read_only:
        print(f"{len(findings)} inconsistencies; the store is read-only here: run `countboard doctor --fix` where "
              "it can be written", file=sys.stderr)
        return 1
    for f in findings:
        f.fix()
    rest = [f for f in diagnose(args.store, args.db, args.lease_ttl_s, args.damaged_runs)
            if f.kind not in ("index", LIVE)]
    print(f"repaired {len(findings)}; {len(rest)} left" + ("" if not rest else ": " + "; ".join(
        r.line() for r in rest)))
    return 0 if not rest else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("doctor", help="check a store for inconsistencies; --fix repairs them",
                              description=__doc__.split("\n\n")[1])
    store_argument(p)
    p.add_argument("--db", default=None, type=Path, help="index file (default: index.duckdb beside the store)")
    p.add_argument("--fix", action="store_true", help="repair what was found (default: only list it)")
    p.add_argument("--damaged-runs", choices=("recompute", "accept"), default="recompute",
                   help="what --fix does with a run whose files differ from its artifact manifest: recompute (mark it "
                        "FAILED for the next sweep, keeping the files as <name>.damaged-<time>; the default) or "
                        "accept (record its files as they are now)")
    p.add_argument("--lease-ttl-s", type=float, default=60.0,
                   help="a lease not heartbeated for this long has expired (the sweeps' lease_ttl_s)")
    p.set_defaults(func=run)

