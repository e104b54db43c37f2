"""The full fault-injection count: `python experiments/fault_trials.py [--trials 40]`.

Runs tests/faults with META_HARNESS_FAULT_TRIALS random kills, races and resume start-up
signals (CI runs 2 of each), then prints the reliability table (docs/reliability.md) from
pytest's JUnit report.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = {
    "test_kills": "kill trials (SIGKILL at each commit point and at random instants, "
    "SIGINT, SIGTERM): resumed bitwise equal, complete CSVs",
    "test_refusals": "corruption, drift and full-disk cases: refused in one line, "
    "nothing overwritten",
    "test_races": "concurrency trials (two processes on one run, dead holders): consistent",
    "test_builds": "build trials (killed builds, seeds that overflowed): completed",
    "test_paths": "path tricks (run ids that are paths, symlinks in and around the run, "
    "initialize_from a path): refused before any write, or read only; nothing outside the run "
    "touched",
    "test_signals": "signals at fixed and random start-up delays (fresh and resumed runs, Ray's "
    "start-up), during a commit and after the final status: exit 130/143, one line, "
    "the run as required",
}


def main() -> None:
    """Run the suite at full count and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=40, help="random kills, races and start-up signals each"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "faults.xml"
        env = {**os.environ, "META_HARNESS_FAULT_TRIALS": str(args.trials)}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/faults",
                f"--junitxml={report}",
            ],
            cwd=ROOT,
            env=env,
            check=False,
        )
        passed, total = Counter[str](), Counter[str]()
        for case in ET.parse(report).getroot().iter("testcase"):
            group = case.get("classname", "").rsplit(".", 1)[-1]
            if case.find("skipped") is not None:
                continue
            total[group] += 1
            if case.find("failure") is None and case.find("error") is None:
                passed[group] += 1
    print("| trials | count | as required |")
    print("|---|---|---|")
    for group, label in GROUPS.items():
        print(f"| {label} | {total[group]} | {passed[group]} |")


if __name__ == "__main__":
    main()
