"""Throwaway services for the integration tests: PostgreSQL, an MLflow server, MariaDB, munge and SLURM.

Each starts from scratch in its own folder on loopback ports, as the commands in docs/cluster.md do, and is stopped
by the PID it was started with. Missing programs are installed with apt when running as root; otherwise the tests
that need them are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: Programs each service needs, and the Debian packages that provide them.
POSTGRES = {"initdb": "postgresql", "pg_ctl": "postgresql", "psql": "postgresql-client"}
SLURM = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge",
         "munge": "munge", "slurmdbd": "slurmdbd", "mariadbd": "mariadb-server",
         "mariadb-install-db": "mariadb-server"}
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
_apt_updated = False


class Unavailable(Exception):
    """A service cannot be provided here (the reason says why and how to fix it)."""


def which(program: str) -> str | None:
    """``program`` on PATH, in an sbin folder, or in PostgreSQL's versioned bin folder."""
    found = shutil.which(program) or shutil.which(program, path=os.pathsep.join(_SBIN))
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return versions[-1] if versions else None


def ensure(programs: dict[str, str]) -> dict[str, str]:
    """Paths of ``programs``, installing their packages with apt first when missing (root only)."""
    global _apt_updated
    missing = sorted({pkg for prog, pkg in programs.items() if which(prog) is None})
    if missing:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise Unavailable(f"missing {', '.join(p for p in programs if which(p) is None)}: install "
                              f"{' '.join(missing)} (apt-get needs root; running as uid {os.geteuid()})")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        steps = ([] if _apt_updated else [["apt-get", "update", "-qq"]]) + [
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]]
        for cmd in steps:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise Unavailable(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-400:]}")
        _apt_updated = True
    paths = {prog: which(prog) for prog in programs}
    if None in paths.values():
        raise Unavailable(f"{[p for p, v in paths.items() if v is None]} not found after installing {missing}")
    return paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, timeout: float, log: Path | None = None) -> None:
    """Poll ``check()`` until it is true, else fail naming ``what`` with the end of ``log``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up within {timeout:.0f}s\n{tail}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Service:
    """Processes started for one service, stopped in reverse order by their PIDs."""

    name: str
    root: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # daemons that fork away from their Popen

    def start(self, cmd: list[str], log: Path, user: str | None = None, env: dict | None = None
              ) -> subprocess.Popen:
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, user=user, env=env,
                                    start_new_session=True, cwd=self.root)
        self.procs.append(proc)
        return proc

    def stop(self, keep: bool = False) -> None:
        """Stop every process by its PID, then remove the folder unless ``keep`` (to read the logs)."""
        for pid in reversed(self.pids):
            _terminate(pid, None)
        for proc in reversed(self.procs):
            _terminate(proc.pid, proc)
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


def _terminate(pid: int, proc: subprocess.Popen | None, grace: float = 20) -> None:
    """SIGTERM the process group led by ``pid`` (the service and what it forked), SIGKILL after ``grace``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM) if proc is not None else os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        if proc is None and not _alive(pid):
            return
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL) if proc is not None else os.kill(pid, signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    # children the service left in its group (gunicorn/uvicorn workers, slurmstepd)
    if proc is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def service_dir(prefix: str, owner: str | None = None) -> Path:
    """A fresh folder in the system temp dir (readable by ``owner``, which pytest's 0700 tmp dirs are not)."""
    path = Path(tempfile.mkdtemp(prefix=f"countboard-{prefix}-"))
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


# --- PostgreSQL + MLflow server ------------------------------------------------------------------------------


@dataclass
class Postgres(Service):
    port: int = 0
    uri: str = ""


def start_postgres() -> Postgres:
    """A PostgreSQL cluster (initdb as a non-root user) on a loopback port with a database ``mlflow`` owned by a
    password-authenticated role ``mlflow`` -- the steps of docs/cluster.md."""
    bins = ensure(POSTGRES)
    user = "postgres" if os.geteuid() == 0 else None
    if user:
        try:
            pwd.getpwnam(user)
        except KeyError as exc:
            raise Unavailable("running as root, but there is no `postgres` user to run initdb as") from exc
    root = service_dir("pg", user)
    svc = Postgres("postgres", root, port=free_port())
    data, password = root / "data", "mlflow-test-pw"
    pwfile = root / "pw"
    pwfile.write_text(password)
    if user:
        os.chown(pwfile, pwd.getpwnam(user).pw_uid, -1)
    run = dict(user=user, capture_output=True, text=True, timeout=120, cwd=root)
    proc = subprocess.run([bins["initdb"], "-D", str(data), "-U", "postgres", "--auth-local=trust",
                           "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8"], **run)
    if proc.returncode != 0:
        raise RuntimeError(f"initdb failed: {proc.stderr[-1000:]}")
    postgres = str(Path(bins["initdb"]).with_name("postgres"))
    svc.start([postgres, "-D", str(data), "-p", str(svc.port), "-k", str(root), "-c", "listen_addresses=127.0.0.1",
               "-c", "fsync=off"], root / "postgres.log", user=user)
    psql = [bins["psql"], "-h", str(root), "-p", str(svc.port), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
    wait_for(lambda: subprocess.run([*psql, "-c", "SELECT 1"], **run).returncode == 0, "PostgreSQL", 60,
             root / "postgres.log")
    for sql in (f"CREATE ROLE mlflow LOGIN PASSWORD '{password}'", "CREATE DATABASE mlflow OWNER mlflow"):
        proc = subprocess.run([*psql, "-c", sql], **run)
        if proc.returncode != 0:
            svc.stop()
            raise RuntimeError(f"psql {sql!r} failed: {proc.stderr[-500:]}")
    svc.uri = f"postgresql://mlflow:{password}@127.0.0.1:{svc.port}/mlflow"
    return svc


@dataclass
class MlflowServer(Service):
    url: str = ""
    artifacts: Path = Path()


def start_mlflow_server(backend_uri: str, env: dict[str, str]) -> MlflowServer:
    """``countboard server`` on ``backend_uri`` with proxied artifacts in a fresh folder."""
    root = service_dir("mlflow")
    svc = MlflowServer("mlflow", root, artifacts=root / "artifacts")
    port = free_port()
    svc.url = f"http://127.0.0.1:{port}"
    svc.start([sys.executable, "-m", "countboard.cli", "server", "--backend-store-uri", backend_uri,
               "--artifacts-destination", str(svc.artifacts), "--port", str(port), "--workers", "2"],
              root / "server.log", env=env)

    def healthy() -> bool:
        if svc.procs[0].poll() is not None:
            raise RuntimeError((root / "server.log").read_text()[-2000:])
        return urllib.request.urlopen(f"{svc.url}/health", timeout=2).status == 200

    wait_for(healthy, "mlflow server", 180, root / "server.log")
    return svc


# --- SLURM: munge, MariaDB + slurmdbd, slurmctld, slurmd -----------------------------------------------------


@dataclass
class Slurm(Service):
    conf: Path = Path()
    env: dict[str, str] = field(default_factory=dict)
    partition: str = "small"

    def cmd(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A SLURM client command (squeue, sacct, scancel…) against this cluster."""
        proc = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        return proc


def _node_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 4096


def slurm_conf(root: Path, ports: dict[str, int], munge_socket: Path, cpus: int, accounting: bool) -> str:
    """A single-node slurm.conf on loopback: node ``cbnode`` (``cpus`` CPUs) in partition ``small``."""
    host = socket.gethostname().split(".")[0]
    lines = [
        "ClusterName=countboard", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root",
        f"SlurmctldPort={ports['ctld']}", f"SlurmdPort={ports['d']}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU_Memory", "SchedulerType=sched/backfill",
        "SlurmdParameters=config_overrides", "ReturnToService=2", "MpiDefault=none",
        "SchedulerParameters=sched_interval=2", "MinJobAge=30", "KillWait=5",
        # the node may announce more memory than the machine has: nothing enforces it (task/none), and the
        # presets' defaults must fit as they are
        f"NodeName=cbnode NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} "
        f"RealMemory={max(16384, _node_memory_mb())} State=UNKNOWN",
        "PartitionName=small Nodes=cbnode Default=YES MaxTime=120 State=UP",
    ]
    if accounting:
        lines += ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
                  f"AccountingStoragePort={ports['dbd']}"]
    else:
        lines += ["AccountingStorageType=accounting_storage/none"]
    return "\n".join(lines) + "\n"


#: SLURM's accounting connection reaches munge only at its default socket, whatever AuthInfo says.
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def _munge_works(sock: Path) -> bool:
    enc = subprocess.run(["munge", "-n", "-S", str(sock)], capture_output=True, timeout=10)
    return enc.returncode == 0 and subprocess.run(["unmunge", "-S", str(sock)], input=enc.stdout,
                                                  capture_output=True, timeout=10).returncode == 0


def _start_munge(svc: Slurm, bins: dict[str, str]) -> Path:
    """The host's munged when one answers on the default socket, else one started with a fresh key."""
    if MUNGE_SOCKET.exists() and _munge_works(MUNGE_SOCKET):
        return MUNGE_SOCKET
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    key = svc.root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    svc.start([bins["munged"], "--foreground", "--force", f"--key-file={key}", f"--socket={MUNGE_SOCKET}",
               f"--pid-file={svc.root / 'munged.pid'}", f"--seed-file={svc.root / 'munge.seed'}",
               f"--log-file={svc.root / 'munged.log'}"], svc.root / "munged.out")
    wait_for(lambda: _munge_works(MUNGE_SOCKET), "munged", 20, svc.root / "munged.out")
    return MUNGE_SOCKET


def _start_accounting(svc: Slurm, bins: dict[str, str], ports: dict[str, int], sock: Path) -> None:
    """MariaDB on loopback with a ``slurm`` user, then slurmdbd storing into it."""
    db = svc.root / "mariadb"
    db.mkdir()
    shutil.chown(db, "mysql", "mysql")
    out = subprocess.run([bins["mariadb-install-db"], "--no-defaults", f"--datadir={db}", "--user=mysql",
                          "--auth-root-authentication-method=normal", "--skip-test-db"],
                         capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed: {out.stderr[-1000:]}")
    db_sock = db / "mariadb.sock"  # in a folder the mysql user may write
    svc.start([bins["mariadbd"], "--no-defaults", f"--datadir={db}", f"--socket={db_sock}", f"--port={ports['sql']}",
               "--bind-address=127.0.0.1", "--skip-name-resolve", "--user=mysql", "--innodb-buffer-pool-size=32M",
               f"--pid-file={db / 'mariadb.pid'}"], svc.root / "mariadb.log")
    wait_for(db_sock.exists, "MariaDB", 60, svc.root / "mariadb.log")
    mysql = which("mariadb") or which("mysql")
    sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-test-pw'; "
           "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")
    wait_for(lambda: subprocess.run([mysql, "--no-defaults", f"--socket={db_sock}", "-uroot", "-e", sql],
                                    capture_output=True, timeout=30).returncode == 0,
             "MariaDB user", 30, svc.root / "mariadb.log")
    conf = svc.root / "slurmdbd.conf"
    conf.write_text("\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={sock}", "DbdHost=localhost", "DbdAddr=127.0.0.1",
        f"DbdPort={ports['dbd']}", "SlurmUser=root", f"PidFile={svc.root / 'slurmdbd.pid'}",
        f"LogFile={svc.root / 'slurmdbd.log'}", "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1", f"StoragePort={ports['sql']}", "StorageUser=slurm",
        "StoragePass=slurm-test-pw", "StorageLoc=slurm_acct_db"]) + "\n")
    conf.chmod(0o600)
    svc.start([bins["slurmdbd"], "-D"], svc.root / "slurmdbd.out", env=svc.env)
    wait_for(lambda: port_open(ports["dbd"]), "slurmdbd", 90, svc.root / "slurmdbd.log")


def start_slurm(cpus: int = 2, accounting: bool = True) -> Slurm:
    """A single-node SLURM cluster on loopback (root only: slurmd starts jobs as their user)."""
    if os.geteuid() != 0:
        raise Unavailable("a throwaway SLURM cluster needs root (slurmd runs jobs as their submitting user)")
    bins = ensure(SLURM)
    root = service_dir("slurm")
    root.chmod(0o755)
    svc = Slurm("slurm", root, conf=root / "slurm.conf")
    (root / "state").mkdir()
    (root / "spool").mkdir()
    ports = {k: free_port() for k in ("ctld", "d", "dbd", "sql")}
    svc.env = {**os.environ, "SLURM_CONF": str(svc.conf)}
    try:
        sock = _start_munge(svc, bins)
        svc.conf.write_text(slurm_conf(root, ports, sock, cpus, accounting))
        if accounting:
            _start_accounting(svc, bins, ports, sock)
            svc.cmd("sacctmgr", "-i", "add", "cluster", "countboard", check=False)
        svc.start([bins["slurmctld"], "-D", "-i"], root / "slurmctld.out", env=svc.env)
        wait_for(lambda: svc.cmd("scontrol", "ping", check=False).returncode == 0, "slurmctld", 60,
                 root / "slurmctld.log")
        svc.start([bins["slurmd"], "-D", "-N", "cbnode"], root / "slurmd.out", env=svc.env)
        wait_for(lambda: "idle" in svc.cmd("sinfo", "-h", "-o", "%T", check=False).stdout, "slurmd", 60,
                 root / "slurmd.log")
    except BaseException:
        svc.stop()
        raise
    return svc
