#!/bin/bash
# gflow's collectives between two simulated hosts against PyTorch Gloo and Open MPI (TCP), in one
# run, back to back: two network namespaces (gfq-a 10.61.0.1, gfq-b 10.61.0.2; another prefix and
# subnet with NETNS_PREFIX=net NETNS_SUBNET=10.77.0) joined by a veth pair (interface gfq0 in
# both, MTU 9000). Needs root, a release build (`cargo build --release
# --bin gflow-bench --bin gflow-launch`) and the peers' venv (/tmp/gflow-peers/venv: torch, mpi4py).
#
#   benches/peers/netns_collectives.sh [--per-host 1|2] [--sizes 16,128] [--rounds 3] [--mtu 9000]
#       [--variant TAG:ENV=V,ENV=V[:BINDIR]]... [--out results.jsonl] [--keep]
#
# Each round runs every gflow variant (default: one, untagged, this build), Gloo, Open MPI and, on
# 2 hosts x 1 rank, one plain TCP stream (1 GiB) and the point-to-point figures. A variant's rows
# get `@TAG` appended to their system. Prints each system's range over the rounds and every
# round's gflow / peer ratios. The namespaces are removed at the end unless --keep.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PEER_PYTHON:-/tmp/gflow-peers/venv/bin/python}
PER=1 SIZES=16,128 ROUNDS=3 MTU=9000 OUT="" KEEP=0 VARIANTS=()
while [ $# -gt 0 ]; do
  case $1 in
    --per-host) PER=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --mtu) MTU=$2; shift 2 ;;
    --variant) VARIANTS+=("$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=(":")
# Exported: netns_rsh.sh (run by mpirun) maps addresses to namespaces with them.
export NETNS_PREFIX=${NETNS_PREFIX:-gfq} NETNS_SUBNET=${NETNS_SUBNET:-10.61.0}
NS=$NETNS_PREFIX
OUT=${OUT:-$(mktemp /tmp/$NS-results.XXXX.jsonl)}
: >"$OUT"
WORLD=$((2 * PER))
A=$NETNS_SUBNET.1 B=$NETNS_SUBNET.2
# Both namespaces share this machine's cores: nothing is pinned (a launcher's pinning would put
# both hosts' first ranks on the same core).

netns_up() {
  ip netns del $NS-a 2>/dev/null || true
  ip netns del $NS-b 2>/dev/null || true
  ip netns add $NS-a
  ip netns add $NS-b
  ip link add $NS-va type veth peer name $NS-vb
  ip link set $NS-va netns $NS-a
  ip link set $NS-vb netns $NS-b
  local ns addr
  for ns in a b; do
    [ $ns = a ] && addr=$A || addr=$B
    ip -n $NS-$ns link set $NS-v$ns name gfq0
    ip -n $NS-$ns addr add $addr/24 dev gfq0
    ip -n $NS-$ns link set gfq0 mtu "$MTU" up
    ip -n $NS-$ns link set lo up
  done
}
netns_down() {
  ip netns del $NS-a 2>/dev/null || true
  ip netns del $NS-b 2>/dev/null || true
}
[ $KEEP = 1 ] || trap netns_down EXIT
netns_up

# Appends rank 0's lines, each system tagged with $2 when given.
tagged() {
  local tag=$1
  if [ -n "$tag" ]; then sed "s/\"system\": \"\\(gflow[^\"]*\\)\"/\"system\": \"\\1@$tag\"/"; else cat; fi
}

PORT=29600
next_port() { PORT=$((PORT + 1)); [ $PORT -gt 29690 ] && PORT=29601; echo $PORT; }

run_gflow() {
  local tag envs bins ops port tok
  IFS=: read -r tag envs bins <<<"$1"
  bins=${bins:-$ROOT/target/release}
  ops=all_reduce,all_gather,all_to_all
  [ "$PER" = 1 ] && ops=$ops,p2p
  port=$(next_port)
  tok=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local e=() part
  IFS=, read -ra parts <<<"$envs"
  for part in "${parts[@]}"; do [ -n "$part" ] && e+=("$part"); done
  local tmp
  tmp=$(mktemp)
  for node in 1 0; do
    local ns=$NS-b; [ $node = 0 ] && ns=$NS-a
    local args=()
    [ $node = 0 ] && args=(--out "$tmp")
    env "${e[@]}" GFLOW_JOB_TOKEN=$tok timeout 600 ip netns exec $ns "$bins/gflow-launch" \
      --nnodes 2 --node-rank $node --nproc-per-node "$PER" --master-addr $A --master-port "$port" \
      --bind-to none "$bins/gflow-bench" collectives --sizes "$SIZES" --ops "$ops" "${args[@]}" \
      >"/tmp/$NS-gflow-$node.log" 2>&1 &
  done
  wait
  tagged "$tag" <"$tmp"
  rm -f "$tmp"
}

run_gloo() {
  local ops=all_reduce,all_gather,all_to_all port tmp pids=()
  [ "$PER" = 1 ] && ops=$ops,p2p
  port=$(next_port)
  tmp=$(mktemp)
  for r in $(seq 0 $((WORLD - 1))); do
    local ns=$NS-a; [ "$r" -ge "$PER" ] && ns=$NS-b
    GLOO_SOCKET_IFNAME=gfq0 timeout 600 ip netns exec $ns "$PY" "$HERE/peer_collectives_gloo.py" \
      --master $A:"$port" --rank "$r" --world $WORLD --sizes "$SIZES" --ops $ops --out "$tmp" \
      >"/tmp/$NS-gloo-$r.log" 2>&1 &
  done
  wait
  cat "$tmp"
  rm -f "$tmp"
}

run_mpi() {
  timeout 600 ip netns exec $NS-a mpirun --allow-run-as-root --oversubscribe -np $WORLD \
    --host $A:"$PER",$B:"$PER" --mca plm_rsh_agent "$HERE/netns_rsh.sh" \
    --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include gfq0 --mca oob_tcp_if_include gfq0 \
    "$PY" "$HERE/peer_collectives_mpi.py" --sizes "$SIZES" --label openmpi-tcp \
    --ops all_reduce,all_gather,all_to_all 2>/tmp/$NS-mpi.log
}

run_tcp() {
  local port
  port=$(next_port)
  timeout 300 ip netns exec $NS-b "$PY" "$HERE/tcp_stream.py" recv --port "$port" --runs 3 &
  timeout 300 ip netns exec $NS-a "$PY" "$HERE/tcp_stream.py" send --to $B:"$port" --runs 3 \
    --mib 1024
  wait
}

# Rank 0's JSON lines, each with the round.
in_round() { grep '^{' | sed "s/}\$/, \"round\": $1}/" >>"$OUT"; }

for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round ($PER rank(s) per host, MTU $MTU)"
  for v in "${VARIANTS[@]}"; do
    run_gflow "$v" | in_round "$round" || echo "gflow variant $v failed (/tmp/$NS-gflow-*.log)"
  done
  run_gloo | in_round "$round" || echo "gloo failed (/tmp/$NS-gloo-*.log)"
  run_mpi | in_round "$round" || echo "open mpi failed (/tmp/$NS-mpi.log)"
  if [ "$PER" = 1 ]; then run_tcp | in_round "$round" || echo "tcp stream failed"; fi
  echo "round $round: $(wc -l <"$OUT") lines"
done

echo "== results in $OUT"
"$PY" "$HERE/netns_summary.py" "$OUT"
