"""Brain.onnx as Unity runs it: ML-Agents 1.1.0's signature, and onnxruntime acting as torch.

`tests/data/mlagents_1.1.0/onnx_signature.json` records the `Brain.onnx` that `mlagents-learn`
1.1.0 exported for a 128x2 normalised PPO policy on our FindTarget build (see the README there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from interopkit import DATA, RUNS, mean_action, observations, trained_policy

from meta.interop import onnx as interop_onnx
from meta.interop.mlagents import POLICY, InteropError, to_mlagents
from meta.interop.onnx import OUTPUTS, ExportUnavailable, export_onnx, onnx_bytes

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

RECORD = json.loads((DATA / "onnx_signature.json").read_text())
NETWORK = RUNS[0]["network"]
"""The network of the run that exported the recorded Brain.onnx (128x2, normalised)."""


def _tensors(values: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": v.name,
            "elem_type": v.type.tensor_type.elem_type,
            "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
        }
        for v in values
    ]


def _model(normalize: bool = True) -> tuple[Any, bytes]:
    policy = trained_policy({**NETWORK, "normalize": normalize})
    return policy, onnx_bytes(to_mlagents(policy.state_dict(), normalize, 1)[POLICY])


@pytest.mark.parametrize("normalize", [True, False])
def test_signature_is_what_mlagents_learn_exports(normalize: bool) -> None:
    _, data = _model(normalize)
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model)
    assert model.ir_version == RECORD["ir_version"]
    assert [[o.domain, o.version] for o in model.opset_import] == RECORD["opset_import"]
    assert _tensors(model.graph.input) == RECORD["inputs"]
    assert _tensors(model.graph.output) == RECORD["outputs"]
    assert [o["name"] for o in RECORD["outputs"]] == list(OUTPUTS)
    ops = {node.op_type for node in model.graph.node}
    assert ops <= set(RECORD["op_types"])  # only operators ML-Agents' own graph uses
    if normalize:
        assert ops == set(RECORD["op_types"])
    session = ort.InferenceSession(data)
    outputs = dict(
        zip(
            OUTPUTS,
            session.run(None, {"obs_0": np.zeros((3, NETWORK["obs_size"]), np.float32)}),
            strict=True,
        )
    )
    for name, value in RECORD["constants"].items():
        assert outputs[name].tolist() == value, name


@pytest.mark.parametrize("normalize", [True, False])
def test_deterministic_actions_equal_torch(normalize: bool) -> None:
    policy, data = _model(normalize)
    obs = observations(NETWORK["obs_size"])
    session = ort.InferenceSession(data)
    out = dict(zip(OUTPUTS, session.run(None, {"obs_0": obs.numpy()}), strict=True))
    with torch.no_grad():
        ours = mean_action(policy, obs).clamp(-1, 1).numpy()
    assert np.abs(out["deterministic_continuous_actions"] - ours).max() < 1e-5
    assert (np.abs(ours) == 1).any() and (np.abs(ours) < 1).any()


def _noise_as_input(data: bytes) -> bytes:
    """The graph with its RandomNormalLike replaced by an input `epsilon` of the same shape."""
    model = onnx.load_from_string(data)
    (node,) = [n for n in model.graph.node if n.op_type == "RandomNormalLike"]
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attributes.get("mean", 0.0) == 0.0 and attributes.get("scale", 1.0) == 1.0
    model.graph.node.remove(node)
    model.graph.input.append(
        onnx.helper.make_tensor_value_info("epsilon", onnx.TensorProto.FLOAT, ["batch", 2])
    )
    for other in model.graph.node:
        for i, name in enumerate(other.input):
            if name == node.output[0]:
                other.input[i] = "epsilon"
    return model.SerializeToString()


def test_stochastic_actions_equal_torch_on_the_same_noise() -> None:
    policy, data = _model()
    obs = observations(NETWORK["obs_size"])
    noise = torch.randn(obs.shape[0], 2, generator=torch.Generator().manual_seed(3))
    session = ort.InferenceSession(_noise_as_input(data))
    out = dict(
        zip(
            OUTPUTS,
            session.run(None, {"obs_0": obs.numpy(), "epsilon": noise.numpy()}),
            strict=True,
        )
    )
    with torch.no_grad():
        mean = mean_action(policy, obs)
        ours = (mean + policy.log_std.exp() * noise).clamp(-1, 1).numpy()
    assert np.abs(out["continuous_actions"] - ours).max() < 1e-5


def test_stochastic_head_samples_our_distribution() -> None:
    policy, _ = _model()
    with torch.no_grad():
        policy.log_std.fill_(-2.0)  # sigma 0.135: samples rarely reach the clip
        policy.actor[-1].bias.zero_()
        policy.actor[-1].weight.mul_(0.01)
    data = onnx_bytes(to_mlagents(policy.state_dict(), True, 1)[POLICY])
    obs = torch.zeros(20000, NETWORK["obs_size"])
    out = ort.InferenceSession(data).run(None, {"obs_0": obs.numpy()})
    samples = out[OUTPUTS.index("continuous_actions")]
    mean = out[OUTPUTS.index("deterministic_continuous_actions")][0]
    sigma = float(np.exp(-2.0))
    assert np.abs(samples.mean(0) - mean).max() < 5 * sigma / np.sqrt(len(samples))
    assert np.abs(samples.std(0) / sigma - 1).max() < 0.03


def test_export_writes_the_file_and_bad_paths_are_one_line(tmp_path: Path) -> None:
    policy = trained_policy(NETWORK)
    theta = policy.state_dict()
    out = export_onnx(theta, True, tmp_path / "Brain.onnx")
    assert out.is_file() and onnx.load(str(out)).graph.input[0].name == "obs_0"
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_dir").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for bad in (
        tmp_path / "missing" / "Brain.onnx",
        tmp_path / "a_file" / "Brain.onnx",
        tmp_path / "a_dir",
    ):
        with pytest.raises(InteropError, match="cannot write") as info:
            export_onnx(theta, True, bad)
        assert "\n" not in str(info.value) and str(bad) in str(info.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_export_without_onnx_names_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(interop_onnx, "available", lambda: False)
    with pytest.raises(ExportUnavailable, match="pip install onnx"):
        export_onnx(trained_policy(NETWORK).state_dict(), True, tmp_path / "Brain.onnx")
    assert not list(tmp_path.iterdir())


def test_export_leaves_the_global_rng_alone() -> None:
    # a kept checkpoint's export must not change what the run draws next (bitwise resume)
    policy = trained_policy(NETWORK)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    onnx_bytes(to_mlagents(policy.state_dict(), True, 1)[POLICY])
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize(("normalize", "layers"), [(True, 2), (False, 1), (True, 3)])
def test_a_later_export_refills_the_first_graph_with_the_bytes_a_new_export_gives(
    normalize: bool, layers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meta.algorithm.ppo.network import make_policy
    from meta.config.ppo import NetworkConfig

    policies = [make_policy(10, 2, NetworkConfig(32, layers, normalize), s) for s in range(3)]

    def exported(seed: int) -> bytes:
        return onnx_bytes(to_mlagents(policies[seed].state_dict(), normalize, seed)[POLICY])

    monkeypatch.setattr(interop_onnx, "_EXPORTED", {})  # this process has exported no graph
    template = exported(0)
    refilled = exported(1)  # the graph of policy 0 with policy 1's weights
    assert list(interop_onnx._EXPORTED.values()) == [template]  # refilled, not exported again
    monkeypatch.setattr(interop_onnx, "_EXPORTED", {})
    assert refilled == exported(1) != exported(2)  # the bytes a first export of policy 1 gives
    obs = observations(10)
    (actions,) = ort.InferenceSession(refilled).run(
        ["deterministic_continuous_actions"], {"obs_0": obs.numpy()}
    )
    with torch.no_grad():
        ours = mean_action(policies[1], obs).clamp(-1, 1).numpy()
        first = mean_action(policies[0], obs).clamp(-1, 1).numpy()
    assert np.abs(actions - ours).max() < 1e-5 < np.abs(actions - first).max()
    names = [i.name for i in onnx.load_from_string(refilled).graph.initializer]
    assert "version_number.1" in names  # the renamed buffer is refilled too
