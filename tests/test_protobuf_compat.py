"""The protobuf shim (mlagents_pb_compat) holds in a fresh interpreter, on the upb backend."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRESH = """
import mlagents_envs.environment  # first, as a user script would: the .pth shim must hold
from google.protobuf.internal import api_implementation
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto

assert api_implementation.Type() == "upb", api_implementation.Type()
message = UnityMessageProto()
message.header.status = 200
init = message.unity_input.rl_initialization_input
init.seed, init.num_areas, init.communication_version = 7, 64, "1.5.0"
info = message.unity_output.rl_output.agentInfos["Brain"].value.add(id=3, reward=0.5, done=True)
info.observations.add(shape=[10]).float_data.data.extend(range(10))
again = UnityMessageProto.FromString(message.SerializeToString())
assert again == message
assert again.unity_output.rl_output.agentInfos["Brain"].value[0].observations[0].shape == [10]
print("ok")
"""


@pytest.mark.integration
def test_mlagents_messages_round_trip_on_upb_in_a_fresh_interpreter() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
