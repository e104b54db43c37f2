"""What an offline wandb run wrote, read from its `.wandb` file."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any


def wandb_history(run_file: Path) -> list[dict[str, Any]]:
    """Read history records of a `.wandb` file (LevelDB log: 32 KiB blocks, 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, pending, history = run_file.read_bytes(), 7, 32768, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                history.append(
                    {
                        i.key or "/".join(i.nested_key): json.loads(i.value_json)
                        for i in record.history.item
                    }
                )
    return history
