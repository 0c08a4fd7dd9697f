#!/usr/bin/env bash
# Simulated hosts on one machine: network namespaces PREFIX-h0..h2, each with an `eth0` joined by
# a veth pair to a bridge in the switch namespace PREFIX-sw, addressed SUBNET.1, .2, .3 (/24),
# optionally rate-limited (tc tbf, both directions). Needs root and iproute2; exits 2 where
# namespaces cannot be made, so callers can skip loudly.
#
#   scripts/hosts.sh up [--hosts 2|3] [--rate 10gbit|1gbit] [--mtu 9000] [--prefix NAME]
#                       [--subnet 10.62.0]     make (or bring to this shape) and print addresses
#   scripts/hosts.sh down [--prefix NAME]      delete every namespace of the prefix
#   scripts/hosts.sh status [--prefix NAME]    namespaces, addresses, qdiscs
#   scripts/hosts.sh cut K [--prefix NAME]     partition host K from the others (its switch
#                                              port down); `mend K` brings it back
#
# Run a command on a host: `ip netns exec PREFIX-h1 CMD`. `up` is idempotent (a second run
# changes only what differs); `down` leaves nothing behind.
set -euo pipefail

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 1
}

cmd="${1:-}"
[ -n "$cmd" ] || usage
shift
target=""
if [ "$cmd" = cut ] || [ "$cmd" = mend ]; then
  target="${1:-}"
  [[ "$target" =~ ^[0-2]$ ]] || { echo "hosts.sh $cmd: expected a host number 0-2, got '$target'" >&2; exit 1; }
  shift
fi
hosts=2 rate="" mtu=1500 prefix=gfh subnet=10.62.0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --mtu) mtu="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --subnet) subnet="$2"; shift 2 ;;
    *) echo "hosts.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$hosts" =~ ^[23]$ ]] || { echo "hosts.sh: --hosts must be 2 or 3, got '$hosts'" >&2; exit 1; }
[[ "$mtu" =~ ^[0-9]+$ ]] || { echo "hosts.sh: --mtu must be a number, got '$mtu'" >&2; exit 1; }
[[ "$subnet" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "hosts.sh: --subnet must look like 10.62.0, got '$subnet'" >&2; exit 1; }
[[ "$prefix" =~ ^[A-Za-z0-9_-]{1,40}$ ]] || { echo "hosts.sh: --prefix must be 1-40 letters, digits, - or _, got '$prefix'" >&2; exit 1; }

sw="$prefix-sw"
have_ns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }
ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(sw|h[0-9])$" || true; }

# tc tbf on DEV in namespace NS at $rate (or no qdisc of ours without a rate). The bucket holds
# 10 ms of traffic (the kernel needs at least one timer tick's worth), the queue 50 ms.
shape() {
  local ns="$1" dev="$2"
  if [ -z "$rate" ]; then
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    return
  fi
  local bits
  case "$rate" in
    *gbit) bits=$(( ${rate%gbit} * 1000000000 )) ;;
    *mbit) bits=$(( ${rate%mbit} * 1000000 )) ;;
    *) echo "hosts.sh: --rate must be like 10gbit, 1gbit or 100mbit, got '$rate'" >&2; exit 1 ;;
  esac
  local burst=$(( bits / 8 / 100 ))
  [ "$burst" -ge 65536 ] || burst=65536
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}

up() {
  if ! have_ns "$sw" && ! ip netns add "$sw" 2>/dev/null; then
    echo "hosts.sh: cannot make network namespaces (needs root and iproute2)" >&2
    exit 2
  fi
  ip -n "$sw" link show br0 >/dev/null 2>&1 || ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set lo up
  for k in 0 1 2; do
    local ns="$prefix-h$k"
    if [ "$k" -ge "$hosts" ]; then
      if have_ns "$ns"; then ip netns del "$ns"; fi
      continue
    fi
    have_ns "$ns" || ip netns add "$ns"
    ip -n "$ns" link show eth0 >/dev/null 2>&1 ||
      ip link add eth0 netns "$ns" type veth peer name "h$k" netns "$sw"
    ip -n "$sw" link set "h$k" master br0 mtu "$mtu" up
    ip -n "$ns" link set eth0 mtu "$mtu" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr replace "$subnet.$((k + 1))/24" dev eth0
    shape "$ns" eth0
    shape "$sw" "h$k"
  done
  ip -n "$sw" link set br0 up
  for k in $(seq 0 $((hosts - 1))); do
    echo "$prefix-h$k $subnet.$((k + 1))"
  done
}

down() {
  for ns in $(ours); do
    ip netns del "$ns"
  done
}

status() {
  local any=""
  for ns in $(ours); do
    any=1
    echo "== $ns"
    ip -n "$ns" -brief addr show | grep -v '^lo ' || true
    tc -n "$ns" qdisc show | grep -E 'tbf' || true
  done
  [ -n "$any" ] || echo "no namespaces with prefix $prefix"
}

port() {
  have_ns "$sw" || { echo "hosts.sh: no namespace $sw (run up first)" >&2; exit 1; }
  ip -n "$sw" link set "h$target" "$1"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  status) status ;;
  cut) port down ;;
  mend) port up ;;
  *) usage ;;
esac
