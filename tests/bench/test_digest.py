"""meta.bench.digest: θ's digest tells bit-identical weights from any other."""

from __future__ import annotations

import hashlib

import torch

from meta.bench.digest import tensor_digest


def test_the_digest_is_of_names_dtypes_shapes_and_bytes_in_name_order() -> None:
    state = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.ones(2)}
    digest = tensor_digest(state)
    assert digest == tensor_digest(dict(reversed(list(state.items()))))  # order of insertion
    assert digest == tensor_digest({k: v.clone() for k, v in state.items()})
    by_hand = hashlib.sha256()
    for name in ("a", "b"):
        tensor = state[name]
        by_hand.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        by_hand.update(tensor.numpy().tobytes())
    assert digest == by_hand.hexdigest()


def test_one_bit_a_dtype_a_shape_or_a_name_changes_it() -> None:
    state = {"w": torch.zeros(4)}
    digest = tensor_digest(state)
    flipped = torch.zeros(4)
    flipped.view(torch.int32)[0] = 1  # the smallest positive float: one bit
    assert tensor_digest({"w": flipped}) != digest
    assert tensor_digest({"w": torch.zeros(4, dtype=torch.float64)}) != digest
    assert tensor_digest({"w": torch.zeros(2, 2)}) != digest
    assert tensor_digest({"v": torch.zeros(4)}) != digest
    assert tensor_digest({"w": torch.zeros(8)[::2]}) == digest  # a strided view: same values
