#!/bin/sh
# Open MPI's `plm_rsh_agent` for two hosts simulated by network namespaces
# (netns_collectives.sh): runs the daemon's command line in the namespace that owns the address.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
net=${NETNS_SUBNET:-10.61.0} pre=${NETNS_PREFIX:-gfq}
case $host in
"$net.1") ns=$pre-a ;;
"$net.2") ns=$pre-b ;;
*) echo "netns_rsh.sh: no namespace for host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
