"""Interop with Unity ML-Agents 1.1.0: its checkpoint modules (`mlagents`) and its ONNX (`onnx`).

θ leaves a run in the form `mlagents-learn --initialize-from` loads and Unity's inference engine
runs, and a policy trained with `mlagents-learn` can seed meta-training.
"""

from meta.interop.mlagents import InteropError, Network, from_mlagents, is_mlagents, to_mlagents

__all__ = ["InteropError", "Network", "from_mlagents", "is_mlagents", "to_mlagents"]
