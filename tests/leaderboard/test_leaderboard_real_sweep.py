"""A real sweep (two annotation-based counters × the two PrACo tasks on generated shapes), indexed, then shown."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from tests.conftest import run_sweep

from countboard.cli import main as cli_main
from countboard.index.reader import connect_readonly
from countboard.paths import leaderboard_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swept_index(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real_sweep")
    run_sweep(["-m", "model=oracle,class_blind", "dataset=synthetic_shapes", "task=praco_negative,praco_mosaic",
               "dataset.images_per_class={train:40,val:2,test:1}"], tmp)  # small, and complete (not partial)
    db = tmp / "index.duckdb"
    assert cli_main(["index", "--store", str(tmp / "mlruns"), "--db", str(db)]) == 0
    return db


def test_index_holds_the_sweep(swept_index):
    con = connect_readonly(swept_index)
    runs = con.execute("SELECT model, task, is_sweep, status FROM runs").df()
    con.close()
    cells = runs[~runs.is_sweep]
    assert sorted(zip(cells.model, cells.task, strict=True)) == sorted(
        (m, t) for m in ("oracle", "class_blind") for t in ("praco_negative", "praco_mosaic"))
    assert (runs.status == "FINISHED").all() and runs.is_sweep.sum() == 1


def test_counters_page_ranks_the_oracle_first(monkeypatch, swept_index):
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(swept_index))
    at = AppTest.from_file(str(leaderboard_dir() / "app.py"), default_timeout=90).switch_page("counters.py").run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    # the oracle reads the prompted class's annotations: perfect mosaic F1; the class-blind one counts both halves
    assert list(table.model) == ["oracle", "class_blind"]
    assert table.cnt_f1.iloc[0] == pytest.approx(1.0) and table.cnt_f1.iloc[1] < 1.0
    assert table[["nmn", "cnt_f1"]].notna().all().all()  # one entry merges the negative-label and mosaic runs
    infos = " ".join(i.value for i in at.info)
    assert "count drift" not in infos and "negative-label" not in infos and "mosaic density" not in infos
    images = at.get("image")
    assert images and all(caption.startswith("mosaic_") for img in images for caption in img.captions)


@pytest.mark.parametrize("page", ["overview.py", "generators.py", "grounding.py", "runs.py", "annotate.py"])
def test_other_pages_render_on_the_sweep(monkeypatch, swept_index, page):
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(swept_index))
    at = AppTest.from_file(str(leaderboard_dir() / "app.py"), default_timeout=90).switch_page(page).run()
    assert not at.exception and not at.error
    if page in ("generators.py", "grounding.py", "annotate.py"):  # no such runs in this sweep: how to launch one
        assert "countboard-sweep" in " ".join(i.value for i in at.info)
