#!/bin/sh
# Run before a node of the gateway's Redis Cluster is stopped on purpose (the Kubernetes preStop
# hook of deploy/k8s/redis-cluster.yaml, which carries a copy of this file: rolling update,
# drain). A master hands its slots to its replica first, by CLUSTER FAILOVER on that replica:
# the replica catches up with the master before it takes over, so nothing acknowledged is lost
# and the slots move in well under a second, instead of being unserved for cluster-node-timeout
# plus an election after the master is gone. A replica, or a master without a replica that
# answers, stops as it is. Bounded: at most about 10 s.
#
#   REDIS_CLUSTER_HOSTNAME, REDIS_PORT: as for redis-cluster-node.sh
set -u
me=$REDIS_CLUSTER_HOSTNAME
port=${REDIS_PORT:-6379}

node_cli() { redis-cli -h "$me" -p "$port" "$@" 2>/dev/null | tr -d '\r'; }

# shellcheck disable=SC2046 # split into fields
set -- $(node_cli cluster nodes | grep myself)
[ "$#" -ge 4 ] || exit 0
case $3 in *master*) ;; *) exit 0 ;; esac
myself=$1

# The first replica of this master that is not failing: its ip:port.
replica=$(node_cli cluster nodes | while read -r _ addr flags master _; do
  [ "$master" = "$myself" ] || continue
  case $flags in *fail* | *noaddr*) continue ;; esac
  echo "${addr%%@*}"
  break
done)
[ -n "$replica" ] || exit 0
redis-cli -h "${replica%:*}" -p "${replica##*:}" cluster failover 2>/dev/null | grep -q OK || exit 0

i=0
until node_cli cluster nodes | grep myself | grep -q slave; do
  i=$((i + 1))
  [ "$i" -le 20 ] || exit 0
  sleep 0.5
done
echo "redis-cluster-handover: $me handed its slots to $replica"
