import pytest

from countboard.errors import ConfigError
from countboard.models.hf_loading import check_weights_present, load_pretrained


class _Loader:
    calls: list[str] = []

    @classmethod
    def from_pretrained(cls, model_id):
        cls.calls.append(model_id)
        if model_id == "missing":
            raise OSError("no file named config.json")
        return f"loaded {model_id}"


def test_load_pretrained_passes_through_and_explains_failures():
    assert load_pretrained(_Loader, "some/model", "thing") == "loaded some/model"
    with pytest.raises(ConfigError, match=r"the thing from 'missing' \(no file named config.json\).*model.model_id"):
        load_pretrained(_Loader, "missing", "thing")
    assert _Loader.calls == ["some/model", "missing"]


def _cache_with(tmp_path, repo: str, files: dict[str, str]):
    """A Hugging Face cache folder holding ``files`` of ``repo`` at its main branch."""
    root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("abc123")
    snap = root / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    return tmp_path / "hub"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return constants


def test_a_local_folder_needs_its_config(tmp_path):
    with pytest.raises(ConfigError, match=r"from the folder '.*empty': it has no config.json .* model.model_id"):
        (tmp_path / "empty").mkdir()
        check_weights_present(str(tmp_path / "empty"), "model=owlv2")
    (tmp_path / "empty" / "config.json").write_text("{}")
    check_weights_present(str(tmp_path / "empty"), "model=owlv2")


def test_a_hub_id_must_be_cached_when_downloads_are_off(offline, tmp_path):
    with pytest.raises(ConfigError) as err:
        check_weights_present("org/model", "model=owlv2")
    line = str(err.value)
    assert "\n" not in line and "'org/model': it is not in the Hugging Face cache" in line
    assert "HF_HUB_OFFLINE=1" in line and "`hf download org/model`" in line
    _cache_with(tmp_path, "org/model", {"config.json": "{}"})
    check_weights_present("org/model", "model=owlv2")
    with pytest.raises(ConfigError, match="not in the Hugging Face cache"):  # another revision is not there
        check_weights_present("org/model", "model=owlv2", revision="v2")


def test_with_downloads_on_loading_decides(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    check_weights_present("org/never-seen", "model=owlv2")
    with pytest.raises(ConfigError, match="local_files_only=true"):
        check_weights_present("org/never-seen", "model=owlv2", local_files_only=True)


def _model_nodes():
    import yaml

    from countboard.paths import conf_dir

    def read(name: str) -> dict:  # a preset's own keys over those of the configs in its defaults
        node = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text()) or {}
        base = {}
        for entry in node.pop("defaults", []):
            if isinstance(entry, str) and entry != "_self_" and (conf_dir() / "model" / f"{entry}.yaml").is_file():
                base |= read(entry)
        return base | node

    for path in sorted((conf_dir() / "model").glob("*.yaml")):
        node = read(path.stem)
        if isinstance(node.get("model_id"), str) and "${" not in node["model_id"]:
            yield path.stem, node


@pytest.mark.parametrize(("name", "node"), list(_model_nodes()), ids=[n for n, _ in _model_nodes()])
def test_every_model_with_a_hub_checkpoint_checks_it_before_any_run(offline, name, node):
    """Each config of conf/model/ that loads a checkpoint from ``model_id`` is refused by its class's preflight
    (what the engine calls before any run exists) while the checkpoint is not in the cache and downloads are off;
    a model that first needs a missing package (torchvision) may say that instead."""
    from hydra.utils import get_class

    cls = get_class(node["_target_"])
    with pytest.raises(ConfigError, match=r"not in the Hugging Face cache|needs torchvision"):
        cls.preflight(node | {"name": name})
