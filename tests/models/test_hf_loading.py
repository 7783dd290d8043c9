import pytest

from countboard.errors import ConfigError
from countboard.models.hf_loading import load_pretrained


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
