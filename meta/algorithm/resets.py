"""Fine-tuning resets: the parts of a start re-initialised before it adapts to a new task."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from meta.config.evaluation import RESETS


def _last_layer(keys: Sequence[str], body: str) -> list[str]:
    """The state_dict keys of the last layer of an `nn.Sequential` body (`actor`, `critic`)."""
    layers = [k for k in keys if k.startswith(f"{body}.")]
    last = max(int(k.split(".")[1]) for k in layers)
    return [k for k in layers if k.split(".")[1] == str(last)]


def reset_keys(keys: Iterable[str], resets: Iterable[str]) -> list[str]:
    """The state_dict keys the named resets re-initialise, in the state_dict's order."""
    keys, chosen = list(keys), set(resets)
    unknown = sorted(chosen - set(RESETS))
    if unknown:
        raise ValueError(f"unknown reset {unknown[0]!r} (use some of {RESETS})")
    picked: set[str] = set()
    if "value_head" in chosen:
        picked.update(_last_layer(keys, "critic"))
    if "critic" in chosen:
        picked.update(k for k in keys if k.startswith("critic."))
    if "policy_head" in chosen:
        picked.update([*_last_layer(keys, "actor"), "log_std"])
    if "normalizer" in chosen:
        picked.update(k for k in keys if k.startswith("normalizer."))
    return [k for k in keys if k in picked]
