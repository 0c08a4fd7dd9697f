"""``python -m gflow.distributed.launch --nproc_per_node N [--nnodes M --node_rank R
--master_addr A --master_port P] script.py [args...]``: starts N processes of ``script.py`` on
this node, as OneFlow's launcher and ``gflow-launch`` do.

Each process gets ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE`` and ``GFLOW_JOB_TOKEN`` (random on one node; on several, set the same
``GFLOW_JOB_TOKEN`` on every node). Every output line is prefixed ``[rank r] ``. When a process
fails the others are stopped and the launcher exits non-zero naming the failed rank; Ctrl-C stops
them all.
"""

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m gflow.distributed.launch",
        description="Start the processes of a gflow job on this node.",
    )
    p.add_argument("--nproc_per_node", "--nproc-per-node", type=int, default=1,
                   help="processes on this node (one per device)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes of the job")
    p.add_argument("--node_rank", "--node-rank", type=int, default=0, help="this node's index")
    p.add_argument("--master_addr", "--master-addr", default="127.0.0.1",
                   help="address of node 0 (where rank 0 listens)")
    p.add_argument("--master_port", "--master-port", type=int, default=None,
                   help="port of rank 0 (a free one on a single node when left out)")
    p.add_argument("--no_python", "--no-python", action="store_true",
                   help="run the program directly instead of `python program`")
    p.add_argument("-m", "--module", action="store_true", help="run the program as `python -m`")
    p.add_argument("program", help="the script (or program with --no_python)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the program")
    return p


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Linux: a child gets SIGKILL when the launcher dies, so no rank outlives a killed job.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _pump(rank, src, dst):
    for line in iter(src.readline, b""):
        dst.buffer.write(b"[rank %d] " % rank + line)
        dst.flush()
    src.close()


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 3
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if p.poll() is None:
            p.kill()
        p.wait()


def _describe(code):
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def main(argv=None):
    a = _parser().parse_args(argv)
    if a.nproc_per_node < 1 or a.nnodes < 1 or not 0 <= a.node_rank < a.nnodes:
        print("launch: need --nproc_per_node >= 1, --nnodes >= 1 and 0 <= --node_rank < --nnodes",
              file=sys.stderr)
        return 2
    token = os.environ.get("GFLOW_JOB_TOKEN")
    if not token:
        if a.nnodes > 1:
            print("launch: set GFLOW_JOB_TOKEN to the same secret on every node", file=sys.stderr)
            return 2
        token = secrets.token_hex(16)
    port = a.master_port or (_free_port() if a.nnodes == 1 else 29500)
    world = a.nproc_per_node * a.nnodes
    cores = os.cpu_count() or 1
    threads = str(max(1, cores // a.nproc_per_node))
    if a.no_python:
        cmd = [a.program]
    elif a.module:
        cmd = [sys.executable, "-u", "-m", a.program]
    else:
        cmd = [sys.executable, "-u", a.program]
    cmd += a.args
    procs, pumps = [], []
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for local in range(a.nproc_per_node):
            rank = a.node_rank * a.nproc_per_node + local
            env = dict(os.environ)
            for var in ("RAYON_NUM_THREADS", "MATMUL_NUM_THREADS"):
                env.setdefault(var, threads)
            env.update(
                MASTER_ADDR=a.master_addr,
                MASTER_PORT=str(port),
                WORLD_SIZE=str(world),
                RANK=str(rank),
                LOCAL_RANK=str(local),
                LOCAL_WORLD_SIZE=str(a.nproc_per_node),
                GFLOW_JOB_TOKEN=token,
                GFLOW_OVERSUBSCRIBED="1" if a.nproc_per_node > cores else "0",
                PYTHONUNBUFFERED="1",
            )
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 preexec_fn=_die_with_parent if sys.platform == "linux" else None)
            procs.append(p)
            for src, dst in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
                t = threading.Thread(target=_pump, args=(rank, src, dst), daemon=True)
                t.start()
                pumps.append(t)
        failed = None
        while not stopping.is_set():
            codes = [p.poll() for p in procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                # Prefer a rank ended by a signal: the others' errors echo its death.
                i, c = min(bad, key=lambda ic: (ic[1] > 0, ic[0]))
                failed = (a.node_rank * a.nproc_per_node + i, c)
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.02)
        if failed or stopping.is_set():
            _stop(procs)
        for t in pumps:
            t.join(timeout=5)
        if stopping.is_set():
            print("launch: interrupted, stopped every rank", file=sys.stderr)
            return 130
        if failed:
            print(f"launch: rank {failed[0]} failed ({_describe(failed[1])}); stopped the others",
                  file=sys.stderr)
            return 1
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
