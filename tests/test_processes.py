"""A child that asks the kernel to end it with its parent."""

from __future__ import annotations

import os

from countboard.processes import die_with_parent


def test_a_child_asks_to_end_with_its_parent():
    pid = os.fork()
    if pid == 0:  # the child: the request is accepted, and a live parent does not end it
        os._exit(0 if die_with_parent() else 3)
    assert os.waitpid(pid, 0)[1] == 0
