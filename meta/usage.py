"""The command line's help for people: each program's help screen, and "did you mean" hints."""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import shutil
import string
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

EVAL_HELP = "hydra/help=eval"
"""meta-train and meta-eval share conf/config.yaml; this selects meta-eval's help screen."""
HELP_FLAGS = ("--help", "-h")
_KEY = re.compile(r"Could not (?:override|append to config\. An item is already at) '([^']+)'")
_GROUP = re.compile(r"Could not find '([^']+)/([^'/]+)'")


def eval_argv(argv: list[str]) -> list[str]:
    """meta-eval's arguments, with its own help screen selected when help is asked for."""
    return [EVAL_HELP, *argv] if any(arg in HELP_FLAGS for arg in argv) else argv


def wrap_help(text: str, width: int) -> str:
    """`text` with each line wider than `width` folded between words (never inside one), its
    continuations indented two columns deeper than it."""
    lines = []
    for line in text.splitlines():
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def wrapped_help(show: Callable[[], object], config_dir: str | None = None) -> None:
    """Print the help screen folded to the terminal: ours (`help_screen`) where it can fill the
    template, else what `show` (Hydra's main, printing its screen) prints."""
    screen = io.StringIO()
    try:
        text = None if config_dir is None else help_screen(config_dir, sys.argv[1:])
        if text is None:
            with contextlib.redirect_stdout(screen):
                show()
        else:
            screen.write(text + "\n")
    finally:
        sys.stdout.write(wrap_help(screen.getvalue(), shutil.get_terminal_size().columns))
        sys.stdout.flush()


def help_screen(config_dir: str, argv: list[str]) -> str | None:
    """The screen Hydra's --help prints for `argv`: its template, filled as Hydra fills it.

    Hydra lists each group's options by composing the configuration once per group (seconds
    for this tree); the options are the group's yaml files, listed here. None when the
    template asks for more than the groups and the configuration (Hydra's own screen then).
    """
    from hydra import compose, initialize_config_dir

    overrides = [arg for arg in argv if not arg.startswith("-")]
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    template = string.Template(str(cfg.hydra.help.template))
    shown = OmegaConf.masked_copy(cfg, [str(key) for key in cfg if key != "hydra"])
    try:
        return template.substitute(
            APP_CONFIG_GROUPS=_groups(config_dir), CONFIG=OmegaConf.to_yaml(shown)
        )
    except KeyError:
        return None


def _groups(config_dir: str) -> str:
    """`group: option, option` for each of the application's config groups, as Hydra lists them."""
    from pathlib import Path

    groups = sorted(p.name for p in Path(config_dir).iterdir() if p.is_dir() and p.name != "hydra")
    return "".join(f"{g}: {', '.join(_options(config_dir, g))}\n" for g in groups)


def did_you_mean(error: BaseException, config_dir: str, keys: list[str] | None = None) -> str:
    """ "; did you mean <key>?" for an unknown key or group option in a Hydra error, else "".

    The keys are the default configuration's unless given (inside a running Hydra app, where
    the configuration cannot be composed again: `config_keys` of the app's).
    """
    text = f"{error} {error.__cause__ or ''}"
    if match := _KEY.search(text):
        known = valid_keys(config_dir) if keys is None else keys
        nearest = nearest_key(match.group(1).lstrip("+~"), known)
        return f"; did you mean {nearest}?" if nearest else ""
    if match := _GROUP.search(text):
        group, option = match.groups()
        nearest = _closest(option, _options(config_dir, group))
        return f"; did you mean {group}={nearest}?" if nearest else ""
    return ""


def nearest_key(given: str, keys: list[str]) -> str | None:
    """The valid key closest to `given`: by its last part within its section, else anywhere."""
    parent, _, leaf = given.rpartition(".")
    siblings = [k for k in keys if k.rpartition(".")[0] == parent]
    for pool in (siblings, keys):
        by_leaf = {k.rpartition(".")[2]: k for k in reversed(pool)}
        best = _closest(leaf, list(by_leaf))
        if best is not None:
            return by_leaf[best]
    return _closest(given, keys)


def valid_keys(config_dir: str) -> list[str]:
    """Every key of the default configuration, dotted (`meta.steps`), sections included."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose(config_name="config")
    return _flatten(cfg, "")


def config_keys(cfg: DictConfig) -> list[str]:
    """Every key of a composed configuration but Hydra's own, dotted, sections included."""
    return [key for key in _flatten(cfg, "") if key.split(".")[0] != "hydra"]


def _flatten(node: Any, prefix: str) -> list[str]:
    keys: list[str] = []
    if isinstance(node, DictConfig):
        for key in node:
            dotted = f"{prefix}{key!s}"
            keys.append(dotted)
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not OmegaConf.is_missing(node, str(key)):
                keys.extend(_flatten(child, f"{dotted}."))
    return keys


def _options(config_dir: str, group: str) -> list[str]:
    """The options of a config group (its yaml files)."""
    from pathlib import Path

    return sorted(p.stem for p in (Path(config_dir) / group).glob("*.yaml"))


def _closest(word: str, candidates: list[str]) -> str | None:
    matches = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None
