#!/bin/sh
# Creates the gateway's Redis Cluster once: three masters and a replica of each. Run by the
# one-shot `redis-cluster-create` of deploy/compose.redis-cluster.yaml (at every `up`) and by the
# Job of deploy/k8s/redis-cluster.yaml (which carries a copy of this file).
#
#   REDIS_CLUSTER_PEERS  every node as host:port, comma-separated (six)
#   REDIS_CLUSTER_WAIT   seconds to wait for the nodes, then for the cluster (300)
#
# Runs again harmlessly:
# - every node empty (knows only itself, serves no slot): creates the cluster;
# - any node already in a cluster: creates nothing. A node that is empty while the cluster
#   exists lost its data (nodes.conf): it is reported, not added back by guesswork.
# Either way it returns once every node of the cluster sees cluster_state:ok and every replica
# has synced with its master (a replica that never synced cannot take over, and WAIT 1 on its
# master times out): the services started after it find a working cluster.
set -eu
wait_s=${REDIS_CLUSTER_WAIT:-300}
nodes=$(echo "$REDIS_CLUSTER_PEERS" | tr ',' ' ')
deadline=$(($(date +%s) + wait_s))

cli() {
  node=$1
  shift
  redis-cli -h "${node%:*}" -p "${node##*:}" "$@" 2>/dev/null | tr -d '\r'
}
field() { cli "$1" cluster info | sed -n "s/^$2://p"; }
answers() { cli "$1" ping | grep -q PONG; }
empty() { [ "$(field "$1" cluster_known_nodes)" = 1 ] && [ "$(field "$1" cluster_slots_assigned)" = 0 ]; }
cluster_ok() { [ "$(field "$1" cluster_state)" = ok ]; }
synced() {
  case $(cli "$1" info replication) in
    *role:master*) return 0 ;;
    *master_link_status:up*) return 0 ;;
  esac
  return 1
}
# wait_for WHAT CHECK NODE: until CHECK NODE succeeds, or exit 1 at the deadline.
wait_for() {
  until "$2" "$3"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "redis-cluster-create: $3 $1: still not after ${wait_s}s" >&2
      exit 1
    fi
    sleep 1
  done
}

for n in $nodes; do wait_for 'answers PING' answers "$n"; done

fresh=''
joined=''
for n in $nodes; do
  if empty "$n"; then fresh="$fresh $n"; else joined="$joined $n"; fi
done
if [ -z "$joined" ]; then
  echo "redis-cluster-create: creating the cluster on $nodes"
  # shellcheck disable=SC2086 # one argument per node
  redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes
  joined=$nodes
elif [ -n "$fresh" ]; then
  echo "redis-cluster-create: the cluster exists; empty, not in it:$fresh. Add each back as a replica: redis-cli --cluster add-node NODE MEMBER --cluster-slave" >&2
else
  echo 'redis-cluster-create: the cluster exists'
fi

for n in $joined; do
  wait_for 'sees cluster_state:ok' cluster_ok "$n"
  wait_for 'has synced with its master' synced "$n"
done
echo 'redis-cluster-create: cluster ok, every replica synced'
