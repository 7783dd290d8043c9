"""Leases: one process at a time owns a cell (or any other key) of an experiment.

A lease is a small MLflow run (tag ``countboard.role=lease``) that names its key, host, pid and a heartbeat. It
lives in the store itself, so the same claim works for a local SQLite store and for a remote MLflow server, and it
needs no shared file system.

Claiming is *announce, then check*: a process creates its lease run, then lists the live leases of the key. It
wins only if its own is the only live one. Two processes that announce at the same time both see each other, both
withdraw and try again after a random pause; a process that sees an already *held* lease gives up. Because each
process lists only after its own announcement is stored, two processes can never both win: the later of the two
announcements is listed by the later process.

A lease is live while its owner heartbeats (every ``ttl_s / 4``); a lease whose heartbeat is older than ``ttl_s``,
or whose owner is a process on this host that no longer exists, has expired: the next claim deletes it and may
take the key over. Released and expired leases are deleted (MLflow keeps them as deleted runs until ``mlflow gc``).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from dataclasses import dataclass

from countboard.processes import pid_alive, process_start
from countboard.tracking import tags as tg

log = logging.getLogger("countboard")

ROLE = tg.ROLE_LEASE
KEY_TAG, HOST_TAG, PID_TAG, START_TAG = tg.LEASE_KEY, tg.LEASE_HOST, tg.LEASE_PID, tg.LEASE_PID_START
HEARTBEAT_TAG, STATE_TAG = tg.LEASE_HEARTBEAT, tg.LEASE_STATE
DEFAULT_TTL_S = 60.0


OWNER_TAG, OWNER_START_TAG, OWNER_HEARTBEAT_TAG = tg.OWNER, tg.OWNER_PID_START, tg.OWNER_HEARTBEAT


def owner_tags() -> dict[str, str]:
    """Tags naming this process as a run's owner (``host:pid`` and the pid's start time)."""
    return {OWNER_TAG: f"{socket.gethostname()}:{os.getpid()}", OWNER_START_TAG: process_start(os.getpid())}


def owner_gone(tags: dict[str, str]) -> bool:
    """True when the run's owner is a process of this host that no longer exists (False when unknown)."""
    host, _, pid = tags.get(OWNER_TAG, "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return not pid_alive(int(pid), tags.get(OWNER_START_TAG, ""))


@dataclass(frozen=True)
class Owner:
    """The process that owns a run or a lease, as its tags name it: judged live or gone by one rule.

    On this host the process itself decides: it is live while it exists (its start time tells a reused pid
    apart), however late its heartbeat. On another host only the heartbeat can: the owner is live while its
    heartbeat is at most ``ttl_s`` old; without a heartbeat it cannot be proven live.
    """

    host: str
    pid: int
    pid_start: str
    heartbeat: float | None

    @classmethod
    def from_run_tags(cls, tags: dict[str, str]) -> Owner | None:
        """The owner a run's ``owner`` tags name (None when it has none)."""
        host, _, pid = tags.get(OWNER_TAG, "").rpartition(":")
        if not host or not pid.isdigit():
            return None
        beat = tags.get(OWNER_HEARTBEAT_TAG, "")
        return cls(host, int(pid), tags.get(OWNER_START_TAG, ""), _seconds(beat))

    def here(self) -> bool:
        return self.host == socket.gethostname()

    def live(self, ttl_s: float, now: float | None = None) -> bool:
        """True while the owner provably runs (see the class doc)."""
        if self.here():
            return bool(self.pid) and pid_alive(self.pid, self.pid_start)
        return self.heartbeat is not None and (now or time.time()) - self.heartbeat <= ttl_s

    def describe(self, now: float | None = None) -> str:
        """``pid P on host H, heartbeat N s ago`` (``no heartbeat`` when it has none)."""
        beat = ("no heartbeat" if self.heartbeat is None
                else f"heartbeat {max(0, round((now or time.time()) - self.heartbeat))} s ago")
        return f"pid {self.pid} on host {self.host}, {beat}"

    def why_gone(self, ttl_s: float, now: float | None = None) -> str:
        """Why :meth:`live` is False, in words."""
        if self.here():
            return f"its process (pid {self.pid} on this host, {self.host}) is gone"
        if self.heartbeat is None:
            return f"its owner (pid {self.pid} on host {self.host}) never heartbeated"
        age = round((now or time.time()) - self.heartbeat)
        return (f"its owner (pid {self.pid} on host {self.host}) last heartbeated {age} s ago, more than the "
                f"{ttl_s:g} s --lease-ttl-s")


def _seconds(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


class OwnerHeartbeat:
    """This process's owner record on a run (``owner`` tags and a heartbeat), renewed every ``ttl_s / 4`` until
    :meth:`stop`: ``countboard doctor`` leaves a RUNNING run with a live owner as it is.

    Args:
        tracker: The store.
        run_id: The run this process owns (a sweep's parent run).
        ttl_s: An owner on another host whose heartbeat is older than this is taken as gone.
    """

    def __init__(self, tracker, run_id: str, ttl_s: float = DEFAULT_TTL_S):
        self.tracker, self.run_id, self.ttl_s = tracker, run_id, float(ttl_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Write the owner record now (the whole record: another process of the same sweep may have replaced it)."""
        self.tracker.set_tags(self.run_id, {**owner_tags(), OWNER_HEARTBEAT_TAG: f"{time.time():.3f}"})

    def start(self) -> OwnerHeartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"owner-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                self.beat()
            except Exception as exc:  # the store is down for a while: the next beat tries again
                log.warning("owner heartbeat on run %s failed: %s", self.run_id, exc)

    def __getstate__(self) -> dict:
        """A copy sent to another process (a launcher pickles the sweep's callbacks) renews nothing."""
        return {"tracker": self.tracker, "run_id": self.run_id, "ttl_s": self.ttl_s}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._stop, self._thread = threading.Event(), None
        self._stop.set()

    def stop(self) -> None:
        """Stop renewing (idempotent); the record stays, naming a process that will soon be gone."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


@dataclass(frozen=True)
class LeaseInfo:
    """One lease as read from the store."""

    run_id: str
    key: str
    host: str
    pid: int
    pid_start: str
    heartbeat: float
    state: str

    @classmethod
    def from_tags(cls, run_id: str, tags: dict[str, str]) -> LeaseInfo:
        return cls(run_id, tags.get(KEY_TAG, ""), tags.get(HOST_TAG, ""), int(tags.get(PID_TAG, "0") or 0),
                   tags.get(START_TAG, ""), float(tags.get(HEARTBEAT_TAG, "0") or 0), tags.get(STATE_TAG, ""))

    def expired(self, ttl_s: float, now: float | None = None) -> bool:
        """True when the owner stopped heartbeating for ``ttl_s``, or is a process of this host that is gone."""
        if self.host == socket.gethostname() and self.pid and not pid_alive(self.pid, self.pid_start):
            return True
        return (now or time.time()) - self.heartbeat > ttl_s

    def owner(self) -> str:
        return f"{self.host}:{self.pid}"

    def holder(self) -> Owner:
        """The lease's owner, judged by ``Owner``'s rule (``doctor``: a live process of this host keeps its lease
        however late its heartbeat; claims use :meth:`expired`, which also takes over a frozen one)."""
        return Owner(self.host, self.pid, self.pid_start, self.heartbeat or None)


def list_leases(tracker, experiment_id: str | list[str], key: str | None = None) -> list[LeaseInfo]:
    """Active lease runs of one experiment or several (of ``key`` only, when given)."""
    tags = {tg.ROLE: ROLE, **({KEY_TAG: key} if key else {})}
    return [LeaseInfo.from_tags(r.run_id, r.tags) for r in tracker.find_runs(experiment_id, tags)]


class Lease:
    """A claim on ``key`` in one experiment; use ``acquire()`` / ``release()`` or ``with`` (which waits).

    Args:
        tracker: The store.
        experiment_id: Experiment whose runs the key protects.
        key: What is owned (a cell's ``config_hash``, ``sweep:<hash>``).
        ttl_s: A lease not heartbeated for this long has expired.
    """

    def __init__(self, tracker, experiment_id: str, key: str, ttl_s: float = DEFAULT_TTL_S):
        if ttl_s <= 0:
            raise ValueError(f"lease ttl_s must be positive, got {ttl_s}")
        self.tracker, self.experiment_id, self.key, self.ttl_s = tracker, experiment_id, key, float(ttl_s)
        self.run_id: str | None = None
        self.holder: LeaseInfo | None = None  # the live lease that kept us out, after a failed acquire
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _announce(self) -> str:
        tags = {tg.ROLE: ROLE, KEY_TAG: self.key, HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()),
                START_TAG: process_start(os.getpid()), HEARTBEAT_TAG: f"{time.time():.3f}", STATE_TAG: "pending"}
        return self.tracker.create_run(self.experiment_id, f"lease {self.key}"[:200], tags)

    def _others(self, mine: str) -> list[LeaseInfo]:
        live = []
        for lease in list_leases(self.tracker, self.experiment_id, self.key):
            if lease.run_id == mine:
                continue
            if lease.expired(self.ttl_s):
                log.info("lease on %s held by %s expired; taking it over", self.key, lease.owner())
                try:
                    self.tracker.delete_run(lease.run_id)
                except Exception as exc:  # another claimant removed it first
                    log.debug("expired lease %s not deleted: %s", lease.run_id, exc)
            else:
                live.append(lease)
        return live

    def acquire(self, attempts: int = 8) -> bool:
        """Claim the key. False when another live process holds it (``holder`` says who)."""
        for attempt in range(attempts):
            mine = self._announce()
            others = self._others(mine)
            if not others:
                self.run_id = mine
                self.tracker.set_tags(mine, {STATE_TAG: "held"})
                self._start_heartbeat()
                return True
            self.tracker.delete_run(mine)
            held = [o for o in others if o.state == "held"]
            if held:
                self.holder = held[0]
                return False
            time.sleep(random.uniform(0.05, 0.3) * (attempt + 1))  # both announced at once: back off, retry
        self.holder = others[0]
        return False

    def wait(self, poll_s: float = 2.0, timeout_s: float | None = None) -> bool:
        """Acquire, waiting while another process holds the key; False after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.acquire():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
        return True

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.key}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                self.tracker.set_tags(self.run_id, {HEARTBEAT_TAG: f"{time.time():.3f}"})
            except Exception as exc:  # deleted as expired by another process, or the store is down
                if "active" in str(exc).lower():
                    log.error("lease on %s was taken over by another process", self.key)
                    self.lost.set()
                    return
                log.warning("lease heartbeat on %s failed: %s", self.key, exc)

    def release(self) -> None:
        """Stop heartbeating and delete the lease (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.run_id is not None:
            run_id, self.run_id = self.run_id, None
            try:
                self.tracker.delete_run(run_id)
            except Exception as exc:  # an expired lease someone already removed
                log.debug("lease %s not deleted: %s", run_id, exc)

    def __enter__(self) -> Lease:
        self.wait(poll_s=0.2)
        return self

    def __exit__(self, *exc) -> None:
        self.release()
