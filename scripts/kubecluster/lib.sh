# Sourced by up.sh and down.sh: the layout of the state directory, the
# ports, and the helpers both use. See docs/KUBERNETES-TESTS.md.

STATE="${DROVER_KUBE_STATE:-/tmp/drover-kube}"
K8S_VERSION="${K8S_VERSION:-v1.31.14}"
CACHE="${DROVER_CACHE:-${DROVER_CACHE_DIR:-$HOME/.cache/drover}}"
K8S_BIN="$CACHE/k8s/$K8S_VERSION/bin"
REGISTRY_BIN="${DROVER_REGISTRY_BIN:-$CACHE/bin/registry}"

# Ports. The kubelet's (10250, 10248), the controller-manager's (10257) and
# the scheduler's (10259) are its defaults; together with the node name and
# the kubepods cgroups they make this one cluster per machine.
APISERVER_PORT=6443
ETCD_PORT=12379
ETCD_PEER_PORT=12380
REGISTRY_PORT="${DROVER_KUBE_REGISTRY_PORT:-5100}"
KUBELET_HEALTHZ_PORT=10248
CM_PORT=10257
SCHEDULER_PORT=10259

NODE_NAME=localhost
BRIDGE=drover-kube0
POD_SUBNET=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
PAUSE_IMAGE=localhost/drover-kube-pause:1

PKI="$STATE/pki"
LOGS="$STATE/logs"
RUN="$STATE/run"                 # pid files
CONF="$STATE/conf"               # generated configs (rewritten by every up)
CTRD_DIR="$STATE/containerd"
CTRD_SOCK="$CTRD_DIR/containerd.sock"
KUBELET_DIR="$STATE/kubelet"     # kubelet --root-dir, bind-mounted rshared
ENV_FILE="$STATE/cluster.env"
LOCK_FILE="$STATE/lock"

# Components in start order; down.sh stops them in reverse.
COMPONENTS=(registry etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)

# The daemons need iptables, mount, ip... whatever PATH the caller (go
# test) had.
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

log() { echo "== $*"; }
step() { echo "-- $*"; }

# lock takes the flock that serializes up.sh and down.sh (and so the
# callers internal/kubetest starts from several test binaries at once). A
# down.sh started by up.sh gets DROVER_KUBE_LOCK_HELD=1. fd 9 is closed
# for the daemons (start), or they would hold the lock forever.
lock() {
  mkdir -p "$STATE"
  [ "${DROVER_KUBE_LOCK_HELD:-}" = 1 ] && return 0
  exec 9>"$LOCK_FILE"
  if ! flock -n 9; then
    step "waiting for the lock $LOCK_FILE (another up.sh or down.sh)"
    flock -w 900 9 || { echo "!! could not take $LOCK_FILE in 900s" >&2; exit 1; }
  fi
  export DROVER_KUBE_LOCK_HELD=1
}

pidof_component() { # name: prints the pid if its pid file names a live process
  local f="$RUN/$1.pid" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

host_ip() { # the address the node and the kubernetes service advertise
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')
  [ -n "$ip" ] || ip=127.0.0.1
  echo "$ip"
}

admin_token() { cut -d, -f1 "$PKI/tokens.csv"; }

api() { # path [curl args...]: GET against the apiserver as the admin
  local path=$1; shift
  curl -fsS --max-time 5 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(admin_token)" \
    "https://127.0.0.1:$APISERVER_PORT$path" "$@"
}

node_ready() {
  # (The apiserver pretty-prints JSON for curl: squeeze the blanks out.)
  api "/api/v1/nodes/$NODE_NAME" 2>/dev/null | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
}

# kubepods_cgroups prints the kubelet's pod cgroup roots in every hierarchy
# (cgroup v1 controllers, the v1 named systemd one, the v2/unified one).
kubepods_cgroups() {
  local d
  for d in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do
    [ -d "$d" ] && echo "$d"
  done
  return 0
}

# state_mounts prints the mount points under $STATE, deepest first.
state_mounts() {
  awk -v s="$STATE/" '{ if (index($5 "/", s) == 1) print length($5), $5 }' /proc/self/mountinfo |
    sort -rn | cut -d' ' -f2- | uniq
}
