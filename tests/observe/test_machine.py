"""meta/observe/machine.py: the CPU as the kernel describes it."""

from __future__ import annotations

import os

from meta.observe import machine


def test_every_logical_cpu_is_one_block_with_the_first_ones_model():
    blocks = machine.cpu_blocks()
    assert len(blocks) == os.cpu_count()
    assert all("processor" in block for block in blocks)
    assert machine.cpu_model() == blocks[0]["model name"]
    assert machine.cpu_model([{"model name": "given"}]) == "given"  # blocks given, not read
    assert machine.cpu_model([]) == "unknown"


def test_no_cpuinfo_gives_no_blocks_and_an_unknown_model(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "absent")
    assert machine.cpu_blocks() == []
    assert machine.cpu_model() == "unknown"


def test_the_kind_tells_apart_two_cpus_of_one_model_name():
    zen3 = [{"model name": "AMD EPYC", "cpu family": "25", "model": "1", "stepping": "1"}]
    zen4 = [{**zen3[0], "model": "17"}]
    assert machine.cpu_model(zen3) == machine.cpu_model(zen4)
    assert machine.cpu_kind(zen3).startswith("family 25 model 1 stepping 1, torch ")
    assert machine.cpu_kind(zen3) != machine.cpu_kind(zen4)
    assert machine.cpu_kind([]) == machine.cpu_kind([{"model name": "x"}])  # torch's kernels alone
    assert machine.cpu_kind([]).startswith("torch ")
    assert "family" in machine.cpu_kind()  # this Linux machine's /proc/cpuinfo says it
