#!/bin/sh
# Starts one node of the gateway's Redis Cluster (deploy/compose.redis-cluster.yaml and
# deploy/k8s/redis-cluster.yaml, which carries a copy of this file).
#
#   redis-cluster-node.sh CONFIG [redis-server option...]
#
#   REDIS_CLUSTER_HOSTNAME  the name this node is reached by. Announced to clients (CLUSTER SLOTS,
#                           MOVED) in place of its IP, which changes when the container or pod is
#                           recreated (cluster-preferred-endpoint-type hostname in the config).
#   REDIS_CLUSTER_PEERS     every node of the cluster as host:port, comma-separated.
#   REDIS_PORT              this node's port (6379).
#
# The cluster bus still connects by IP, and each node remembers its peers' last IPs in
# nodes.conf. When every node comes back with a new IP (`docker compose down` then `up`, all pods
# rescheduled), no node reaches another and the cluster stays down. So a node that already
# belongs to a cluster meets every peer at the address its name resolves to now, every few
# seconds until it sees the cluster ok: CLUSTER MEET of a node it knows (the reply carries its
# ID) only updates that node's address. Whichever of two nodes starts later reaches the other.
# A replica also checks that it replicates from its master's new address.
set -eu
conf=$1
shift
port=${REDIS_PORT:-6379}
me=$REDIS_CLUSTER_HOSTNAME

node_cli() { redis-cli -h "$me" -p "$port" "$@" 2>/dev/null | tr -d '\r'; }

# A replica whose master's address changed through gossip keeps replicating from the old one
# (Redis re-points it only when it learns the address itself): point it again.
follow_master() {
  # shellcheck disable=SC2046 # split into fields
  set -- $(node_cli cluster nodes | grep myself)
  [ "$#" -ge 4 ] || return 0
  case $3 in *slave*) ;; *) return 0 ;; esac
  # shellcheck disable=SC2046 # split into fields
  set -- $(node_cli cluster nodes | grep "^$4 ")
  [ "$#" -gt 0 ] || return 0
  addr=${2%%@*}
  [ "$(node_cli info replication | sed -n 's/^master_host://p')" = "${addr%:*}" ] || node_cli cluster replicate "$1" >/dev/null || true
}

# Ok: the cluster serves every slot and, on a replica, the link to its master is up.
in_shape() {
  node_cli cluster info | grep -qx 'cluster_state:ok' || return 1
  case $(node_cli info replication) in *role:slave*) node_cli info replication | grep -qx 'master_link_status:up' ;; esac
}

rejoin() {
  i=0
  until node_cli ping | grep -q PONG; do
    i=$((i + 1))
    [ "$i" -le 120 ] || return 0
    sleep 1
  done
  # A node in no cluster yet is left alone: `redis-cli --cluster create` wants empty nodes.
  [ "$(node_cli cluster info | sed -n 's/^cluster_known_nodes://p')" != 1 ] || return 0
  i=0
  until in_shape; do
    # Stops when the node has stopped (or after 10 minutes).
    node_cli ping | grep -q PONG || return 0
    i=$((i + 1))
    [ "$i" -le 120 ] || return 0
    for peer in $(echo "$REDIS_CLUSTER_PEERS" | tr ',' ' '); do
      [ "${peer%:*}" != "$me" ] || continue
      # shellcheck disable=SC2046 # split into fields
      set -- $(getent ahosts "${peer%:*}" || true)
      [ "$#" -eq 0 ] || node_cli cluster meet "$1" "${peer##*:}" >/dev/null || true
    done
    sleep 5
    follow_master
  done
}

rejoin &
exec redis-server "$conf" --port "$port" --cluster-announce-hostname "$me" "$@"
