"""``python -m gflow.distributed.launch --nproc_per_node N [--nnodes M --node_rank R
--master_addr A --master_port P] script.py [args...]``: starts N processes of ``script.py`` on
this node, as OneFlow's launcher (``python -m oneflow.distributed.launch``) and ``gflow-launch``
do, with OneFlow's flags: ``-m``/``--module``, ``--no_python``, ``--logdir`` and
``--redirect_stdout_and_stderr``; torch's ``--use_env`` is accepted (the variables are always
set, and no ``--local_rank`` argument is added).

Each process gets OneFlow's ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK`` and
``LOCAL_RANK``, torchrun's ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK``, and ``GFLOW_JOB_TOKEN``
(random on one node; on several, set the same ``GFLOW_JOB_TOKEN`` on every node to keep other
processes out, or the nodes meet by address and port alone, as OneFlow's). The port is
``--master_port``, else a free one on a single node, else 29500 (OneFlow's default). Every
output line is prefixed ``[rank r] ``. When a process fails the others are stopped (with what
they started) and the launcher exits with the failed rank's exit code (128 + the signal for a
rank a signal ended), naming the rank; Ctrl-C or SIGTERM stops them all.
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

DEFAULT_PORT = 29500


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
                   help="port of rank 0 (a free one on a single node when left out, else %d)"
                   % DEFAULT_PORT)
    p.add_argument("--no_python", "--no-python", action="store_true",
                   help="run the program directly instead of `python program`")
    p.add_argument("-m", "--module", action="store_true", help="run the program as `python -m`")
    p.add_argument("--use_env", "--use-env", action="store_true",
                   help="accepted for torch.distributed.launch command lines: every process "
                        "always finds LOCAL_RANK in its environment")
    p.add_argument("--logdir", "--log_dir", "--log-dir", default=None,
                   help="directory of the logs: DIR/local_rank_<i> per process (OneFlow's)")
    p.add_argument("--redirect_stdout_and_stderr", "--redirect-stdout-and-stderr",
                   action="store_true",
                   help="write each process's output to DIR/local_rank_<i>/stdout and stderr "
                        "instead of the console (needs --logdir)")
    p.add_argument("program", help="the script (or program with --no_python)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the program")
    return p


def _free_port():
    """A free port for rank 0, below Linux's ephemeral range (32768-60999) where one of a few
    random tries is free, so that no outgoing connection takes it before rank 0 binds it (as
    gflow-launch chooses); else one the system gives."""
    rng = secrets.SystemRandom()
    for _ in range(32):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_setup():
    # Each child leads its own process group (so stopping it stops what it started), and on
    # Linux gets SIGKILL when the launcher dies, so no rank outlives a killed job.
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _pump(rank, src, dst):
    for line in iter(src.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        dst.buffer.write(b"[rank %d] " % rank + line)
        dst.flush()
    src.close()


def _signal_group(p, sig):
    try:
        if os.name == "posix":
            os.killpg(p.pid, sig)
        elif sig == signal.SIGTERM:
            p.terminate()
        else:
            p.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + 3
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        # What the child started goes too, even once the child itself has ended.
        _signal_group(p, getattr(signal, "SIGKILL", signal.SIGTERM))
        p.wait()


def _describe(code):
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def _exit_code(code):
    """The launcher's exit code for a failed child's return code (as a shell reports it)."""
    code = 128 - code if code < 0 else code
    return code if 0 < code < 256 else 1


def _fail(msg):
    print(f"launch: {msg}", file=sys.stderr)
    return 2


def main(argv=None):
    a = _parser().parse_args(argv)
    if a.nproc_per_node < 1:
        return _fail(f"--nproc_per_node must be at least 1, got {a.nproc_per_node}")
    if a.nnodes < 1:
        return _fail(f"--nnodes must be at least 1, got {a.nnodes}")
    if not 0 <= a.node_rank < a.nnodes:
        return _fail(f"--node_rank must be in 0..{a.nnodes - 1} (--nnodes {a.nnodes}), "
                     f"got {a.node_rank}")
    if a.master_port is not None and not 0 < a.master_port < 65536:
        return _fail(f"--master_port must be a port (1-65535), got {a.master_port}")
    if a.no_python and a.module:
        return _fail("--no_python and --module (-m) do not go together")
    if a.redirect_stdout_and_stderr and not a.logdir:
        return _fail("--redirect_stdout_and_stderr needs --logdir")
    if a.logdir and os.path.exists(a.logdir) and not os.path.isdir(a.logdir):
        return _fail(f"--logdir {a.logdir!r} exists and is not a directory")
    token = os.environ.get("GFLOW_JOB_TOKEN")
    if not token:
        if a.nnodes > 1:
            print("launch: GFLOW_JOB_TOKEN is not set: the nodes meet by --master_addr and "
                  "--master_port alone (set it to the same secret on every node to refuse "
                  "others)", file=sys.stderr)
            token = ""
        else:
            token = secrets.token_hex(16)
    if a.master_port is not None:
        port = a.master_port
    else:
        port = _free_port() if a.nnodes == 1 else DEFAULT_PORT
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
    procs, pumps, files = [], [], []
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for local in range(a.nproc_per_node):
            rank = a.node_rank * a.nproc_per_node + local
            env = dict(os.environ)
            for var in ("RAYON_NUM_THREADS", "MATMUL_NUM_THREADS", "OMP_NUM_THREADS"):
                env.setdefault(var, threads)
            env.update(
                MASTER_ADDR=a.master_addr,
                MASTER_PORT=str(port),
                WORLD_SIZE=str(world),
                RANK=str(rank),
                LOCAL_RANK=str(local),
                LOCAL_WORLD_SIZE=str(a.nproc_per_node),
                GROUP_RANK=str(a.node_rank),
                GFLOW_JOB_TOKEN=token,
                GFLOW_OVERSUBSCRIBED="1" if a.nproc_per_node > cores else "0",
                PYTHONUNBUFFERED="1",
            )
            out = err = subprocess.PIPE
            if a.logdir:
                directory = os.path.join(a.logdir, f"local_rank_{local}")
                os.makedirs(directory, exist_ok=True)
                env["GLOG_log_dir"] = os.path.abspath(directory)
                if a.redirect_stdout_and_stderr:
                    out = open(os.path.join(directory, "stdout"), "wb")
                    err = open(os.path.join(directory, "stderr"), "wb")
                    files += [out, err]
            try:
                p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err,
                                     preexec_fn=_child_setup if os.name == "posix" else None)
            except OSError as e:
                _stop(procs)
                return _fail(f"cannot start {cmd[0]!r} for rank {rank}: {e}")
            procs.append(p)
            for src, dst in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
                if src is None:
                    continue
                t = threading.Thread(target=_pump, args=(rank, src, dst), daemon=True)
                t.start()
                pumps.append(t)
        failed = None
        while not stopping:
            codes = [p.poll() for p in procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                # Peers of a dead rank fail right after it: gather what ends in a short grace
                # period and name the root cause (a rank ended by a signal) first.
                grace = time.monotonic() + 0.5
                while time.monotonic() < grace and any(p.poll() is None for p in procs):
                    time.sleep(0.02)
                codes = [p.poll() for p in procs]
                bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
                i, c = min(bad, key=lambda ic: (ic[1] > 0, ic[0]))
                failed = (a.node_rank * a.nproc_per_node + i, c)
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.02)
        if failed or stopping:
            _stop(procs)
        for t in pumps:
            t.join(timeout=5)
        if stopping:
            print("launch: interrupted, stopped every rank", file=sys.stderr)
            return 128 + stopping[0]
        if failed:
            print(f"launch: rank {failed[0]} failed ({_describe(failed[1])}); stopped the others",
                  file=sys.stderr)
            return _exit_code(failed[1])
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for f in files:
            f.close()


if __name__ == "__main__":
    sys.exit(main())
