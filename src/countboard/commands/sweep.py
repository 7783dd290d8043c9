"""``countboard-sweep``: the Hydra application. Each job runs one cell (``engine.run_job``).

Examples:
    countboard-sweep model=oracle dataset=synthetic_shapes task=praco_negative
    countboard-sweep -m model=oracle,class_blind task=praco_negative,praco_mosaic hydra/launcher=joblib
"""

from __future__ import annotations

import os
import re
import signal
import sys
import textwrap
from dataclasses import fields
from typing import TYPE_CHECKING

from countboard.config import Config, TrackingConf, quote_values, unreadable_override
from countboard.errors import DEBUG_ENV, debug_enabled, user_message
from countboard.paths import conf_dir
from countboard.quiet import VERBOSE_ENV, silence
from countboard.tracking.address import TRACKING_URI_ENV
from countboard.tracking.progress import (FAILED, FINISHED, KILLED, SKIPPED, CellReport, finish_progress, job_report,
                                          relayed_output)

if TYPE_CHECKING:
    from omegaconf import DictConfig


class CellError(Exception):
    """A cell's error the user can fix, as the one line the user sees (``error: [job #N (overrides): ]message``).

    The job prints it when it fails (the other jobs of a multirun go on); ``args[1]`` identifies the stderr it
    was printed on, so that ``main`` prints it again only where the job's output went elsewhere (a SLURM log).
    """

    def __init__(self, line: str, shown_on: tuple[int, int] | None = None):
        super().__init__(line, shown_on)

    def __str__(self) -> str:
        return str(self.args[0])

    def shown_here(self) -> bool:
        return self.args[1] is not None and self.args[1] == _stderr_id()


def _stderr_id() -> tuple[int, int] | None:
    """The device and inode of this process's stderr (a terminal, pipe or file), None if it has no descriptor."""
    try:
        sys.stderr.flush()
        stat = os.fstat(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    return stat.st_dev, stat.st_ino


def _job_label() -> str:
    """``job #N (overrides): `` for a job of a multirun (Hydra's launch log names the jobs so), else empty."""
    from hydra.core.hydra_config import HydraConfig

    try:
        hc = HydraConfig.get()
    except ValueError:
        return ""
    if not str(hc.mode).endswith("MULTIRUN"):
        return ""
    from countboard.tracking.reach import redact

    return f"job #{hc.job.num} ({' '.join(redact_override(o, redact) for o in hc.overrides.task)}): "


def redact_override(override: str, redact) -> str:
    """``key=URI`` with the URI's password hidden (a store's ``tracking.uri`` on a job's line).

    Example:
        >>> from countboard.tracking.reach import redact
        >>> redact_override("tracking.uri=postgresql://u:pw@db/runs", redact)
        'tracking.uri=postgresql://u:***@db/runs'
    """
    key, eq, value = override.partition("=")
    if not eq or "@" not in value:
        return override
    unquoted = value.replace("\\:", ":")  # Hydra's override grammar escapes the colons of a value
    shown = redact(unquoted)
    return override if shown == unquoted else f"{key}={shown}"


def _app() -> None:
    """The Hydra application (imported here: ``--help`` and the argument checks run without Hydra)."""
    import hydra

    from countboard.config import register_configs

    register_configs()
    hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_job)()


#: The pid of the ``countboard-sweep`` process, for the jobs a launcher runs in processes of its own.
SWEEP_PID_ENV = "COUNTBOARD_SWEEP_PID"


def _job(cfg: DictConfig) -> str | None:
    from countboard.config import register_resolvers
    from countboard.engine import run_job

    register_resolvers()  # a launcher's fresh worker resolves the config it was sent
    if os.environ.get(SWEEP_PID_ENV, str(os.getpid())) != str(os.getpid()):
        from countboard.processes import die_with_parent

        # a launcher's job process ends with the sweep, however the sweep ends (as if the sweep had been killed
        # with it: the cell's run is resumed by the rerun); the launchers' own initializers say so sooner
        die_with_parent()
    silence()  # again after Hydra's logging setup, and in a launcher's fresh worker process
    report = _job_report()
    if report is not None:  # the sweep's one line shows the cell's units: no bar of its own
        cfg.progress = False
    shown_on = _stderr_id()  # a job's output relayed to the sweep's terminal is shown there
    with relayed_output(report, here=os.environ.get(SWEEP_PID_ENV) == str(os.getpid())):
        try:
            run_id = run_job(cfg, report)
        except Exception as exc:
            message = user_message(exc)
            if message is None or debug_enabled():
                if report is not None:
                    report.end(FAILED, reason=_first_line(f"{type(exc).__name__}: {exc}"))
                raise
            line = f"error: {_job_label()}{message}"
            print(line, file=sys.stderr, flush=True)
            if report is not None:
                report.end(FAILED, reason=message)
            raise CellError(line, shown_on) from None
        except BaseException:
            if report is not None:
                report.end(KILLED, reason="stopped while running")
            raise
    if report is not None:
        report.end(FINISHED if run_id else SKIPPED, run_id,
                   "" if run_id else "finished before, or running in another process")
    return run_id


def _job_report() -> CellReport | None:
    """The status file of this job when it is a job of a multirun whose launching process draws its line."""
    from hydra.core.hydra_config import HydraConfig

    try:
        hc = HydraConfig.get()
    except ValueError:
        return None
    if not str(hc.mode).endswith("MULTIRUN"):
        return None
    return job_report(int(hc.job.num), list(hc.overrides.task))


def _quiet_failed_cells() -> None:
    """Hydra writes ``Error executing job with overrides: [...]`` before it raises a failed job's error; a
    ``CellError`` has said which job and what to do in its own line, so it is raised without that line (a bug,
    or any error under ``COUNTBOARD_DEBUG``, keeps Hydra's report)."""
    from hydra.core.utils import JobReturn, JobStatus

    hydra_value = JobReturn.return_value

    def return_value(job: JobReturn):
        if job.status == JobStatus.FAILED and isinstance(job._return_value, CellError):
            raise job._return_value
        return hydra_value.fget(job)

    JobReturn.return_value = property(return_value, hydra_value.fset)


_VALUE_FLAGS = ("--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp", "--experimental-rerun")


def unknown_key(argv: list[str]) -> str | None:
    """A message when a command-line override names a top-level or tracking key that does not exist.

    Every override form Hydra accepts passes: ``key=value``, ``group=option``, ``group@package=option`` (checked
    for its group only), ``+key=value``, ``++key=value`` and ``~key`` (left to Hydra, which adds, forces or
    deletes them).

    Hydra refuses such keys too, but without saying which ones exist; model/dataset/task keys are checked against
    their class when the job starts (``config.check_node``).
    """
    top = {f.name for f in fields(Config)}
    groups = {p.name for p in conf_dir().iterdir() if p.is_dir()} | {"hydra"}
    tracking = {f.name for f in fields(TrackingConf)}
    skip_next = False
    for arg in argv:
        if skip_next or arg.startswith("-"):
            skip_next = arg in _VALUE_FLAGS
            continue
        key = arg.split("=", 1)[0]
        if "=" not in arg or key.startswith(("+", "~", "hydra")) or "/" in key:
            continue
        if "@" in key:  # `group@package=option`: an option of `group` placed at `package` (Hydra checks both)
            group = key.split("@", 1)[0]
            if group not in groups:
                return (f"unknown config group `{group}` in `{arg}`; config groups: "
                        f"{', '.join(sorted(groups - {'hydra'}))} (e.g. model@task.evaluator=<option>)")
            continue
        head, _, rest = key.partition(".")
        if head not in top and head not in groups:
            return (f"unknown config key `{head}` in `{arg}`. Top-level keys: {', '.join(sorted(top))}; config "
                    f"groups: {', '.join(sorted(groups - {'hydra'}))} (e.g. model=<option>, model.<param>=…)")
        if head == "tracking" and rest and rest.split(".")[0] not in tracking:
            return (f"unknown tracking key `{rest}` in `{arg}`; tracking keys: {', '.join(sorted(tracking))}")
    return None


def server_from_argv(argv: list[str], env=os.environ) -> str | None:
    """The store server a command line names (``tracking=server`` with ``tracking.uri=…`` or
    ``$MLFLOW_TRACKING_URI``), else None: probed before Hydra composes the config and the engine's imports, so a
    down server is named in about a second (``engine.run_job`` probes the composed config again).

    Example:
        >>> server_from_argv(["tracking=server", "tracking.uri=http://h:5000", "seed=1"], env={})
        'http://h:5000'
        >>> server_from_argv(["tracking.uri=http://h:5000"], env={}) is None  # a local store ignores the URI
        True
    """
    values = {}
    for arg in argv:
        key, eq, value = arg.lstrip("+").partition("=")
        if eq:
            values[key] = value.strip("'\"")
    if "server" not in (values.get("tracking"), values.get("tracking.kind")):
        return None
    uri = values.get("tracking.uri") or env.get(TRACKING_URI_ENV)
    return uri if uri and "," not in uri else None


_SCHEMA_OPTION = re.compile(r"^countboard_.*_schema$")  # ``config.register_configs``: not an option to pick


def _listing(names) -> str:
    return ", ".join(sorted(str(n) for n in names if not _SCHEMA_OPTION.match(str(n)))) or "(none)"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def composition_error(exc: BaseException) -> str | None:
    """One line for a Hydra composition error (an unknown option of a group, a key not in the config, a value of
    the wrong type, a ``+`` missing or extra, an override that does not parse): what was wrong, where, and what is
    valid there. None for anything else (a cell's own error, a bug).

    Hydra's own report is 5-40 lines (every option one a line, the search path, a stack-trace hint).
    """
    from hydra.errors import CompactHydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    if isinstance(exc, CellError) or not isinstance(exc, CompactHydraException):
        return None
    message, cause = str(exc).strip(), exc.__cause__
    if isinstance(exc, MissingConfigException) and exc.options is not None and exc.missing_cfg_file:
        group, _, option = str(exc.missing_cfg_file).rpartition("/")
        return f"`{group}={option}`: no option `{option}` in config group `{group}`; options: {_listing(exc.options)}"
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        plus = re.search(r"use (\+\S+)", message)
        where, _, _ = str(cause.full_key).rpartition(".")
        keys = _listing(cause.parent_node.keys()) if cause.parent_node is not None else "(unknown)"
        add = f"; to add a new key write `{plus.group(1)}`" if plus else ""
        return (f"`{cause.full_key}` is not a key of {f'`{where}`' if where else 'the config'}; its keys: {keys}"
                f"{add}")
    if isinstance(cause, ValidationError) and cause.full_key:
        override = re.search(r"override (\S+)", message)
        what = f"`{override.group(1)}`" if override else f"`{cause.full_key}`"
        return f"{what}: {_first_line(str(cause))} (key `{cause.full_key}`)"
    duplicated = re.match(r"(\S+) appears more than once in the final defaults list", message)
    if duplicated:
        return (f"`+{duplicated.group(1)}=…`: the group `{duplicated.group(1)}` already has an option; write "
                f"`{duplicated.group(1)}=<option>` (no `+`) to choose another")
    exists = re.match(r"Could not append to config\. An item is already at '([^']*)'", message)
    if exists:
        fixes = re.findall(r"'(\+?\+?[^'\s]+=[^']*)'", message)
        return (f"`+{exists.group(1)}=…`: `{exists.group(1)}` is already in the config; write "
                + " to change it, or ".join(f"`{fix}`" for fix in fixes[:2]) + " to add or change it")
    if isinstance(exc, OverrideParseException):
        return unreadable_override(str(exc.override), message)
    ambiguous = re.match(r"Ambiguous value for argument '([^']*)'", message)
    if ambiguous:
        return (f"`{ambiguous.group(1)}`: a comma-separated value needs -m (--multirun) to sweep over it; write "
                "key=[a,b] for a list or key='a,b' for a string")
    lines = [line.strip() for line in message.split("Config search path:")[0].splitlines() if line.strip()]
    return "; ".join(lines) + (f" ({_first_line(str(cause))})" if cause is not None else "")


def _options(group_dir) -> str:
    return ", ".join(sorted(p.stem for p in group_dir.glob("*.yaml")))


def sweep_help() -> str:
    """``countboard-sweep --help``: the usage, the config groups and their options, the top-level keys.

    Read from the config folder and the config dataclasses, without Hydra (whose own help composes every group
    option: seconds of CPU); ``--cfg job`` prints the composed config, ``--hydra-help`` Hydra's options.
    """
    root = conf_dir()
    groups = sorted(str(d.relative_to(root)) for d in root.rglob("*") if d.is_dir() and any(d.glob("*.yaml")))
    defaults = dict(re.findall(r"^\s*- (?:optional )?([\w/]+): *([\w${}]+)", (root / "config.yaml").read_text(), re.M))
    width = 110
    lines = ["usage: countboard-sweep [-m] [GROUP=OPTION ...] [KEY=VALUE ...] [HYDRA OPTIONS]", "",
             "Runs evaluation cells (model x dataset x task): one Hydra job per cell, one MLflow run each, into the "
             "store of tracking.store_dir (or tracking=server tracking.uri=...). A rerun skips finished cells "
             "and resumes unfinished ones.", "", "examples:"]
    lines[2:3] = textwrap.wrap(lines[2], width)
    lines += ["  " + line.strip() for line in (__doc__ or "").split("Examples:")[1].strip().splitlines()]
    lines += ["", f"config groups (GROUP=OPTION; {root}):"]
    for group in groups:
        default = defaults.get(group)
        head = f"  {group}" + (f" (default {default})" if default and "$" not in default and default != "null"
                                else "") + ": "
        options = _options(root / group) + (" (and Hydra's own: --hydra-help)" if group.startswith("hydra/") else "")
        lines += textwrap.wrap(options, width, initial_indent=head, subsequent_indent=" " * 6)
    keys = ", ".join(f.name for f in fields(Config) if f.name not in ("model", "dataset", "task", "tracking"))
    tracking = ", ".join(f.name for f in fields(TrackingConf))
    lines += ["", *textwrap.wrap(f"top-level keys (KEY=VALUE): {keys}", width, subsequent_indent="  "),
              *textwrap.wrap(f"tracking keys (tracking.KEY=VALUE): {tracking}", width, subsequent_indent="  "),
              "  model.KEY, dataset.KEY, task.KEY: the parameters of the chosen option (--cfg job lists them)", "",
              "options:",
              "  -m, --multirun   a job per combination of comma-separated values (hydra/launcher=joblib: in parallel)",
              "  --cfg job        print the config the overrides compose, and exit",
              "  -v, --verbose    let every library's lines through (launch reports, warnings, INFO lines)",
              "  --hydra-help     Hydra's own options (launchers, output folders, shell completion)",
              "  -h, --help       this help",
              "", "Errors print one line; COUNTBOARD_DEBUG=1 (or HYDRA_FULL_ERROR=1) shows Hydra's report and the "
              "traceback."]
    return "\n".join(lines)


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    """Console entry point. SIGTERM stops like Ctrl-C: the runs this process owns end KILLED, the parent closes.

    Hydra raises its errors here instead of printing them (``HYDRA_FULL_ERROR``): a composition error or a cell's
    error the user can fix prints one line (exit 2 and 1; in a multirun every job runs and each failed one prints
    its line); anything else prints its traceback, and so does every error under ``COUNTBOARD_DEBUG=1`` or
    ``HYDRA_FULL_ERROR=1`` set by the user.
    """
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(sweep_help())
        return
    if any(arg in ("-v", "--verbose") for arg in sys.argv[1:]):  # every library's lines, in every job
        sys.argv[1:] = [arg for arg in sys.argv[1:] if arg not in ("-v", "--verbose")]
        os.environ[VERBOSE_ENV] = "1"
    message = unknown_key(sys.argv[1:])
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    server = server_from_argv(sys.argv[1:])
    if server:
        from countboard.errors import TrackingStoreError
        from countboard.tracking.reach import reach

        try:
            reach(server)
        except TrackingStoreError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
    if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the user asks for Hydra's full report: tracebacks, as --debug
        os.environ[DEBUG_ENV] = "1"
    else:  # Hydra raises its errors to this function instead of printing them
        os.environ["HYDRA_FULL_ERROR"] = "1"
    silence()
    if not debug_enabled():
        _quiet_failed_cells()
    sys.argv[1:] = quote_values(sys.argv[1:])  # a path with spaces, non-ASCII letters or `=`, as typed
    signal.signal(signal.SIGTERM, _terminate)
    os.environ[SWEEP_PID_ENV] = str(os.getpid())
    from countboard.tracking.callbacks import SweepRefused, fail_open_sweep

    try:
        try:
            _app()
        finally:  # the multirun's summary, however it ended (Hydra calls no callback when a cell failed)
            finish_progress()
    except SweepRefused as refused:  # nothing was launched or created
        print(refused, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # the parent closes from its children at exit (left RUNNING if another owns some)
        print("stopped: runs in progress were marked KILLED; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    except SystemExit as stop:
        if stop.code not in (0, None):
            fail_open_sweep(stop.__context__)
        raise
    except BaseException as exc:
        fail_open_sweep(exc)
        if debug_enabled():
            raise
        if isinstance(exc, CellError):
            if not exc.shown_here():
                print(exc, file=sys.stderr)
            sys.exit(1)
        message = composition_error(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    sys.exit(main())
