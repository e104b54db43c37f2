"""Configuration keys that are gone: what replaced each, refused where given, dropped on resume.

Every runtime trains stacks now (meta.runtime.jobs), so the keys that chose whether to stack
went. A command line or configuration file that names one is refused in one line saying what
replaced it; a run directory's `configuration.yaml` written before keeps working (`upgraded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

RUNTIMES = {
    "batched": ("local", "runtime=local (the default) stacks in this process"),
    "ray_batched": ("ray", "runtime=ray's actors each train their share as a stack"),
}
"""Retired runtimes: the one each became, and why."""
KEYS = {
    "runtime.stack": "runtime=ray's actors always train their shares as stacks",
    "eval.batched": "meta-eval always trains its adaptation jobs as stacks",
    "eval.batched_joint": "meta-eval pretrains the joint baselines of one setting as one stack",
}
"""Retired keys, and what does their work now."""
_FOUND = re.compile(r"Could not find 'runtime/(\w+)'|full_key: (\S+)|Could not override '([^']+)'")


def retired(key: str, value: Any = None) -> str | None:
    """The one-line refusal of `key=value` when it names something gone, else None."""
    key = key.lstrip("+~").replace("/", ".")
    if key in KEYS:
        return f"{key} is gone: {KEYS[key]}; drop it"
    if key in ("runtime", "runtime.backend") and str(value) in RUNTIMES:
        now, why = RUNTIMES[str(value)]
        return f"{key}={value} is gone: every runtime trains stacks, and {why}; use runtime={now}"
    return None


def in_overrides(overrides: Iterable[str]) -> str | None:
    """The refusal of the first override that names something gone (a sweep's values too)."""
    for override in overrides:
        key, _, values = override.partition("=")
        for value in values.split(",") if values else [None]:
            if message := retired(key, value):
                return message
    return None


def in_error(error: BaseException) -> str | None:
    """The refusal for a composition error whose unknown key or option is one that is gone."""
    for match in _FOUND.finditer(f"{error} {error.__cause__ or ''}"):
        option, key = match.group(1), match.group(2) or match.group(3)
        found = retired("runtime", option) if option else retired(key)
        if found:
            return found
    return None


def upgraded(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved configuration without the keys that are gone, a retired runtime as its successor."""
    for key in KEYS:
        section, _, leaf = key.partition(".")
        if isinstance(saved.get(section), dict):
            saved[section].pop(leaf, None)
    runtime = saved.get("runtime")
    if isinstance(runtime, dict) and runtime.get("backend") in RUNTIMES:
        runtime["backend"] = RUNTIMES[runtime["backend"]][0]
    return saved
