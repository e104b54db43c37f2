"""`python experiments/study.py [--smoke] [--config study.yaml]`: meta-train, then meta-eval."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

HERE = Path(__file__).resolve().parent


def command(script: str, function: str) -> list[str]:
    """The console script, or the same entry point through this interpreter if not installed."""
    found = shutil.which(script)
    if found:
        return [found]
    code = f"import sys; from meta.cli import {function}; sys.argv[0] = {script!r}; {function}()"
    return [sys.executable, "-c", code]


def run(script: str, function: str, overrides: list[str]) -> None:
    """Run one stage, echoing it; stop the study if it fails."""
    print(f"+ {script} {' '.join(overrides)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run([*command(script, function), *overrides])
    if done.returncode != 0:
        raise SystemExit(done.returncode)
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def main() -> None:
    """Train unless already trained, then evaluate (the joint baseline is trained by meta-eval)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=HERE / "study.yaml")
    parser.add_argument("--smoke", action="store_true", help="the same pipeline, tiny")
    options = parser.parse_args()
    study = OmegaConf.load(options.config)
    run_id, train, evaluate = study.run_id, list(study.train), list(study.eval)
    if options.smoke:
        run_id = study.smoke.run_id
        train += list(study.smoke.train)
        evaluate += list(study.smoke.eval)
    common = [f"run_id={run_id}", f"results_dir={study.results_dir}"]
    run_dir = Path(study.results_dir) / run_id
    if (run_dir / "Brain.pt").is_file():
        print(f"{run_dir} is trained already; evaluating it")
    else:
        resume = ["resume=true"] if run_dir.exists() else []
        run("meta-train", "train_main", [*common, *train, *resume])
    run("meta-eval", "eval_main", [*common, *evaluate])
    print(f"study done: {run_dir / 'eval'} (adaptation.png, summary.csv, adaptation.csv)")


if __name__ == "__main__":
    main()
