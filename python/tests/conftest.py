"""Helpers: run a script under ``python -m gflow.distributed.launch`` and split its output by rank."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class Job:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout, self.stderr = proc.stdout, proc.stderr
        self.out = {}
        for line in proc.stdout.splitlines():
            m = re.match(r"\[rank (\d+)\] ?(.*)$", line)
            if m:
                self.out.setdefault(int(m.group(1)), []).append(m.group(2))

    def text(self, rank):
        return "\n".join(self.out.get(rank, []))


def launch(script, n, *args, timeout=120):
    """Runs ``script`` as ``n`` processes; returns a Job (rc, per-rank lines)."""
    env = dict(os.environ, GFLOW_TIMEOUT_SECS="30")
    cmd = [sys.executable, "-m", "gflow.distributed.launch", "--nproc_per_node", str(n),
           str(script), *args]
    return Job(subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env))


@pytest.fixture
def run_job():
    return launch
