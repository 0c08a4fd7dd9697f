# Summarises netns_collectives.sh's JSON lines: each system's range over the rounds per
# (op, ranks, bytes), then every gflow row's ratio to each peer measured in the same round
# (> 1: gflow ahead). Point-to-point rows (`gbs`) compare with the plain TCP stream too.
#   python netns_summary.py results.jsonl
import json, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
metric = lambda r: r.get("busbw_gbs", r.get("gbs"))
key = lambda r: (r["op"], r["ranks"], r["bytes"])
ranges = defaultdict(list)
for r in rows:
    ranges[key(r) + (r["system"],)].append(metric(r))
print("op, ranks, MiB, system: GB/s over the rounds (busbw; p2p: bytes/s, the TCP stream 1 GiB)")
for (op, n, b, s), v in sorted(ranges.items(), key=lambda kv: str(kv[0])):
    size = b >> 20
    print(f"  {op:14} {n} {size:>4} {s:28} {min(v):6.3f} .. {max(v):6.3f}  (n={len(v)})")
by_round = defaultdict(dict)
streams = {r.get("round"): r for r in rows if r["system"] == "tcp-stream"}
for r in rows:
    if r["system"] != "tcp-stream":
        by_round[(r.get("round"),) + key(r)][r["system"]] = r
for k, systems in by_round.items():
    if k[1] == "p2p" and k[0] in streams:
        systems["tcp-stream"] = streams[k[0]]
print("gflow / peer, same round:")
ratios = defaultdict(list)
for k, systems in by_round.items():
    for s, v in systems.items():
        if not s.startswith("gflow"):
            continue
        for p, w in systems.items():
            if not p.startswith("gflow"):
                ratios[k[1:] + (s, p)].append(metric(v) / metric(w))
for (op, n, b, s, p), v in sorted(ratios.items(), key=lambda kv: str(kv[0])):
    size = b >> 20
    print(f"  {op:14} {n} {size:>4} {s:28} / {p:12} " + " ".join(f"{x:.2f}" for x in v))
