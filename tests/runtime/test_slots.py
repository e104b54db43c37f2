"""Build slots claimed on a node: concurrent holders never share one; a released slot is free."""

from __future__ import annotations

import subprocess
import sys

from meta.runtime.slots import claimed_slot

HOLD = (
    "import sys; from meta.runtime.slots import claimed_slot\n"
    "with claimed_slot(int(sys.argv[1])) as slot:\n"
    "    print(slot, flush=True); sys.stdin.read()\n"  # held until killed
)


def test_holders_get_distinct_slots_and_a_released_slot_is_taken_again() -> None:
    port = 47001  # a base port no other test uses: the lock files are per base port
    with claimed_slot(port) as first, claimed_slot(port) as second:
        assert (first, second) == (1, 2)
    with claimed_slot(port) as again:
        assert again == 1


def test_a_slot_held_by_another_process_is_skipped_until_that_process_dies() -> None:
    port = 47002
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"1"
        with claimed_slot(port) as slot:
            assert slot == 2
    finally:
        holder.kill()
        holder.wait()
    with claimed_slot(port) as slot:
        assert slot == 1  # the lock died with its process
