"""Which Python the built-in builds run: the one running the trainer.

A built-in build (``envs/builds/<Family>.x86_64``) is a shell script that starts
``envs.unity.player`` with ``$META_HARNESS_PYTHON``, else the project's ``.venv`` beside
``envs/``, else ``python3`` on PATH. A trainer started by the full path of a venv that is not
activated (and not the project's ``.venv``) would otherwise launch a ``python3`` without the
project's packages, and the build would die at its first import.
"""

from __future__ import annotations

import os
import sys

BUILD_PYTHON = "META_HARNESS_PYTHON"
"""The environment variable the built-in builds read their interpreter from."""


def use_this_interpreter() -> None:
    """Let builds launched from this process run this process's interpreter (unless set)."""
    os.environ.setdefault(BUILD_PYTHON, sys.executable)
