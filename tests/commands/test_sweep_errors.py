"""Hydra's composition errors become one line each: what was wrong, where, and what is valid there.

The errors are Hydra's own, raised by composing the project's configs in-process (``hydra.compose``); one real
``countboard-sweep`` subprocess checks that the line is all the user sees. A job's own error (here: data not found)
is one line too, naming the job in a multirun; the traceback stays available on request.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose
from hydra.core.global_hydra import GlobalHydra

from countboard.commands.sweep import composition_error
from countboard.errors import DEBUG_ENV


def error_line(*overrides: str) -> str:
    with pytest.raises(Exception) as caught:
        compose("config", overrides=list(overrides), return_hydra_config=True)
    line = composition_error(caught.value)
    assert line is not None, f"{type(caught.value).__name__}: {caught.value}"
    assert "\n" not in line and "HYDRA_FULL_ERROR" not in line and "search path" not in line
    return line


def test_unknown_option_of_a_group_lists_the_options(hydra_init):
    line = error_line("model=nope")
    assert line.startswith("`model=nope`: no option `nope` in config group `model`; options: ")
    assert "oracle, owlv2" in line and "class_blind" in line
    line = error_line("tracking=nope")
    assert line.endswith("options: local, server")  # the structured schema is not offered as an option
    assert "`hydra/launcher`" in error_line("hydra/launcher=nope") and "joblib" in error_line("hydra/launcher=nope")


def test_key_not_in_struct_lists_the_keys_and_the_plus_form(hydra_init):
    line = error_line("model=oracle", "model.foo=1")
    assert line.startswith("`model.foo` is not a key of `model`; its keys: ")
    assert "_target_" in line and "name" in line and line.endswith("to add a new key write `+model.foo=1`")
    line = error_line("dataset.max_samples=2")
    assert "`dataset.max_samples` is not a key of `dataset`" in line and "max_images" in line


def test_wrong_type_names_the_key_and_the_expected_type(hydra_init):
    assert error_line("seed=abc") == (
        "`seed=abc`: Value 'abc' of type 'str' could not be converted to Integer (key `seed`)")
    line = error_line("device=gpu9")
    assert line.startswith("`device=gpu9`: ") and "expected one of [auto, cpu, cuda]" in line
    assert "(key `tracking.timeout_s`)" in error_line("tracking.timeout_s=soon")


def test_plus_missing_or_extra(hydra_init):
    assert error_line("+model=oracle") == (
        "`+model=…`: the group `model` already has an option; write `model=<option>` (no `+`) to choose another")
    line = error_line("+batch_size=3")
    assert line == ("`+batch_size=…`: `batch_size` is already in the config; write `batch_size=3` to change it, "
                    "or `++batch_size=3` to add or change it")
    assert "to add a new key write `+task.extra=1`" in error_line("task.extra=1")


def test_unparsable_override(hydra_init):
    line = error_line("model")
    assert line.startswith("`model`: not an override Hydra can parse (") and "key=value" in line


def test_the_help_lists_the_groups_and_options_hydra_finds(hydra_init):
    """``--help`` reads the config folder itself (fast); it names what Hydra would compose from."""
    from countboard.commands.sweep import sweep_help

    loader = GlobalHydra.instance().config_loader()
    text = sweep_help()
    for group in ("model", "dataset", "task", "task/classifier", "tracking", "mosaic", "experiment"):
        options = [o for o in loader.get_group_options(group) if not o.endswith("_schema")]
        line = next(line for line in text.replace("\n      ", " ").splitlines() if line.startswith(f"  {group}"))
        assert line.split(": ", 1)[1] == ", ".join(options), group
    assert "  model (default oracle): " in text and "  tracking (default local): local, server" in text
    assert "hydra/launcher: local_gpu, slurm_cpu, slurm_gpu (and Hydra's own: --hydra-help)" in text


def test_other_errors_are_not_rewritten():
    assert composition_error(ValueError("a bug")) is None


def test_the_sweep_prints_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "countboard.commands.sweep", "model=oracle", "model.foo=1",
                           f"tracking.store_dir={tmp_path / 'mlruns'}"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: `model.foo` is not a key of `model`; its keys: _target_, description, display_name, kind, name; "
        "to add a new key write `+model.foo=1`"]
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def sweep(*args: str, cwd, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", DEBUG_ENV)}
    return subprocess.run([sys.executable, "-m", "countboard.commands.sweep", *args, "progress=false",
                           f"tracking.store_dir={cwd / 'mlruns'}"], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**environ, "HF_HUB_OFFLINE": "1", **env})


MISSING = ["model=oracle", "dataset=fsc147", "task=praco_negative"]


@pytest.mark.slow
def test_a_job_error_is_one_line_per_job_and_every_job_runs(tmp_path):
    """A cell's own error (data not found) in a multirun of two: each job says which it is and what to do, in one
    line without Hydra's "Error executing job" line; both jobs run and the sweep exits 1."""
    proc = sweep("-m", *MISSING, f"dataset.root={tmp_path / 'a'},{tmp_path / 'b'}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "Error executing job" not in output and "Traceback" not in output
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, proc.stderr[-3000:]
    for num, root in enumerate((tmp_path / "a", tmp_path / "b")):
        assert errors[num].startswith(f"error: job #{num} (model=oracle dataset=fsc147 task=praco_negative "
                                      f"dataset.root={root} ")
        assert f"): data not found at {root} (config key `dataset.root`)" in errors[num]
        assert errors[num].endswith("point `dataset.root` at it.")
    assert "ended FAILED" in output  # the log line of the sweep's parent run


@pytest.mark.slow
def test_a_single_job_error_is_one_line_and_the_full_report_stays_on_request(tmp_path):
    args = [*MISSING, f"dataset.root={tmp_path / 'a'}"]
    proc = sweep(*args, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"error: data not found at {tmp_path / 'a'} (config key `dataset.root`)")
    for env in ({"HYDRA_FULL_ERROR": "1"}, {DEBUG_ENV: "1"}):
        proc = sweep(*args, cwd=tmp_path, **env)
        assert proc.returncode == 1
        assert "Error executing job with overrides" in proc.stderr and "Traceback" in proc.stderr, env
        assert proc.stderr.strip().splitlines()[-1].startswith("countboard.errors.DataNotFoundError: data not found")


@pytest.mark.parametrize(("override", "says"), [
    ("dataset.root=/data/jeu de données ✓/ss",
     "`dataset.root=/data/jeu de données ✓/ss`: not an override Hydra can parse ('é' at position 18 of the value is "
     "not allowed unquoted); quote the value: 'dataset.root=\"/data/jeu de données ✓/ss\"'"),
    ("dataset.root=/a/b=c", "('=' at position 5 of the value is not allowed unquoted); quote the value: "
                            "'dataset.root=\"/a/b=c\"'"),
    ("dataset.root=/data/x(1)", "('(' at position 8 of the value is not allowed unquoted)"),
    ("task.classes=[a", "`task.classes=[a`: not an override Hydra can parse; quote the value: 'task.classes=\"[a\"'"),
])
def test_a_value_hydra_cannot_parse_names_the_character_and_the_quoting(hydra_init, override, says):
    assert says in error_line(override)


def test_plain_text_values_hydra_cannot_parse_are_quoted_as_typed(hydra_init):
    from countboard.config import quote_values

    typed = ["dataset.root=/data/jeu de données ✓/ss", "tracking.store_dir=/s/a=b c", "+task.note=café", "seed=1",
             "model=oracle,class_blind", "dataset.root=/data/x(1)", "-m", "--config-dir=/a b", "task.classes=[a,b]",
             "dataset.root='/q é'", "dataset.root=/plain/path"]
    quoted = quote_values(typed)
    assert quoted[:3] == ["dataset.root='/data/jeu de données ✓/ss'", "tracking.store_dir='/s/a=b c'",
                          "+task.note='café'"]
    assert quoted[3:] == typed[3:]  # parsable, grammar (sweeps, lists, calls), flags and quoted values: as typed
    cfg = compose("config", overrides=[*quoted[:2], "dataset=fsc147"])
    assert cfg.dataset.root == "/data/jeu de données ✓/ss" and cfg.tracking.store_dir == "/s/a=b c"
