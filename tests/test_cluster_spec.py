"""Tests for cluster.spec: presets, YAML loading and validation errors."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from pydantic import ValidationError

from cluster.spec import ClusterSpec, load_cluster, preset_names

K80_FLOPS = 4.365e12  # 8.73 TFLOP/s per K80 board / 2 GK210
K80_BYTES = 11441 * 2**20  # what a K80 GK210 shows with ECC on (nvidia-smi 11441 MiB)
CPU_FLOPS = 1.3248e12  # 18 cores x 2.3 GHz x 32 FLOP/cycle


def test_preset_names():
    assert preset_names() == ["a100x4-pcie", "a100x8", "cpu4", "gcp-k80x2", "gcp-k80x4", "gcp-k80x8", "h100x1", "h100x8",
                              "h200x1", "k80x2", "k80x4", "p100x4"]


@pytest.mark.parametrize("name, n_gpus", [("k80x2", 2), ("k80x4", 4)])
def test_presets_load_with_datasheet_figures(name, n_gpus):
    """k80xN: one CPU (index 0) + N K80 GPUs, 15.75 GB/s PCIe default link."""
    spec = load_cluster(name)
    assert spec.name == name
    assert len(spec.devices) == 1 + n_gpus
    assert spec.cpu_indices == [0]
    assert spec.gpu_indices == list(range(1, 1 + n_gpus))
    assert spec.device_names == ["/cpu:0"] + [f"/gpu:{i}" for i in range(n_gpus)]
    cpu = spec.devices[0]
    assert cpu.kind == "cpu"
    assert cpu.peak_flops == pytest.approx(CPU_FLOPS)
    assert cpu.memory_bandwidth == pytest.approx(68e9)
    for i in spec.gpu_indices:
        gpu = spec.devices[i]
        assert gpu.kind == "gpu"
        assert gpu.peak_flops == pytest.approx(K80_FLOPS)
        assert gpu.memory_bandwidth == pytest.approx(240e9)
        assert gpu.memory_bytes == K80_BYTES
    link = spec.raw_link(1, 2)  # the PCIe link itself; spec.link adds the fitted Send/Recv costs
    assert link.bandwidth == pytest.approx(15.75e9)
    assert link.latency_s == pytest.approx(10e-6)
    assert spec.transfer.gpu_peer_access is False  # 2017 K80s: GPU to GPU through the host


def _write(tmp_path, text: str, name: str = "spec.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


GOOD = """\
    name: tiny
    devices:
      - {name: /cpu:0, kind: cpu, peak_flops: 1.0e12, memory_bandwidth: 5.0e10, memory_bytes: 1.0e10}
      - {name: /gpu:0, kind: gpu, peak_flops: 1.0e13, memory_bandwidth: 9.0e11, memory_bytes: 8.0e9, op_overhead_s: 4.0e-6}
      - {name: /gpu:1, kind: gpu, peak_flops: 1.0e13, memory_bandwidth: 9.0e11, memory_bytes: 8.0e9}
    links:
      - {between: [/gpu:0, /gpu:1], bandwidth: 5.0e10, latency_s: 2.0e-6}
    default_link: {bandwidth: 1.6e10, latency_s: 1.0e-5}
"""


def test_yaml_spec_loads_from_path(tmp_path):
    """A spec file loads via load_cluster(path); an explicit link overrides default_link,
    in both directions; other pairs use default_link."""
    spec = load_cluster(str(_write(tmp_path, GOOD)))
    assert spec.name == "tiny"
    assert spec.device_names == ["/cpu:0", "/gpu:0", "/gpu:1"]
    assert spec.gpu_indices == [1, 2]
    assert spec.devices[1].op_overhead_s == pytest.approx(4e-6)
    assert spec.devices[2].op_overhead_s == 0.0
    assert spec.link(1, 2).bandwidth == pytest.approx(5e10)
    assert spec.link(2, 1).latency_s == pytest.approx(2e-6)
    assert spec.link(0, 2).bandwidth == pytest.approx(1.6e10)
    assert spec.link(0, 1).latency_s == pytest.approx(1e-5)


def test_yml_suffix_also_loads(tmp_path):
    spec = load_cluster(str(_write(tmp_path, GOOD, "spec.yml")))
    assert len(spec.devices) == 3


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError) as exc:
        load_cluster("k80x8")
    msg = str(exc.value)
    assert "k80x8" in msg
    assert "k80x2" in msg and "k80x4" in msg


def test_missing_yaml_file_is_no_such_file(tmp_path):
    with pytest.raises(ValueError, match=r"cluster spec .*nope\.yaml: no such file"):
        load_cluster(str(tmp_path / "nope.yaml"))
    with pytest.raises(ValueError, match=r"cluster spec .*\.yaml: a folder, not a YAML file"):
        load_cluster(str((tmp_path / "dir.yaml").mkdir() or tmp_path / "dir.yaml"))


def test_a_yaml_spec_named_as_a_preset_must_be_that_preset(tmp_path):
    """An edited copy of ``k80x2`` still named ``k80x2`` is refused, naming the first field that differs (a run
    is labelled and compared by its cluster's name); an exact copy loads, and so does the edit renamed."""
    from cluster.spec import PRESET_DIR

    text = (PRESET_DIR / "k80x2.yaml").read_text()
    same = tmp_path / "same.yaml"
    same.write_text(text)
    assert load_cluster(str(same)) == load_cluster("k80x2")
    spec = load_cluster("k80x2")
    edited = spec.model_copy(update={"devices": [spec.devices[0], spec.devices[1].model_copy(update={
        "peak_flops": 2 * spec.devices[1].peak_flops}), *spec.devices[2:]]})
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(edited.model_dump(mode="json")))
    with pytest.raises(ValueError, match=r"edited\.yaml: name 'k80x2' is a preset's, but this spec differs from "
                                         rf"that preset \(devices\.1\.peak_flops: {2 * spec.devices[1].peak_flops!r} here, "
                                         rf"{spec.devices[1].peak_flops!r} in the preset\); give it a name of its own"):
        load_cluster(str(path))
    path.write_text(yaml.safe_dump({**edited.model_dump(mode="json"), "name": "k80x2-fast"}))
    assert load_cluster(str(path)).devices[1].peak_flops == 2 * spec.devices[1].peak_flops


def test_negative_peak_flops_names_field(tmp_path):
    """devices[1].peak_flops = -1 -> ValueError naming the file and devices.1.peak_flops."""
    p = _write(tmp_path, GOOD.replace("peak_flops: 1.0e13, memory_bandwidth: 9.0e11, memory_bytes: 8.0e9, op",
                                      "peak_flops: -1.0, memory_bandwidth: 9.0e11, memory_bytes: 8.0e9, op"))
    assert "peak_flops: -1.0" in p.read_text()
    with pytest.raises(ValueError) as exc:
        load_cluster(str(p))
    msg = str(exc.value)
    assert "devices.1.peak_flops" in msg
    assert str(p) in msg


def test_negative_latency_rejected(tmp_path):
    p = _write(tmp_path, GOOD.replace("latency_s: 1.0e-5", "latency_s: -1.0e-5"))
    with pytest.raises(ValueError, match="default_link.latency_s"):
        load_cluster(str(p))


def test_bad_kind_rejected(tmp_path):
    p = _write(tmp_path, GOOD.replace("kind: cpu", "kind: tpu"))
    with pytest.raises(ValueError, match="devices.0.kind"):
        load_cluster(str(p))


def test_unparseable_yaml_raises_value_error(tmp_path):
    p = _write(tmp_path, "name: [unclosed\n")
    with pytest.raises(ValueError, match="cluster spec"):
        load_cluster(str(p))


def test_link_to_unknown_device(tmp_path):
    p = _write(tmp_path, GOOD.replace("between: [/gpu:0, /gpu:1]", "between: [/gpu:0, /gpu:7]"))
    with pytest.raises(ValueError, match="unknown device '/gpu:7'"):
        load_cluster(str(p))


def test_missing_link_without_default(tmp_path):
    """Only gpu0<->gpu1 is listed and there is no default_link: cpu0<->gpu0 has no link."""
    text = GOOD.replace("default_link: {bandwidth: 1.6e10, latency_s: 1.0e-5}\n", "")
    assert "default_link" not in text
    with pytest.raises(ValueError, match="no link between '/cpu:0' and '/gpu:0'"):
        load_cluster(str(_write(tmp_path, text)))


def test_all_links_listed_without_default_is_valid():
    spec = ClusterSpec(
        name="full",
        devices=[
            {"name": "a", "kind": "cpu", "peak_flops": 1, "memory_bandwidth": 1, "memory_bytes": 1},
            {"name": "b", "kind": "gpu", "peak_flops": 1, "memory_bandwidth": 1, "memory_bytes": 1},
        ],
        links=[{"between": ["b", "a"], "bandwidth": 7.0}],
    )
    assert spec.link(0, 1).bandwidth == 7.0
    assert spec.link(1, 0).bandwidth == 7.0


def test_duplicate_device_names(tmp_path):
    p = _write(tmp_path, GOOD.replace("name: /gpu:1,", "name: /gpu:0,"))
    with pytest.raises(ValueError, match=r"duplicate device name\(s\) \['/gpu:0'\]"):
        load_cluster(str(p))


def test_duplicate_device_names_direct_construction():
    dev = {"name": "x", "kind": "cpu", "peak_flops": 1, "memory_bandwidth": 1, "memory_bytes": 1}
    with pytest.raises(ValidationError, match="duplicate"):
        ClusterSpec(name="d", devices=[dev, dev], default_link={"bandwidth": 1.0})


def test_no_devices_rejected():
    with pytest.raises(ValidationError):
        ClusterSpec(name="empty", devices=[], default_link={"bandwidth": 1.0})


# --- hostile specs: bounded before parsing, unknown keys and non-finite numbers named ----------


def test_yaml_aliases_are_refused_before_anything_expands(tmp_path):
    """A 9-level "billion laughs" alias tree (9**9 strings once expanded) is refused at parse time."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    lines += [f"name: [{','.join(['*a8'] * 9)}]"]
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"aliases \(\*a0\) are not allowed") as exc:
        load_cluster(str(p))
    assert len(str(exc.value)) < 400


def test_oversized_spec_is_refused_by_its_size(tmp_path):
    from cluster.spec import MAX_SPEC_BYTES

    p = _write(tmp_path, textwrap.dedent(GOOD) + "#" + "x" * MAX_SPEC_BYTES + "\n")
    with pytest.raises(ValueError, match=f"more than the {MAX_SPEC_BYTES:,} allowed"):
        load_cluster(str(p))


def test_unknown_key_is_named(tmp_path):
    p = _write(tmp_path, textwrap.dedent(GOOD) + "bandwith_typo: 3\n")
    with pytest.raises(ValueError, match="bandwith_typo: Extra inputs are not permitted"):
        load_cluster(str(p))


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_non_finite_numbers_are_refused(tmp_path, value):
    p = _write(tmp_path, GOOD.replace("latency_s: 1.0e-5", f"latency_s: {value}"))
    with pytest.raises(ValueError, match="default_link.latency_s"):
        load_cluster(str(p))


def test_error_quotes_at_most_200_characters_of_the_input(tmp_path):
    p = _write(tmp_path, GOOD.replace("kind: cpu", "kind: " + "t" * 5000))
    with pytest.raises(ValueError, match="devices.0.kind") as exc:
        load_cluster(str(p))
    assert len(str(exc.value)) < 500 and "5002 characters" in str(exc.value)
