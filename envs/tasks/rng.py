"""Counter-based randomness: every draw is a hash of (area key, episode, draw index).

A draw depends on nothing but its own area's key and counters, so area i of an environment
seeded s draws exactly what area 0 of an environment seeded s + i draws, whatever the number
of areas, and no generator state has to be advanced in a loop over areas.
"""

from __future__ import annotations

from functools import cache

import numpy as np


def _u64(value: int) -> np.ndarray:
    """A 0-d uint64 constant (cheaper in ufuncs than a numpy scalar)."""
    return np.array(value, np.uint64)


_GOLDEN, _DRAW = _u64(0x9E3779B97F4A7C15), _u64(0xD1B54A32D192ED03)
_M1, _M2 = _u64(0xBF58476D1CE4E5B9), _u64(0x94D049BB133111EB)
_S27, _S30, _S31, _S40 = _u64(27), _u64(30), _u64(31), _u64(40)
_UNIT = np.array(2.0**-24, np.float32)


def mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of a uint64 array (a new array; wraps modulo 2**64)."""
    z = x >> _S30
    z ^= x
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def area_keys(seed: int, num_areas: int) -> np.ndarray:
    """Keys of areas 0..n-1 of an environment seeded `seed`: the key of seed + i, for each i."""
    start = _u64(int(seed) % 2**64)
    return mix(mix(np.arange(num_areas, dtype=np.uint64) + start) + _GOLDEN)


@cache
def _offsets(count: int) -> np.ndarray:
    offsets = np.arange(1, count + 1, dtype=np.uint64) * _DRAW
    offsets.flags.writeable = False
    return offsets


def uniforms(keys: np.ndarray, episodes: np.ndarray, count: int) -> np.ndarray:
    """`count` floats in [0, 1) per area, for the given areas' keys and episode counters."""
    base = episodes * _GOLDEN
    base += keys
    bits = mix(mix(base)[:, None] + _offsets(count))
    bits >>= _S40
    return bits.astype(np.float32) * _UNIT
