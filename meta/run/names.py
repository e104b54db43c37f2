"""Run ids are names, never paths; commands printed with them paste into bash and Hydra as they are.

A run id names one folder directly inside `results_dir` (and its lock file beside it), so it
may not hold a path separator, be `.` or `..`, start with a dot (the lock files and temporary
files are hidden files of `results_dir`), hold control characters or exceed `MAX_LENGTH`.
Anything else is a valid name; the ids meta-train derives from overrides use only
`[A-Za-z0-9._-]` (see `derived_run_id`).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable

DEFAULT_RESULTS_DIR = "results"
"""Config's `results_dir` default: commands printed for runs under it leave the key out."""
MAX_LENGTH = 128
"""Longest run id: its lock file `.<id>.lock` stays far below file systems' 255 bytes."""
SAFE = re.compile(r"[A-Za-z0-9._-]+")
"""Characters a derived run id is made of: a file name and a Hydra value as they stand."""
HYDRA_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
"""Values Hydra's override grammar reads unquoted as these very strings (but for NOT_STRINGS)."""
NOT_STRINGS = re.compile(r"(?i)true|false|null|inf|nan")
"""Unquoted words Hydra reads as booleans, None or floats."""


class RunIdError(ValueError):
    """A run id that is not a plain name (the message names the key and the rule)."""


def check_name(value: str, key: str = "run_id") -> str:
    """`value` if it is a valid run name, else RunIdError naming `key` and the rule it breaks."""
    rule = _broken_rule(value)
    if rule:
        raise RunIdError(f"{key}={value!r} is not a run name: {rule}")
    return value


def _broken_rule(value: str) -> str:
    if not value:
        return "it is empty"
    if "/" in value or "\\" in value:
        return "it holds a path separator (a run id names a folder inside results_dir)"
    if value in (".", ".."):
        return "'.' and '..' name folders, not runs"
    if value.startswith("."):
        return "it starts with a dot (hidden files of results_dir are the runs' locks)"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "it holds control characters"
    if len(value) > MAX_LENGTH:
        return f"it is {len(value)} characters long (at most {MAX_LENGTH})"
    return ""


def derived_run_id(algorithm: str, overrides: Iterable[str]) -> str:
    """`<algorithm>[-<key>_<value>...]` from sorted `key=value` overrides; unique per set.

    Characters outside `[A-Za-z0-9.-]` in keys and values become `_`, so the id is a file name
    and a Hydra value as it stands (`reptile-meta.steps_50-seed_6`). Where that loses
    information (lists, quotes, commas) or the id would exceed MAX_LENGTH, a short hash of the
    overrides as given follows, so two sweep jobs never share an id.
    """
    given = sorted(overrides)
    parts = [algorithm, *(_part(item) for item in given)]
    plain = "-".join(part for part in parts if part)
    lossless = all(_part(item) == item.replace("=", "_", 1) for item in given)
    if lossless and len(plain) <= MAX_LENGTH:
        return plain
    digest = hashlib.sha1("\n".join(given).encode()).hexdigest()[:8]
    return f"{plain[: MAX_LENGTH - len(digest) - 1].rstrip('-_')}-{digest}"


def override_key(override: str) -> str:
    """The key an override sets: `seed` of `seed=3`, `+seed=3` and `~seed`."""
    return override.split("=")[0].lstrip("+~")


def seed_overrides(overrides: Iterable[str], seed: int) -> list[str]:
    """The overrides of one run of a group (`seeds=[...]`): its `seed=<seed>` in their place."""
    return [o for o in overrides if override_key(o) != "seeds"] + [f"seed={seed}"]


def _part(override: str) -> str:
    key, _, value = override.partition("=")
    return f"{_safe(key.lstrip('+~'))}_{_safe(value)}" if value else _safe(key)


def _safe(text: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.-]", "_", text)).strip("_")


def hydra_value(value: str) -> str:
    """`value` written so that Hydra's override grammar (and OmegaConf) read it back unchanged."""
    if HYDRA_PLAIN.fullmatch(value) and not NOT_STRINGS.fullmatch(value):
        return value
    # Hydra's quoted strings: backslashes are literal except in a run before a quote or the
    # end, which is halved; `${` would be an OmegaConf interpolation.
    escaped = re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), value)
    return "'" + escaped.replace("${", "\\${") + "'"


def command(*words: str, **keys: str | bool) -> str:
    """A command line for bash: `words`, then `key=value` overrides Hydra reads back exactly."""
    items = [*words, *(f"{key}={_override(value)}" for key, value in keys.items())]
    return " ".join(_bash_word(item) for item in items)


def _override(value: str | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return hydra_value(value)


def run_command(program: str, run_id: str, results_dir: str, **keys: str | bool) -> str:
    """`<program> run_id=<id> [results_dir=...] [keys]`, to paste into bash as it is."""
    where = {} if results_dir == DEFAULT_RESULTS_DIR else {"results_dir": results_dir}
    return command(program, run_id=run_id, **where, **keys)


def _bash_word(word: str) -> str:
    """`word` as bash reads it back: bare, in double quotes where that is plain, else shlex's."""
    if shlex.quote(word) == word:
        return word
    if not re.search(r'[$`"\\!]', word):
        return f'"{word}"'
    return shlex.quote(word)
