#!/usr/bin/env bash
# Stops drover's test Kubernetes cluster (up.sh) and removes everything it
# left on the host: its processes (the components, the containerd shims and
# every process of every pod), the mounts under the state dir (pod volumes,
# container root filesystems, network namespaces, the kubelet's bind
# mount), the kubepods cgroups, the bridge and the pods' veths, the
# iptables rules and chains of the CNI plugins and up.sh, and the runtime
# state (etcd data, containerd's root and state, the kubelet's dir).
#
# Keeps in the state dir: the certificates and the token (pki/, so clients
# configured once keep working), the registry's storage (a cache of pushed
# images) and the logs of the last run (logs/). `down.sh --purge` removes the
# state dir entirely.
#
# Then checks that nothing is left and exits 1, listing what is, if
# something is. Safe to run when nothing is up.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

purge=0
[ "${1:-}" = --purge ] && purge=1

if [ ! -d "$STATE" ]; then
  log "nothing to stop: no $STATE"
  exit 0
fi
lock
log "stopping the test cluster in $STATE"
t0=$EPOCHREALTIME
step() { echo "-- $* ($(elapsed))"; }
elapsed() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

# our_pids prints the pids of the components of the cluster of $STATE,
# found by their executable and a $STATE path in their command line: also
# those whose pid file is lost (an up.sh killed half-way).
our_pids() {
  local p exe cmd
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "${exe##*/}" in
      registry|etcd|containerd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet) ;;
      *) continue ;;
    esac
    cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
    case "$cmd" in *"$STATE/"*) echo "${p#/proc/}" ;; esac
  done
}

# stop name...: SIGTERM to each component, up to 10s for all of them to
# exit, then SIGKILL.
stop() {
  local name pid pids=() i
  for name in "$@"; do
    if pid=$(pidof_component "$name"); then
      step "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$RUN/$name.pid"
  done
  [ ${#pids[@]} = 0 ] && return 0
  local alive
  for i in $(seq 150); do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    [ ${#alive[@]} = 0 ] && return 0
    if [ "$i" = 100 ]; then
      step "still running after 10s, SIGKILL: ${alive[*]}"
      kill -KILL "${alive[@]}" 2>/dev/null || true
    fi
    pids=("${alive[@]}")
    sleep 0.1
  done
  step "!! did not exit: ${alive[*]}"
}

# pod_pids prints the pids in the kubepods cgroups.
pod_pids() {
  local d
  for d in $(kubepods_cgroups); do
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}

# shim_pids prints the pids of the containerd shims of our containerd.
shim_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
    case "$cmd" in
      *containerd-shim*" -address $CTRD_SOCK "*) echo "${p#/proc/}" ;;
    esac
  done
}

# kill_all tries what list: SIGKILL to the pids the function list prints,
# until it prints none, up to tries times 0.2s apart; what says what they
# are (once, with the pids).
kill_all() {
  local i pids
  for i in $(seq "$1"); do
    pids=$($3)
    [ -z "$pids" ] && break
    [ "$i" = 1 ] && step "$2: $(echo $pids)"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
}

# The kubelet first, so that it restarts nothing; then the pods; then the
# rest at once (all their state is deleted below, nothing to flush).
stop kubelet

# The pods' containers: through containerd while it runs (it unmounts their
# root filesystems and the shims exit), then whatever is left in the pod
# cgroups, by SIGKILL.
if pidof_component containerd >/dev/null && [ -S "$CTRD_SOCK" ]; then
  tasks=$(ctr -a "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null || true)
  if [ -n "$tasks" ]; then
    step "removing $(echo "$tasks" | wc -l) containers through containerd"
    for id in $tasks; do
      ctr -a "$CTRD_SOCK" -n k8s.io tasks rm -f "$id" >/dev/null 2>&1 || true
    done
  fi
fi
kill_all 50 "killing the processes left in the kubepods cgroups" pod_pids
stop kube-scheduler kube-controller-manager kube-apiserver etcd containerd registry
kill_all 25 "killing containerd shims" shim_pids
# Components whose pid file was lost.
pids=$(our_pids)
if [ -n "$pids" ]; then
  step "killing components without a pid file: $(echo $pids)"
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  sleep 0.5
fi

# Mounts: pod volumes (propagated from the kubelet's namespace through the
# shared bind mount), container root filesystems, network namespaces, and
# that bind mount itself; deepest first.
for i in 1 2 3; do
  mounts=$(state_mounts)
  [ -z "$mounts" ] && break
  [ "$i" = 1 ] && step "unmounting $(echo "$mounts" | wc -l) mounts under $STATE"
  while read -r m; do
    umount "$m" 2>/dev/null || { [ "$i" = 3 ] && umount -l "$m" 2>/dev/null; } || true
  done <<<"$mounts"
done

# Network: veths still on the bridge (their pod namespaces are gone, so
# normally none), the bridge, the CNI plugins' and up.sh's iptables rules.
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  for v in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}'); do
    ip link del "$v" 2>/dev/null || true
  done
  step "deleting bridge $BRIDGE"
  ip link del "$BRIDGE" 2>/dev/null || true
fi
{ iptables -t nat -S PREROUTING 2>/dev/null || true; } | { grep -- '--comment drover-kube' || true; } | sed 's/^-A/-D/' |
  while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null || true; done
# CNI-* chains (portmap's CNI-HOSTPORT-*, its per-pod CNI-DN-*): the rules
# that jump to them, then the chains.
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  for table in nat filter mangle; do
    chains=$("$ipt" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}') || true
    [ -z "$chains" ] && continue
    step "removing $ipt $table chains: $(echo $chains)"
    { "$ipt" -t "$table" -S 2>/dev/null || true; } | { grep -E '^-A .* -j CNI-' || true; } | sed 's/^-A/-D/' |
      while read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null || true; done
    for c in $chains; do "$ipt" -t "$table" -F "$c" 2>/dev/null || true; done
    for c in $chains; do "$ipt" -t "$table" -X "$c" 2>/dev/null || true; done
  done
done

# Cgroups, children first.
cgs=$(kubepods_cgroups)
if [ -n "$cgs" ]; then
  step "removing the kubepods cgroups"
  for i in 1 2 3 4 5; do
    for d in $cgs; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    [ -z "$(kubepods_cgroups)" ] && break
    sleep 0.5
  done
fi

# The kubelet links every container's log into /var/log/containers.
for l in /var/log/containers/*; do
  if [ -L "$l" ]; then
    case "$(readlink "$l")" in "$STATE"/*) rm -f "$l" ;; esac
  fi
done

if [ -f "$STATE/created-var-log-containers" ]; then
  rmdir /var/log/containers 2>/dev/null || true
  rm -f "$STATE/created-var-log-containers"
fi

step "removing runtime state (keeping pki/, registry/ and logs/)"
rm -rf "$STATE/etcd" "$CTRD_DIR" "$KUBELET_DIR" "$STATE/kubelet-pki" "$STATE/cni" "$STATE/pod-logs" \
  "$STATE/sysctl" "$CONF" "$RUN" "$ENV_FILE" "$STATE/admin.kubeconfig"

# What must be gone now.
left=()
for pid in $(our_pids) $(shim_pids) $(pod_pids); do
  left+=("process $pid: $({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)")
done
while read -r m; do [ -n "$m" ] && left+=("mount $m"); done <<<"$(state_mounts)"
while read -r c; do [ -n "$c" ] && left+=("cgroup $c"); done <<<"$(kubepods_cgroups)"
ip link show "$BRIDGE" >/dev/null 2>&1 && left+=("link $BRIDGE")
if [ ${#left[@]} -gt 0 ]; then
  echo "!! down.sh could not remove:" >&2
  printf '   %s\n' "${left[@]}" >&2
  exit 1
fi
if [ "$purge" = 1 ]; then
  step "removing $STATE"
  rm -rf "$STATE"
fi
log "test cluster down ($(elapsed))"
