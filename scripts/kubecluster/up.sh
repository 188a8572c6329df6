#!/usr/bin/env bash
# Starts drover's test Kubernetes cluster: one node named "localhost", run
# from background processes with pid files and logs under
# ${DROVER_KUBE_STATE:-/tmp/drover-kube}: a registry (the node's image
# source), a containerd instance of its own with CRI and CNI (bridge), etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet in a
# mount namespace of its own (so its kernel tunables land on copies, not on
# the host). Waits for the node to be Ready and the default ServiceAccount,
# then writes $STATE/cluster.env (read by internal/kubetest).
#
# Idempotent: a cluster that is already up and healthy is left as is. A
# half-up one is torn down (down.sh) and started again. If a component
# fails to start, names its log, prints its last lines and tears down what
# it started (DROVER_KUBE_KEEP_ON_FAILURE=1 keeps it for a look).
#
# Builds nothing slow except through build.sh (cached). Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

t0=$SECONDS
since() { echo "$((SECONDS - t0))s"; }

# ---------------------------------------------------------------- checks
check_prereqs() {
  local missing=() b
  [ "$(id -u)" = 0 ] || missing+=("root (the kubelet and containerd need it)")
  for b in /usr/bin/containerd runc etcd openssl curl unshare flock setsid iptables ip mount; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  for b in bridge host-local portmap loopback; do
    [ -x "/usr/lib/cni/$b" ] || missing+=("/usr/lib/cni/$b (apt-get install containernetworking-plugins)")
  done
  command -v gcc >/dev/null 2>&1 || command -v busybox >/dev/null 2>&1 || missing+=("gcc or busybox (for the pause image)")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "!! cannot start the test cluster, missing:" >&2
    printf '   %s\n' "${missing[@]}" >&2
    echo "   (scripts/test.sh installs the packages: etcd-server containernetworking-plugins containerd runc openssl curl util-linux iptables iproute2 gcc libc6-dev)" >&2
    exit 1
  fi
}

healthy() {
  local c
  [ -f "$ENV_FILE" ] || return 1
  for c in "${COMPONENTS[@]}"; do pidof_component "$c" >/dev/null || return 1; done
  api /readyz >/dev/null 2>&1 || return 1
  curl -fsS --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" >/dev/null 2>&1 || return 1
  node_ready
}

anything_running() {
  local c
  for c in "${COMPONENTS[@]}"; do pidof_component "$c" >/dev/null && return 0; done
  [ -n "$(state_mounts)" ] && return 0
  [ -n "$(kubepods_cgroups)" ] && return 0
  ip link show "$BRIDGE" >/dev/null 2>&1 && return 0
  return 1
}

# ---------------------------------------------------------------- helpers
failed_component=""
fail() { # component message
  failed_component=$1
  echo "!! $1: $2 (after $(since))" >&2
  echo "!! log: $LOGS/$1.log, last lines:" >&2
  tail -n 40 "$LOGS/$1.log" 2>/dev/null | sed 's/^/   | /' >&2 || true
  exit 1
}

# start name cmd...: runs cmd in a session of its own, stdin from
# /dev/null, output to $LOGS/name.log, fd 9 (the lock) closed.
start() {
  local name=$1; shift
  step "starting $name (log $LOGS/$name.log)"
  setsid "$@" </dev/null >"$LOGS/$name.log" 2>&1 9>&- &
  echo $! >"$RUN/$name.pid"
}

# wait_for name[:what] timeout check...: polls check until it succeeds
# ("name ready", or "what" when given); fails, naming the log of the
# component, if its process exits or the timeout passes.
wait_for() {
  local name=${1%%:*} what="$1 ready" timeout=$2
  case "$1" in *:*) what=${1#*:} ;; esac
  shift 2
  local pid deadline=$((SECONDS + timeout))
  pid=$(cat "$RUN/$name.pid")
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || fail "$name" "exited before: $what"
    [ "$SECONDS" -lt "$deadline" ] || fail "$name" "not after ${timeout}s: $what"
    sleep 0.2
  done
  step "$what ($(since))"
}

on_exit() {
  local rc=$?
  [ "$rc" = 0 ] && return 0
  if [ "${DROVER_KUBE_KEEP_ON_FAILURE:-}" = 1 ]; then
    echo "!! up.sh failed; DROVER_KUBE_KEEP_ON_FAILURE=1: leaving it as is (scripts/kubecluster/down.sh cleans up)" >&2
  else
    echo "!! up.sh failed${failed_component:+ ($failed_component)}: tearing down what it started (logs stay in $LOGS)" >&2
    "$here/down.sh" >&2 || true
  fi
  exit "$rc"
}

# ---------------------------------------------------------------- pki
# cert name subject extensions: an EC P-256 key and a certificate signed by
# the cluster CA.
cert() {
  local name=$1 subj=$2 ext=$3
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
  printf '%b\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

gen_pki() {
  [ -f "$PKI/done" ] && return 0
  step "generating certificates, the service-account key and the admin token in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
  printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash\n' >"$PKI/ca.ext"
  openssl req -new -key "$PKI/ca.key" -subj "/CN=drover-kube-ca" |
    openssl x509 -req -signkey "$PKI/ca.key" -days 3650 -sha256 -extfile "$PKI/ca.ext" -out "$PKI/ca.crt" 2>/dev/null
  rm -f "$PKI/ca.ext"
  local client='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
  cert apiserver "/CN=kube-apiserver" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,IP:$(host_ip)"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  cert controller-manager "/CN=system:kube-controller-manager" "$client"
  cert scheduler "/CN=system:kube-scheduler" "$client"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
  echo "$(openssl rand -hex 24),drover-admin,drover-admin,system:masters" >"$PKI/tokens.csv"
  touch "$PKI/done"
}

kubeconfig() { # file user [cert key | token]
  local file=$1 user=$2
  {
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    echo "- name: drover-kube"
    echo "  cluster:"
    echo "    server: https://127.0.0.1:$APISERVER_PORT"
    echo "    certificate-authority: $PKI/ca.crt"
    echo "users:"
    echo "- name: $user"
    echo "  user:"
    if [ $# = 4 ]; then
      echo "    client-certificate: $3"
      echo "    client-key: $4"
    else
      echo "    token: $3"
    fi
    echo "contexts:"
    echo "- name: drover-kube"
    echo "  context:"
    echo "    cluster: drover-kube"
    echo "    user: $user"
    echo "    namespace: default"
    echo "current-context: drover-kube"
  } >"$file.tmp"
  mv "$file.tmp" "$file"
}

# ---------------------------------------------------------------- configs
write_configs() {
  mkdir -p "$CONF" "$CONF/cni" "$CTRD_DIR/certs.d/127.0.0.1:$REGISTRY_PORT" "$STATE/cni/ipam" "$STATE/pod-logs" "$STATE/sysctl"
  kubeconfig "$CONF/controller-manager.kubeconfig" system:kube-controller-manager "$PKI/controller-manager.crt" "$PKI/controller-manager.key"
  kubeconfig "$CONF/scheduler.kubeconfig" system:kube-scheduler "$PKI/scheduler.crt" "$PKI/scheduler.key"
  kubeconfig "$CONF/kubelet.kubeconfig" "system:node:$NODE_NAME" "$PKI/kubelet.crt" "$PKI/kubelet.key"

  cat >"$CONF/registry.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $STATE/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
EOF

  # Its own root, state, socket, opt dir and runc root: nothing shared
  # with Docker's containerd. Network namespaces are mounted under the
  # state dir too (netns_mounts_under_state_dir), so down.sh finds them.
  cat >"$CONF/containerd.toml" <<EOF
version = 2
root = "$CTRD_DIR/root"
state = "$CTRD_DIR/state"

[grpc]
  address = "$CTRD_SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD_DIR/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  # No CAP_SYS_RESOURCE on these hosts: runc cannot lower a process's
  # oom_score_adj (the sandbox's -998 would fail every pod), so cap it at
  # containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$CTRD_DIR/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CONF/cni"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CTRD_DIR/certs.d"
EOF

  # Plain HTTP to the local registry.
  cat >"$CTRD_DIR/certs.d/127.0.0.1:$REGISTRY_PORT/hosts.toml" <<EOF
server = "http://127.0.0.1:$REGISTRY_PORT"

[host."http://127.0.0.1:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
EOF

  # No ipMasq: pods need no way out, and it would leave per-pod NAT rules.
  cat >"$CONF/cni/10-drover-kube.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "drover-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  # Eviction thresholds near zero and image GC off: a full-ish disk must
  # not evict the tests' pods or delete their images. No iptables util
  # chains: nothing here needs them and down.sh would have to remove them.
  cat >"$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTRD_SOCK
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: AlwaysAllow
podLogsDir: $STATE/pod-logs
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
maxPods: 110
EOF
}

# ---------------------------------------------------------------- pause
# The sandbox image, built here (no registry.k8s.io): a static pause
# binary in a one-layer OCI archive, imported into the containerd instance.
pause_image() {
  local dir="$CONF/pause" d
  rm -rf "$dir"; mkdir -p "$dir/rootfs" "$dir/oci/blobs/sha256"
  if command -v gcc >/dev/null 2>&1; then
    gcc -static -Os -o "$dir/rootfs/pause" "$here/pause.c"
  else
    cp "$(command -v busybox)" "$dir/rootfs/busybox"
    printf '#!/busybox sh\nexec /busybox sleep 2147483647\n' >"$dir/rootfs/pause"
    chmod 755 "$dir/rootfs/pause"
  fi
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$dir/rootfs" -cf "$dir/layer.tar" .
  blob() { # file: moves it into the layout, prints "digest size"
    local sum size
    sum=$(sha256sum "$1" | cut -d' ' -f1); size=$(stat -c %s "$1")
    mv "$1" "$dir/oci/blobs/sha256/$sum"
    echo "sha256:$sum $size"
  }
  local layer config manifest
  layer=$(blob "$dir/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' "${layer% *}" >"$dir/config.json"
  config=$(blob "$dir/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
    "${config% *}" "${config#* }" "${layer% *}" "${layer#* }" >"$dir/manifest.json"
  manifest=$(blob "$dir/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"1"}}]}' \
    "${manifest% *}" "${manifest#* }" "$PAUSE_IMAGE" >"$dir/oci/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci/oci-layout"
  tar -C "$dir/oci" -cf "$dir/pause.tar" .
  ctr -a "$CTRD_SOCK" -n k8s.io images import "$dir/pause.tar" >/dev/null
  step "pause image $PAUSE_IMAGE imported ($(since))"
}

# ---------------------------------------------------------------- main
check_prereqs
lock
mkdir -p "$LOGS" "$RUN"
if healthy; then
  log "cluster already up: $ENV_FILE"
  cat "$ENV_FILE"
  exit 0
fi
trap on_exit EXIT
if anything_running; then
  log "a cluster that is not healthy is running: tearing it down first"
  "$here/down.sh"
fi
log "starting the test cluster in $STATE"
mkdir -p "$LOGS" "$RUN"   # (again: down.sh removes $RUN)
"$here/build.sh"
if [ ! -x "$REGISTRY_BIN" ]; then
  step "installing distribution's registry into $(dirname "$REGISTRY_BIN")"
  GOBIN="$(dirname "$REGISTRY_BIN")" go install github.com/distribution/distribution/v3/cmd/registry@latest
fi
gen_pki
HOST_IP=$(host_ip)
write_configs
rm -f "$ENV_FILE" "$LOGS"/*.log

start registry "$REGISTRY_BIN" serve "$CONF/registry.yml"
start etcd etcd --name drover-kube --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "drover-kube=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync
start containerd /usr/bin/containerd --config "$CONF/containerd.toml"
wait_for registry 30 curl -fsS --max-time 2 "http://127.0.0.1:$REGISTRY_PORT/v2/"
wait_for etcd 30 curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --secure-port="$APISERVER_PORT" --advertise-address="$HOST_IP" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --profiling=false

wait_for containerd 30 ctr -a "$CTRD_SOCK" version
pause_image

wait_for kube-apiserver 90 api /readyz
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig="$CONF/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CONF/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CONF/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$CM_PORT" --leader-elect=false \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --profiling=false
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$CONF/scheduler.kubeconfig" \
  --authentication-kubeconfig="$CONF/scheduler.kubeconfig" \
  --authorization-kubeconfig="$CONF/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false --profiling=false

# The kubelet links the containers' logs into /var/log/containers (not
# configurable): if up.sh creates that directory, down.sh removes it.
if [ ! -d /var/log/containers ]; then
  mkdir -p /var/log/containers
  touch "$STATE/created-var-log-containers"
fi

# The kubelet's root dir is a shared bind mount, so the volumes the kubelet
# mounts in its own mount namespace show up where containerd looks.
mkdir -p "$KUBELET_DIR"
if ! mountpoint -q "$KUBELET_DIR"; then
  mount --bind "$KUBELET_DIR" "$KUBELET_DIR"
fi
mount --make-rshared "$KUBELET_DIR"
# The kubelet sets these kernel tunables at start: in its mount namespace
# they are bind-mounted copies, so the host keeps its values.
sysctls="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
for f in $sysctls; do cat "/proc/sys/$f" >"$STATE/sysctl/${f//\//.}"; done
start kubelet unshare --mount --propagation unchanged -- /bin/sh -euc '
  state=$1 sysctls=$2; shift 2
  mount --make-rprivate /proc
  for f in $sysctls; do
    mount --bind "$state/sysctl/$(echo "$f" | tr / .)" "/proc/sys/$f"
  done
  exec "$@"
' kubelet "$STATE" "$sysctls" "$K8S_BIN/kubelet" \
  --config="$CONF/kubelet.yaml" --kubeconfig="$CONF/kubelet.kubeconfig" \
  --hostname-override="$NODE_NAME" --node-ip="$HOST_IP" \
  --root-dir="$KUBELET_DIR" --cert-dir="$STATE/kubelet-pki"

wait_for kube-controller-manager 60 curl -fsSk --max-time 2 "https://127.0.0.1:$CM_PORT/healthz"
wait_for kube-scheduler 60 curl -fsSk --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz"
wait_for kubelet 60 curl -fsS --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"

# No kube-proxy: one DNAT rule makes the kubernetes service reachable from
# pods (in-cluster clients), to the apiserver's advertised address.
dnat=(-t nat -p tcp -d "$KUBERNETES_SVC_IP" --dport 443 -m comment --comment drover-kube -j DNAT --to-destination "$HOST_IP:$APISERVER_PORT")
iptables -C PREROUTING "${dnat[@]}" 2>/dev/null || iptables -A PREROUTING "${dnat[@]}"

wait_for "kubelet:node $NODE_NAME Ready" 90 node_ready
wait_for "kube-controller-manager:default ServiceAccount created" 60 api /api/v1/namespaces/default/serviceaccounts/default

kubeconfig "$STATE/admin.kubeconfig" drover-admin "$(admin_token)"
cat >"$ENV_FILE.tmp" <<EOF
# drover's test Kubernetes cluster (scripts/kubecluster/up.sh), read by internal/kubetest.
DROVER_KUBE_STATE=$STATE
DROVER_KUBE_HOST=https://127.0.0.1:$APISERVER_PORT
DROVER_KUBE_CA_FILE=$PKI/ca.crt
DROVER_KUBE_TOKEN=$(admin_token)
DROVER_KUBE_KUBECONFIG=$STATE/admin.kubeconfig
DROVER_KUBE_REGISTRY=127.0.0.1:$REGISTRY_PORT
DROVER_KUBE_NODE=$NODE_NAME
DROVER_KUBE_VERSION=$K8S_VERSION
EOF
mv "$ENV_FILE.tmp" "$ENV_FILE"
log "cluster up in $(since): $ENV_FILE"
cat "$ENV_FILE"
