# One plain TCP stream's throughput, the ceiling a link between two hosts can reach:
#   python tcp_stream.py recv --port P            (on the receiving host; prints nothing)
#   python tcp_stream.py send --to HOST:P --mib 1024 --runs 3 [--label tcp-stream]
# The sender prints one JSON line (`op` p2p, `gbs` the median of the runs).
import argparse, json, socket, statistics, time

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["send", "recv"])
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--to", default="")
ap.add_argument("--mib", type=int, default=1024)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--label", default="tcp-stream")
a = ap.parse_args()
CHUNK = 16 << 20

if a.mode == "recv":
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", a.port))
    srv.listen(1)
    buf = bytearray(CHUNK)
    for _ in range(a.runs):
        c, _ = srv.accept()
        view = memoryview(buf)
        while c.recv_into(view):
            pass
        c.sendall(b"k")
        c.close()
else:
    host, port = a.to.rsplit(":", 1)
    data = bytes(CHUNK)
    times = []
    for _ in range(a.runs):
        for attempt in range(50):
            try:
                s = socket.create_connection((host, int(port)))
                break
            except OSError:
                time.sleep(0.1)
        t = time.perf_counter()
        for _ in range(a.mib // 16):
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        times.append(time.perf_counter() - t)
        s.close()
    med = statistics.median(times)
    print(json.dumps({"system": a.label, "op": "p2p", "ranks": 2, "bytes": a.mib << 20,
                      "median_s": med, "gbs": (a.mib << 20) / med / 1e9}), flush=True)
