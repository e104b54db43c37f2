"""`python experiments/study.py [--smoke] [--config FILE]`: meta-train seeds, then meta-eval.

The meta-training seeds, and those of the other meta-learners the study lists under `others`
(e.g. `fomaml: [meta.algorithm=fomaml]`), train side by side, at most `workers` processes at
once; with `group_seeds: true` one process per meta-learner trains its seeds as one group
(`seeds=[...]`, their inner trainings stacked). Then one meta-eval
trains each seed's joint baselines (one per eval.joint_ppo entry, in <run>/eval/) and compares
every start, each at the adaptation procedure it does best with on the selection split,
adapting in `workers` processes, into results/<eval_id>_eval (eval_id: run_id unless the study
names another, to evaluate the same runs again). The study's figure, selection, summaries and
a study.json of its seeds and tuning are copied to experiments/<copy_to>/.

A variant names its study with `base: <file>` and gives only what differs: its ids, and the
`train`, `eval` and `smoke` overrides it changes (each in place of the base's of the same key).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from meta.observe.machine import cpu_kind, cpu_model

HERE = Path(__file__).resolve().parent
COPIED = (
    "adaptation.png",
    "selection.csv",
    "steps_to_80.csv",
    "summary.csv",
    "summary_per_seed.csv",
    "improvement.csv",
)


def overridden(base: list[str], changes: list[str]) -> list[str]:
    """The base's overrides, each change in place of the one of its key (or after them)."""
    by_key = {change.split("=", 1)[0]: change for change in changes}
    kept = [by_key.pop(override.split("=", 1)[0], override) for override in base]
    return [*kept, *by_key.values()]


def _variant(base: DictConfig, own: DictConfig) -> DictConfig:
    """`base` with `own`'s keys on top and its override lists changed key by key."""
    lists = ("train", "eval")
    merged = OmegaConf.merge(base, {k: v for k, v in own.items() if k not in {"base", *lists}})
    for key in lists:
        merged[key] = overridden(list(base.get(key, [])), list(own.get(key, [])))
    return merged


def load_study(path: Path) -> DictConfig:
    """A study's configuration, a variant's (`base:`) resolved against the study it varies."""
    own = OmegaConf.load(path)
    assert isinstance(own, DictConfig), path
    if "base" not in own:
        return own
    base = load_study(path.parent / str(own.base))
    study = _variant(base, own)
    study.smoke = _variant(
        base.get("smoke", OmegaConf.create()), own.get("smoke", OmegaConf.create())
    )
    return study


def command(script: str, function: str) -> list[str]:
    """The console script, or the same entry point through this interpreter if not installed."""
    found = shutil.which(script)
    if found:
        return [found]
    code = f"import sys; from meta.cli import {function}; sys.argv[0] = {script!r}; {function}()"
    return [sys.executable, "-c", code]


def run(script: str, function: str, overrides: list[str]) -> float:
    """Run one stage, echoing it; stop the study if it fails. Its seconds."""
    return run_all(script, function, [overrides], 1)


def run_all(script: str, function: str, jobs: list[list[str]], workers: int) -> float:
    """Run one stage per override list, at most `workers` at once; stop if any fails. The
    stage's seconds."""
    started = time.perf_counter()
    waiting, running = list(jobs), []
    failed = 0
    while waiting or running:
        while waiting and len(running) < workers:
            overrides = waiting.pop(0)
            print(f"+ {script} {' '.join(overrides)}", flush=True)
            running.append(subprocess.Popen([*command(script, function), *overrides]))
        time.sleep(0.2)
        for process in [p for p in running if p.poll() is not None]:
            running.remove(process)
            failed = failed or process.returncode
    if failed:
        raise SystemExit(failed)
    seconds = time.perf_counter() - started
    print(f"  ({seconds:.0f} s)", flush=True)
    return seconds


def run_name(base: str, seed: int, grouped: bool) -> str:
    """A seed's run id: `<base>_seed<s>`, or as `seeds=[...]` names it, `<base>-seed_<s>`."""
    return f"{base}-seed_{seed}" if grouped else f"{base}_seed{seed}"


def trained(run_dir: Path) -> bool:
    """Whether the run has its final weights (then it is not trained again)."""
    if (run_dir / "Brain.pt").is_file():
        print(f"{run_dir} is trained already")
        return True
    return False


def describe(
    study: dict,
    seeds: list[int],
    learners: list[str],
    wall: float,
    stages: dict[str, float] | None = None,
) -> dict:
    """What a committed study folder says about itself: seeds, starts' tuning, wall time, and
    the seconds of each stage (`stages`: meta-training and meta-eval) on which CPU."""
    evaluate = dict(o.split("=", 1) for o in study["eval"] if "=" in o)
    search = "eval=search" in study["eval"] or any(k.startswith("eval.search") for k in evaluate)
    tuning: dict[str, object] = (
        {
            "search_trials_per_start": int(evaluate.get("eval.search.trials", 8)),
            "first_trial_is_the_runs_procedure": evaluate.get("eval.search.run_first") == "true",
        }
        if search
        else {"grid": evaluate.get("eval.adaptation", "[{}]")}
    )
    return {
        "run_id": study["run_id"],
        "meta_training_seeds": seeds,
        "meta_learners": learners,
        "train": study["train"],
        "eval": study["eval"],
        "selection_split": evaluate.get("eval.selection_split", "train"),
        **tuning,
        "wall_seconds": round(wall),
        **{f"{stage}_seconds": round(seconds) for stage, seconds in (stages or {}).items()},
        **({"cpu": cpu_model(), "cpu_kind": cpu_kind()} if stages else {}),
    }


def main() -> None:
    """Train the seeds not trained yet, evaluate them together, copy the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=HERE / "default_distribution.yaml")
    parser.add_argument("--smoke", action="store_true", help="the same pipeline, tiny")
    options = parser.parse_args()
    study = load_study(options.config)
    name, train, evaluate = str(study.run_id), list(study.train), list(study.eval)
    eval_id = str(study.get("eval_id") or name)  # another meta-eval of the same runs
    if options.smoke:
        name = str(study.smoke.run_id)
        eval_id = str(study.smoke.get("eval_id") or name)
        train += list(study.smoke.train)
        evaluate += list(study.smoke.eval)
    seeds, workers = list(study.get("seeds", [0])), int(study.get("workers", 1))
    runtime = list(study.get("runtime", []))  # e.g. [runtime=ray, runtime.address=auto]
    grouped = bool(study.get("group_seeds", False)) and len(seeds) > 1
    learners = {name: [], **{f"{name}_{k}": list(v) for k, v in study.get("others", {}).items()}}
    results = Path(study.results_dir)
    jobs, ids, others = [], [], []
    for base, extra in learners.items():
        named = [base] if len(seeds) == 1 else [run_name(base, s, grouped) for s in seeds]
        (ids if base == name else others).extend(named)
        left = [(i, s) for i, s in zip(named, seeds, strict=True) if not trained(results / i)]
        if grouped and left:  # one process per learner, its seeds' trainings stacked
            listed = ",".join(str(s) for s in seeds)
            jobs.append([f"run_id={base}", f"results_dir={results}", f"seeds=[{listed}]"])
            jobs[-1] += [*train, *extra, *runtime]
            jobs[-1] += ["resume=true"] if any((results / i).exists() for i in named) else []
            continue
        for run_id, seed in left:
            jobs.append([f"run_id={run_id}", f"results_dir={results}", f"seed={seed}", *train])
            jobs[-1] += [*extra, *runtime]
            jobs[-1] += ["resume=true"] if (results / run_id).exists() else []
    started = time.perf_counter()
    stages = {"meta_train": run_all("meta-train", "train_main", jobs, workers)}
    out = results / f"{eval_id}_eval"
    evaluated = [f"eval.run_ids=[{','.join(ids)}]", f"eval.other_run_ids=[{','.join(others)}]"]
    common = [f"run_id={ids[0]}", f"results_dir={results}", *evaluated, f"eval.workers={workers}"]
    common += runtime
    stages["meta_eval"] = run("meta-eval", "eval_main", [*common, f"eval.out_dir={out}", *evaluate])
    wall = time.perf_counter() - started
    written = [file for file in COPIED if (out / file).is_file()]
    if not options.smoke and study.get("copy_to"):
        target = HERE / str(study.copy_to)
        target.mkdir(parents=True, exist_ok=True)
        for file in written:
            shutil.copyfile(out / file, target / file)
        record = describe(OmegaConf.to_container(study), seeds, list(learners), wall, stages)
        (target / "study.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"copied {', '.join(written)} and study.json to {target}")
    print(f"study done in {wall:.0f} s: {out} ({', '.join(written)})")


if __name__ == "__main__":
    main()
