from __future__ import annotations

import pytest

from citewise.errors import ConfigError
from citewise.settings import load_settings


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert str(s.data_dir) == "data"
    assert s.qdrant_url is None and s.blob_store == "local"
    assert s.sources == []


def test_config_file_sources_and_env_precedence(monkeypatch, tmp_path):
    cfg = tmp_path / "conf" / "citewise.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        '[settings]\ndata_dir = "state"\nport = 9000\n\n'
        '[[sources]]\nname = "runbooks"\ntype = "folder"\npath = "../rb"\n'
        'readers = ["group:sre"]\n'
    )
    monkeypatch.setenv("CITEWISE_PORT", "9100")
    s = load_settings(cfg)
    assert s.port == 9100, "the environment beats the file"
    assert s.data_dir == cfg.parent / "state", "relative paths are relative to the file"
    src = s.source("runbooks")
    assert src.readers == ["group:sre"]
    assert src.options()["path"] == str(cfg.parent / "../rb")


def test_bad_config_says_what_is_wrong(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[sources]]\nname = "Bad Name!"\ntype = "folder"\n')
    with pytest.raises(ConfigError, match="lowercase"):
        load_settings(cfg)
    cfg.write_text("[settings\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(cfg)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")


def test_unknown_source_lists_known_ones(tmp_path):
    from citewise.errors import NotFoundError

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[sources]]\nname = "wiki"\ntype = "folder"\npath = "w"\n')
    with pytest.raises(NotFoundError, match="known: wiki"):
        load_settings(cfg).source("runbooks")


def test_readme_documents_every_setting():
    from pathlib import Path

    from citewise.settings import Settings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in Settings.model_fields:
        if name != "sources":
            assert f"`CITEWISE_{name.upper()}`" in readme, f"README misses CITEWISE_{name.upper()}"
