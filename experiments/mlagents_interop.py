"""θ handed to the real ML-Agents 1.1.0 and back, on the FindTarget build.

Needs ML-Agents 1.1.0 in a virtualenv of its own (docs/unity-and-interop.md, "Handing θ to
ML-Agents and Unity", says how). From the project root, with the project's interpreter:

    python experiments/mlagents_interop.py --mlagents-venv <dir> [--work <dir>] [--record]

1. meta-train a run (θ), default network (128 units, 2 layers, normalize).
2. Outward, ML-Agents' own loader: a policy and PPO optimizer built as mlagents-learn builds
   them load `<run>/Brain/checkpoint.pt` (`TorchModelSaver`, as `--initialize-from` does);
   its warnings are counted and its actions on the build's observations compared with ours.
3. Outward, `mlagents-learn --initialize-from=<run>` trains on the build from θ, and from
   scratch to compare (the first summary comes before the first update: the start's reward).
4. Inward: `meta-train initialize_from=<the mlagents-learn run>` starts from its weights (their
   actions compared with ML-Agents' own), and another network is refused in one line.
5. `mlagents-learn --resume` on our run continues from its env steps, and its checkpoint
   rotation removes our kept checkpoints: the files left are those its status names.
`--record` also rewrites the committed records (tests/data/mlagents_1.1.0/) from the scratch
runs: the checkpoint's modules, key names and shapes, and the ONNX signature.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from envs.backend.host import free_ports

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "envs" / "builds" / "FindTarget"
RECORDS = ROOT / "tests" / "data" / "mlagents_1.1.0"
TRAINER_CONFIG = """\
behaviors:
  Brain:
    trainer_type: ppo
    hyperparameters: {{batch_size: 1024, buffer_size: 10240, learning_rate: 3.0e-4, beta: 5.0e-3,
                      epsilon: 0.2, lambd: 0.95, num_epoch: 3}}
    network_settings: {{normalize: {normalize}, hidden_units: {hidden}, num_layers: {layers}}}
    reward_signals: {{extrinsic: {{gamma: 0.99, strength: 1.0}}}}
    keep_checkpoints: 2
    checkpoint_interval: {interval}
    max_steps: {max_steps}
    time_horizon: 64
    summary_freq: {interval}
"""


def main() -> None:
    """Parse the command line; run ML-Agents' side when asked, else the whole check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlagents-venv", type=Path, help="virtualenv with mlagents 1.1.0")
    parser.add_argument("--work", type=Path, default=Path("results") / "mlagents_interop")
    parser.add_argument("--record", action="store_true", help="rewrite tests/data records")
    parser.add_argument("--steps", type=int, default=10000, help="mlagents-learn steps")
    parser.add_argument("--mlagents-side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mlagents_side:
        print(json.dumps(mlagents_side(json.loads(args.mlagents_side))))
        return
    if args.mlagents_venv is None:
        parser.error("--mlagents-venv is required")
    Check(args).run()


def mlagents_side(request: dict[str, Any]) -> dict[str, Any]:
    """Under ML-Agents' interpreter: load a checkpoint as mlagents-learn does, act on the build."""
    import logging
    import tempfile

    import torch
    import yaml
    from mlagents.plugins.trainer_type import register_trainer_plugins
    from mlagents.trainers.model_saver.torch_model_saver import TorchModelSaver
    from mlagents.trainers.policy.torch_policy import TorchPolicy
    from mlagents.trainers.ppo.optimizer_torch import TorchPPOOptimizer
    from mlagents.trainers.settings import RunOptions
    from mlagents.trainers.torch_entities.networks import SimpleActor

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    collected = Collect()
    logging.getLogger("mlagents.trainers.model_saver.torch_model_saver").addHandler(collected)
    spec, obs = build_observations(request["port"])
    register_trainer_plugins()  # as mlagents-learn does, so that `trainer_type: ppo` parses
    options = RunOptions.from_dict(yaml.safe_load(Path(request["config"]).read_text()))
    settings = options.behaviors["Brain"]
    settings.init_path = request["checkpoint"]
    policy = TorchPolicy(0, spec, settings.network_settings, SimpleActor, {})
    optimizer = TorchPPOOptimizer(policy, settings)
    with tempfile.TemporaryDirectory() as tmp:
        saver = TorchModelSaver(settings, tmp, load=False)
        saver.register(policy)
        saver.register(optimizer)
        saver.initialize_or_load()
    with torch.no_grad():
        out = policy.actor.forward([torch.from_numpy(obs)], None, None)
        log_sigma = policy.actor.action_model._continuous_distribution.log_sigma
    return {
        "obs": obs.tolist(),
        "deterministic": out[4].tolist(),
        "sigma": (torch.exp(log_sigma) / 3).flatten().tolist(),
        "warnings": collected.messages,
    }


def build_observations(port: int) -> tuple[Any, Any]:
    """Under ML-Agents' interpreter: the build's behavior spec and 64 steps of observations."""
    import numpy as np
    from mlagents_envs.base_env import ActionTuple
    from mlagents_envs.environment import UnityEnvironment

    env = UnityEnvironment(str(BUILD), base_port=port, no_graphics=True, seed=1)
    try:
        env.reset()
        spec = env.behavior_specs["Brain"]
        rng, observations = np.random.default_rng(0), []
        for _ in range(64):
            decisions, _ = env.get_steps("Brain")
            observations.append(decisions.obs[0])
            actions = rng.uniform(-1, 1, (len(decisions), 2)).astype(np.float32)
            env.set_actions("Brain", ActionTuple(continuous=actions))
            env.step()
    finally:
        env.close()
    return spec, np.concatenate(observations).astype(np.float32)


class Check:
    """The whole round trip, printing what it finds; exits non-zero if any check fails."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.venv: Path = args.mlagents_venv.resolve()
        self.work: Path = args.work.resolve()
        self.results = self.work / "results"
        self.record: bool = args.record
        self.steps: int = args.steps
        self.failures: list[str] = []

    def run(self) -> None:
        """All five steps, then the summary."""
        shutil.rmtree(self.work, ignore_errors=True)
        self.results.mkdir(parents=True)
        config = self._config("config.yaml", True, 128, 2, self.steps, self.steps // 4)
        env_steps = self.meta_train("theta", "meta.steps=40")
        self.compare("outward", self.results / "theta" / "Brain" / "checkpoint.pt", config, "theta")
        rewards = {
            run_id: self.mlagents_learn(config, run_id, *extra)
            for run_id, extra in (("from_theta", ["--initialize-from=theta"]), ("scratch", []))
        }
        print(
            f"first Mean Reward: from θ {rewards['from_theta']}, from scratch {rewards['scratch']}"
        )
        self.compare(
            "inward", self.results / "from_theta" / "Brain" / "checkpoint.pt", config, "from_theta"
        )
        self.meta_train("child", "meta.steps=2", "initialize_from=from_theta")
        self.refusal()
        self.resume(env_steps)
        if self.record:
            self.write_records(config)
        print("all checks passed" if not self.failures else f"FAILED: {'; '.join(self.failures)}")
        sys.exit(1 if self.failures else 0)

    def _config(
        self, name: str, normalize: bool, hidden: int, layers: int, steps: int, interval: int
    ) -> Path:
        path = self.work / name
        text = TRAINER_CONFIG.format(
            normalize=str(normalize).lower(),
            hidden=hidden,
            layers=layers,
            max_steps=steps,
            interval=interval,
        )
        path.write_text(text)
        return path

    def expect(self, ok: bool, what: str) -> None:
        """Record a failed check."""
        if not ok:
            self.failures.append(what)

    def meta_train(self, run_id: str, *overrides: str) -> int:
        """meta-train in a process; returns the run's total env steps."""
        command = [sys.executable, "-m", "meta", "logger=quiet", f"results_dir={self.results}"]
        done = subprocess.run(
            [*command, f"run_id={run_id}", *overrides], capture_output=True, text=True, cwd=ROOT
        )
        self.expect(done.returncode == 0, f"meta-train {run_id}: {done.stderr.strip()[-300:]}")
        status = json.loads(
            (self.results / run_id / "run_logs" / "training_status.json").read_text()
        )
        print(
            f"meta-train {run_id} {' '.join(overrides)}: {status['Brain']['env_steps']} env steps"
        )
        return int(status["Brain"]["env_steps"])

    def mlagents_learn(self, config: Path, run_id: str, *extra: str) -> str:
        """mlagents-learn on the build; returns the first summary's Mean Reward."""
        command = [str(self.venv / "bin" / "mlagents-learn"), str(config), f"--env={BUILD}"]
        command += [f"--run-id={run_id}", f"--results-dir={self.results}", "--no-graphics"]
        command += [f"--base-port={free_ports(3)}", *extra]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.work)
        log = done.stdout + done.stderr
        (self.work / f"{run_id}.log").write_text(log)
        bad = [line for line in log.splitlines() if re.search(r"Failed to load|Did not", line)]
        print(
            f"mlagents-learn --run-id={run_id} {' '.join(extra)}: exit {done.returncode}, "
            f"{len(bad)} loading warnings"
        )
        for line in log.splitlines():
            if re.search(r"Initializing from|Resuming|Starting training", line):
                print("   ", line.strip())
        self.expect(done.returncode == 0 and not bad, f"mlagents-learn {run_id}")
        found = re.search(r"Mean Reward: (-?\d+(?:\.\d+)?)", log)
        return found[1] if found else "none"

    def compare(self, label: str, checkpoint: Path, config: Path, run_id: str) -> None:
        """ML-Agents' loader and ours, on the same checkpoint and observations."""
        request = {"checkpoint": str(checkpoint), "config": str(config), "port": free_ports(3)}
        python = self.venv / "bin" / "python"
        done = subprocess.run(
            [str(python), __file__, "--mlagents-side", json.dumps(request)],
            capture_output=True,
            text=True,
            cwd=self.work,
        )
        if done.returncode != 0:
            self.expect(False, f"{label}: ML-Agents' side failed: {done.stderr.strip()[-300:]}")
            return
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
        ours = our_actions(self.results, run_id, theirs["obs"])
        gap = max_gap(ours["deterministic"], theirs["deterministic"])
        sigma_gap = max_gap([ours["sigma"]], [theirs["sigma"]])
        print(
            f"{label}: ML-Agents loaded {checkpoint.relative_to(self.work)} with "
            f"{len(theirs['warnings'])} warnings; over {len(theirs['obs'])} observations of "
            f"the build, max |action difference| {gap:.2e}, sigma difference {sigma_gap:.2e}"
        )
        self.expect(not theirs["warnings"] and gap < 1e-5 and sigma_gap < 1e-5, label)

    def resume(self, env_steps: int) -> None:
        """mlagents-learn --resume on our run (last: it becomes ML-Agents'): step and rotation."""
        brain = self.results / "theta" / "Brain"
        ours = sorted(p.name for p in brain.glob("Brain-*"))
        config = self._config("resume.yaml", True, 128, 2, env_steps + 3000, 1000)
        self.mlagents_learn(config, "theta", "--resume")
        log = (self.work / "theta.log").read_text()
        left = sorted(p.name for p in brain.glob("Brain-*"))
        status = json.loads(
            (self.results / "theta" / "run_logs" / "training_status.json").read_text()
        )
        entries = status["Brain"]["checkpoints"]
        named = sorted(
            Path(n).name for e in entries for n in (e["file_path"], *e["auxillary_file_paths"])
        )
        removed = [name for name in ours if name not in left]
        print(
            f"--resume: our kept files {ours}; ML-Agents' rotation removed {removed}; "
            f"left {left}, all named by its status: {left == named}"
        )
        self.expect(f"Resuming training from step {env_steps}" in log, "resume step")
        self.expect(bool(removed) and left == named, "rotation")

    def refusal(self) -> None:
        """A network that does not match the ML-Agents checkpoint is one line naming it."""
        command = [sys.executable, "-m", "meta", "logger=quiet", f"results_dir={self.results}"]
        command += ["run_id=misfit", "initialize_from=from_theta", "network.hidden_units=64"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        print(f"refused (exit {done.returncode}): {done.stderr.strip()}")
        self.expect(done.returncode != 0 and done.stderr.strip().count("\n") == 0, "refusal")
        self.expect(not (self.results / "misfit").exists(), "refusal wrote nothing")

    def write_records(self, config: Path) -> None:
        """Rewrite the committed records from ML-Agents' own files (two networks)."""
        other = self._config("record_b.yaml", False, 64, 3, 1000, 1000)
        self.mlagents_learn(other, "scratch_b")
        RECORDS.mkdir(parents=True, exist_ok=True)
        source = (
            "python experiments/mlagents_interop.py --record: {file} of mlagents-learn 1.1.0 PPO "
            "runs on envs/builds/FindTarget (torch 2.13, its exporter patched with dynamo=False), "
        )
        runs = [
            checkpoint_record(self.results / run_id / "Brain" / "checkpoint.pt")
            for run_id in ("scratch", "scratch_b")
        ]
        note = "read with torch.load(weights_only=True); tensors' values are not kept"
        produced = source.format(file="Brain/checkpoint.pt") + note
        write_json(RECORDS / "checkpoints.json", {"produced_by": produced, "runs": runs})
        signature = onnx_signature(self.results / "scratch" / "Brain.onnx")
        produced = source.format(file="Brain.onnx") + "read with onnx, outputs by onnxruntime"
        write_json(RECORDS / "onnx_signature.json", {"produced_by": produced, **signature})
        print(f"records written to {RECORDS.relative_to(ROOT)}")


def our_actions(results: Path, run_id: str, obs: list[list[float]]) -> dict[str, Any]:
    """Our policy's deterministic actions and sigma, from the run's weights as we load them."""
    import numpy as np
    import torch

    from meta.algorithm.ppo.network import make_policy
    from meta.config.ppo import NetworkConfig
    from meta.evaluation.episodes import policy_actor
    from meta.interop.mlagents import Network
    from meta.run.directory import latest_weights

    theta = latest_weights(str(results), run_id)
    net = Network.of_weights(theta, True)
    policy = make_policy(
        net.obs_size, net.action_size, NetworkConfig(net.hidden_units, net.num_layers), 0
    )
    policy.load_state_dict(theta)
    action = policy_actor(policy, True, torch.Generator())(np.asarray(obs, np.float32))
    return {
        "deterministic": np.clip(action, -1, 1).tolist(),
        "sigma": policy.log_std.exp().tolist(),
    }


def max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    """Largest absolute difference of two equally shaped nested lists."""
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def checkpoint_record(path: Path) -> dict[str, Any]:
    """Modules, key names, shapes and dtypes of an ML-Agents checkpoint, and its constants."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    modules: dict[str, Any] = {}
    for name, module in state.items():
        if name == "Optimizer:value_optimizer":
            group = module["param_groups"][0]
            modules[name] = {"param_group_keys": sorted(group), "params": len(group["params"])}
            continue
        modules[name] = [
            [k, list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in module.items()
        ]
    policy = state["Policy"]
    body = [
        k for k in policy if k.startswith("network_body._body_endoder") and k.endswith("weight")
    ]
    constants = (
        "version_number",
        "is_continuous_int_deprecated",
        "continuous_act_size_vector",
        "act_size_vector_deprecated",
        "memory_size_vector",
    )
    return {
        "network": {
            "obs_size": int(policy[body[0]].shape[1]),
            "action_size": int(policy["continuous_act_size_vector"][0]),
            "hidden_units": int(policy[body[0]].shape[0]),
            "num_layers": len(body),
            "normalize": any("normalizer" in k for k in policy),
        },
        "constants": {k: policy[k].tolist() for k in constants},
        "modules": modules,
    }


def onnx_signature(path: Path) -> dict[str, Any]:
    """What Unity reads of an ONNX: opset, inputs, outputs, constant outputs, operators."""
    import numpy as np
    import onnx
    import onnxruntime

    model = onnx.load(str(path))

    def tensors(values: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": v.name,
                "elem_type": v.type.tensor_type.elem_type,
                "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
            }
            for v in values
        ]

    session = onnxruntime.InferenceSession(str(path))
    size = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    outputs = session.run(None, {"obs_0": np.zeros((1, size), np.float32)})
    names = [o.name for o in model.graph.output]
    constant = ("version_number", "memory_size", "continuous_action_output_shape")
    return {
        "ir_version": model.ir_version,
        "opset_import": [[o.domain, o.version] for o in model.opset_import],
        "inputs": tensors(model.graph.input),
        "outputs": tensors(model.graph.output),
        "constants": {n: outputs[names.index(n)].tolist() for n in constant},
        "op_types": sorted({node.op_type for node in model.graph.node}),
    }


def write_json(path: Path, data: Any) -> None:
    """Indented JSON with each short list on one line, and a final newline."""
    path.write_text(_json(data, "") + "\n")


def _json(value: Any, indent: str) -> str:
    flat = json.dumps(value)
    if not isinstance(value, dict | list) or (isinstance(value, list) and len(flat) < 90):
        return flat
    inner = indent + " "
    if isinstance(value, list):
        items = [inner + _json(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    items = [f"{inner}{json.dumps(k)}: {_json(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + f"\n{indent}}}"


if __name__ == "__main__":
    main()
