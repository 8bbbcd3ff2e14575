"""The ``[layers]`` table of a profile (C12): parsing, aliases and errors that say where."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_k3accept.decide.layers import Layers, LayersError, load


def test_layers_from_a_toml_profile(tmp_path: Path) -> None:
    p = tmp_path / "agent.toml"
    p.write_text('concurrency = 8\n\n[layers]\ndriver = "fixed"\nimage = "Changeable"\n')
    layers = load(p)
    assert (layers.driver, layers.container, layers.network) == ("fixed", "changeable",
                                                                 "unknown")
    assert layers.recorded and layers.fixed_layers() == ["driver"]
    assert layers.is_fixed("host_driver") and not layers.is_fixed("network")
    assert layers.describe() == "driver fixed, container changeable, network unknown"
    assert layers.as_dict()["source"].endswith("agent.toml: [layers]")


def test_layers_from_json_and_booleans(tmp_path: Path) -> None:
    p = tmp_path / "p.json"
    p.write_text('{"layers": {"network": false, "driver": true}}')
    layers = load(p)
    assert layers.network == "fixed" and layers.driver == "changeable"


def test_no_table_or_no_profile_means_unknown(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text("concurrency = 2\n")
    assert not load(p).recorded and "no [layers] table" in load(p).source
    assert not load(None).recorded


def test_bad_value_names_file_line_and_field(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text('name = "x"\n[layers]\ncontainer = "changeable"\ndriver = "frozen"\n')
    with pytest.raises(LayersError) as err:
        load(p)
    msg = str(err.value)
    assert str(p) in msg and "line 4" in msg and "driver = 'frozen'" in msg
    assert "'fixed'" in msg


def test_unknown_layer_suggests_a_name(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text('[layers]\ndrivr = "fixed"\n')
    with pytest.raises(LayersError, match=r"line 2: drivr: unknown layer \(did you mean "
                                          r"'driver'\?\)"):
        load(p)


def test_unreadable_or_broken_files(tmp_path: Path) -> None:
    with pytest.raises(LayersError, match="cannot read the profile"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[layers\n")
    with pytest.raises(LayersError, match="invalid TOML"):
        load(bad)
    with pytest.raises(LayersError, match="expected a table"):
        Layers.from_mapping(["driver"])
