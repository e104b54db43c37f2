"""Hatch build hook: ship the .pth that lets mlagents-envs run on current protobuf."""

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PTH = "meta_harness_protobuf.pth"


class CustomBuildHook(BuildHookInterface):
    """Adds the .pth file to the root of regular and editable wheels alike."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        key = "force_include_editable" if version == "editable" else "force_include"
        build_data.setdefault(key, {})[PTH] = PTH
