#!/usr/bin/env bash
# real-node-1: a second real node of the local cluster, booted the way kind
# boots its nodes — a systemd-nspawn machine whose PID 1 is systemd, with
# containerd, kubelet and kube-proxy (the binaries in _output/bin, bound
# read-only at /opt/lull/bin) as systemd units. lull-agent runs there from
# manifests/agent with its production commands (systemctl restart, reboot,
# poweroff), and the machine ships a harmless unit to restart,
# lull-tour.service, which appends each start's InvocationID to
# /var/lib/lull-tour/starts. hack/local-up.d/40-real-node-1.sh runs `up`,
# hack/local-down.sh runs `down`.
#
#   hack/real-node-1.sh rootfs     build (or reuse) the cached root file system
#   hack/real-node-1.sh up         boot it into the running local cluster
#   hack/real-node-1.sh start      power it on again after a poweroff inside
#   hack/real-node-1.sh down       stop it and remove every trace of it
#   hack/real-node-1.sh shell CMD  run CMD inside the machine (nsenter)
#   hack/real-node-1.sh supervise  (internal) the boot loop
#
# The root file system is Debian's (REAL_NODE_1_DEBIAN in versions.env,
# made by mmdebstrap from Debian's packages), cached in
# _output/real-node-1/rootfs with a stamp of the release, the package list
# and this script's builder; each cluster boots a copy of it in
# $DIR/real-node-1/root, so a reboot keeps the machine's disk and a new
# cluster starts from a clean one.
#
# The machine sits on the cluster's bridge ($NODE_BRIDGE) with the address
# 10.244.0.241, outside real-node-0's pod range (host-local there stops at
# .239); its pods get 10.244.1.0/24 on a bridge of their own inside it. This
# machine routes 10.244.1.0/24 to it (so the API server answers its pods);
# nothing is routed or masqueraded beyond this machine, and the host's IP
# forwarding is left as it is.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
# shellcheck source=lib/cluster.sh
source "${ROOT}/hack/lib/cluster.sh"
# shellcheck source=lib/node.sh
source "${ROOT}/hack/lib/node.sh"
log() { echo "real-node-1: $*"; }
die() { echo "real-node-1: error: $*" >&2; exit 1; }

M_NAME=real-node-1
M_IP=10.244.0.241
M_POD_CIDR=10.244.1.0/24
M_POD_GW=10.244.1.1
M_CGROUP=lull-real-node-1          # the kubelet's cgroupRoot inside
M_CGROUP_MACHINE=real-node-1.machine   # the machine's own (hack/real-node-1.sh supervise)
M_VETH=vb-${M_NAME}      # systemd-nspawn's host side of --network-bridge
M_INIT_LABEL=lull.dev/local-init
M_PACKAGES=systemd,systemd-sysv,dbus,iproute2,iptables,conntrack,ca-certificates,util-linux,mount,kmod,procps,chrony
CACHE="${ROOT}/_output/real-node-1"
# The API server listens on the node bridge when the cluster has a real node.
API_ADDR=${API_ADDR:-$NODE_IP}
cluster_paths
# The supervisor loop (started by this script) finds the same cluster.
export LULL_CLUSTER_DIR="$DIR" LULL_BIN_DIR="$BIN"
M_DIR="$DIR/real-node-1"
M_ROOT="$M_DIR/root"

# rootfs_build DIR: Debian's packages only, through mmdebstrap (apt and its
# configuration, so it uses this machine's Debian mirror). Part of the
# cache stamp: change it and the next run rebuilds.
rootfs_build() {
  local dir=$1
  mmdebstrap --quiet --variant=minbase --include="$M_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/{doc,man,locale}/*' \
    "$REAL_NODE_1_DEBIAN" "$dir"
  # The machine has no console to log in on and nothing to resolve.
  ln -sf /dev/null "$dir/etc/systemd/system/getty.target"
  ln -sf /dev/null "$dir/etc/systemd/system/systemd-resolved.service"
  rm -f "$dir/etc/machine-id" "$dir/etc/hostname"
  # chronyd, for the shipped policy's chrony-config class (RestartService
  # chronyd): it must never set the clock, which is this machine's (-x),
  # and has no time source to reach.
  printf '# hack/real-node-1.sh: never set the clock (it is the host'"'"'s)\nDAEMON_OPTS="-x"\n' >"$dir/etc/default/chrony"
  printf '# hack/real-node-1.sh: no time sources (nothing beyond this machine)\ndriftfile /var/lib/chrony/chrony.drift\ncmdport 0\n' >"$dir/etc/chrony/chrony.conf"
}

rootfs_stamp() {
  echo "debian=${REAL_NODE_1_DEBIAN} packages=${M_PACKAGES} mmdebstrap=$(mmdebstrap --version 2>/dev/null | head -1) builder=$(declare -f rootfs_build | sha256sum | cut -c1-16)"
}

# rootfs: the cached root file system, built once per stamp.
rootfs() {
  "${ROOT}/hack/install-deps.sh" machine
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock"
  flock 8
  local want; want=$(rootfs_stamp)
  if [[ -d "$CACHE/rootfs" && -f "$CACHE/rootfs.stamp" && "$(cat "$CACHE/rootfs.stamp")" == "$want" ]]; then
    log "root file system (Debian ${REAL_NODE_1_DEBIAN}) is current"
    return 0
  fi
  log "building the root file system: Debian ${REAL_NODE_1_DEBIAN} with mmdebstrap ..."
  local start=$SECONDS
  rm -rf "$CACHE/rootfs" "$CACHE/rootfs.tmp" "$CACHE/rootfs.stamp"
  mkdir -p "$CACHE/rootfs.tmp"
  rootfs_build "$CACHE/rootfs.tmp" >"$CACHE/rootfs.build.log" 2>&1 ||
    { tail -n 20 "$CACHE/rootfs.build.log" >&2; die "mmdebstrap failed; see $CACHE/rootfs.build.log"; }
  mv "$CACHE/rootfs.tmp" "$CACHE/rootfs"
  echo "$want" >"$CACHE/rootfs.stamp"
  log "root file system built in $((SECONDS - start))s ($(du -sh "$CACHE/rootfs" | cut -f1))"
}

# can_boot: why this machine cannot boot real-node-1, or nothing.
cannot_boot() {
  [[ $(id -u) -eq 0 ]] || { echo "it needs root"; return; }
  [[ -f "$PIDS/kubelet.pid" ]] || { echo "the cluster has no real node (LULL_REAL_NODE=1): real-node-1 joins on its bridge"; return; }
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || { echo "the cluster's bridge $NODE_BRIDGE is missing"; return; }
  "${ROOT}/hack/install-deps.sh" machine >/dev/null 2>&1 || { echo "systemd-nspawn and mmdebstrap are missing and could not be installed (apt-get install systemd-container mmdebstrap)"; return; }
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    [[ -w /sys/fs/cgroup ]] || { echo "no write access to the cgroup hierarchy (/sys/fs/cgroup)"; return; }
  else
    local c
    for c in cpu memory pids; do
      [[ -w "/sys/fs/cgroup/$c" ]] || { echo "no write access to the cgroup controller /sys/fs/cgroup/$c"; return; }
    done
  fi
  if ip link show "$M_VETH" >/dev/null 2>&1; then echo "interface $M_VETH exists (another real-node-1 runs?)"; return; fi
  if ip -4 route show to match "$M_POD_GW" | grep -v '^default' | grep -q .; then
    echo "$M_POD_CIDR is already routed on this machine ($(ip -4 route show to match "$M_POD_GW" | grep -v '^default' | head -1))"; return
  fi
}

# kubeconfig_embedded FILE CERT KEY: a kubeconfig that carries its
# certificates, so it works inside the machine.
kubeconfig_embedded() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: lull-local
  cluster:
    server: https://${NODE_IP}:${API_PORT}
    certificate-authority-data: $(base64 -w0 "$CERTS/ca.crt")
users:
- name: node
  user:
    client-certificate-data: $(base64 -w0 "$2")
    client-key-data: $(base64 -w0 "$3")
contexts:
- name: lull-local
  context: {cluster: lull-local, user: node}
current-context: lull-local
KC
}

# unit NAME: writes ROOT/etc/systemd/system/NAME from stdin and enables it
# for multi-user.target.
unit() {
  cat >"$M_ROOT/etc/systemd/system/$1"
  if grep -q '^WantedBy=multi-user.target' "$M_ROOT/etc/systemd/system/$1"; then
    mkdir -p "$M_ROOT/etc/systemd/system/multi-user.target.wants"
    ln -sf "../$1" "$M_ROOT/etc/systemd/system/multi-user.target.wants/$1"
  fi
}

script() { # script PATH: an executable from stdin inside the machine
  cat >"$M_ROOT$1"
  chmod 0755 "$M_ROOT$1"
}

# prepare: this cluster's copy of the root file system, its identity,
# certificates, configuration, units and the images it runs.
prepare() {
  local start=$SECONDS
  rm -rf "$M_DIR"
  mkdir -p "$M_DIR"
  cp -a --reflink=auto "$CACHE/rootfs" "$M_ROOT"
  echo "$M_NAME" >"$M_ROOT/etc/hostname"
  printf '127.0.0.1 localhost\n%s %s\n' "$M_IP" "$M_NAME" >"$M_ROOT/etc/hosts"
  tr -d - </proc/sys/kernel/random/uuid >"$M_ROOT/etc/machine-id"
  mkdir -p "$M_ROOT/etc/lull" "$M_ROOT/etc/cni/net.d" "$M_ROOT/var/tmp/lull-images" "$M_ROOT/opt/lull/bin"

  client_cert "kubelet-${M_NAME}" "system:node:${M_NAME}" "system:nodes"
  cp "$CERTS/ca.crt" "$M_ROOT/etc/lull/ca.crt"
  kubeconfig_embedded "$M_ROOT/etc/lull/kubelet.kubeconfig" "$CERTS/kubelet-${M_NAME}.crt" "$CERTS/kubelet-${M_NAME}.key"
  kubeconfig_embedded "$M_ROOT/etc/lull/kube-proxy.kubeconfig" "$CERTS/kube-proxy.crt" "$CERTS/kube-proxy.key"

  cat >"$M_ROOT/etc/lull/containerd.toml" <<EOF
version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
disabled_plugins = ['io.containerd.nri.v1.nri']
[grpc]
  address = '/run/containerd/containerd.sock'
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'lull.dev/pause:${PAUSE_VERSION}'
  [plugins.'io.containerd.cri.v1.runtime']
    # A negative oom_score_adj is forbidden here (see hack/lib/node.sh).
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '/opt/lull/bin/runc'
      # systemd-nspawn's system call filter refuses keyrings: without this
      # every sandbox fails ("unable to join session keyring").
      NoNewKeyring = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/opt/lull/bin/cni']
      conf_dir = '/etc/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
EOF
  # Pods on a bridge of their own; the IPAM state in /run, which every boot
  # empties, as every boot ends every pod.
  cat >"$M_ROOT/etc/cni/net.d/10-lull.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lull",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni/ipam",
        "ranges": [[{"subnet": "$M_POD_CIDR", "gateway": "$M_POD_GW"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "10.244.0.0/16"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
  # Not real-node-0's /lull: the machine's controllers other than memory
  # see the host's root cgroup. No resolv.conf: nothing outside to ask.
  kubelet_config "$M_IP" /etc/lull/ca.crt unix:///run/containerd/containerd.sock "/$M_CGROUP" "" \
    >"$M_ROOT/etc/lull/kubelet.yaml"
  kube_proxy_config /etc/lull/kube-proxy.kubeconfig "$M_NAME" "$M_POD_CIDR" "$M_IP" 10249 10256 \
    >"$M_ROOT/etc/lull/kube-proxy.yaml"

  script /usr/local/sbin/lull-net <<EOF
#!/bin/sh
# The machine's address on the cluster's bridge; IP forwarding in its own
# network namespace, for its pods.
set -e
ip link set lo up
ip addr replace $M_IP/24 dev host0
ip link set host0 up
sysctl -qw net.ipv4.ip_forward=1
EOF
  script /usr/local/sbin/lull-cgroups <<EOF
#!/bin/sh
# systemd-nspawn mounts the cgroup v1 controllers read-only; the kubelet
# needs them writable and its cgroup root present.
for d in /sys/fs/cgroup/*/; do
  case "\$d" in */unified/) continue ;; esac
  mount -o remount,bind,rw "\$d" 2>/dev/null || true
  mkdir -p "\${d}$M_CGROUP"
  if [ -f "\${d}cpuset.cpus" ]; then
    cat "\${d}cpuset.cpus" >"\${d}$M_CGROUP/cpuset.cpus"
    cat "\${d}cpuset.mems" >"\${d}$M_CGROUP/cpuset.mems"
  fi
done
EOF
  script /usr/local/sbin/lull-images <<'EOF'
#!/bin/sh
# Nothing can be pulled: the images the node runs were built on the host.
set -e
for f in /var/tmp/lull-images/*.tar; do
  /opt/lull/bin/ctr -n k8s.io images import --no-unpack=false "$f" >/dev/null
done
EOF
  script /usr/local/sbin/lull-tour <<'EOF'
#!/bin/sh
# Records this start (systemd gives every start its own InvocationID), then
# idles until stopped.
echo "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) $INVOCATION_ID" >>/var/lib/lull-tour/starts
exec sleep infinity
EOF

  unit lull-net.service <<'EOF'
[Unit]
Description=lull: the machine's address on the cluster bridge
Before=containerd.service kubelet.service kube-proxy.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/lull-net
[Install]
WantedBy=multi-user.target
EOF
  unit lull-cgroups.service <<'EOF'
[Unit]
Description=lull: writable cgroup controllers and the kubelet's cgroup root
Before=containerd.service kubelet.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/lull-cgroups
[Install]
WantedBy=multi-user.target
EOF
  unit containerd.service <<'EOF'
[Unit]
Description=containerd
After=lull-net.service lull-cgroups.service
Wants=lull-net.service lull-cgroups.service
[Service]
Type=notify
Environment=PATH=/opt/lull/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=/opt/lull/bin/containerd --config /etc/lull/containerd.toml --log-level warn
Delegate=yes
KillMode=process
Restart=always
RestartSec=2
LimitNOFILE=infinity
[Install]
WantedBy=multi-user.target
EOF
  unit lull-images.service <<'EOF'
[Unit]
Description=lull: import the images built on the host into containerd
Requires=containerd.service
After=containerd.service
Before=kubelet.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/lull-images
[Install]
WantedBy=multi-user.target
EOF
  unit kubelet.service <<EOF
[Unit]
Description=kubelet
Requires=containerd.service
After=containerd.service lull-images.service lull-net.service lull-cgroups.service
[Service]
ExecStart=/opt/lull/bin/kubelet --config=/etc/lull/kubelet.yaml --kubeconfig=/etc/lull/kubelet.kubeconfig --root-dir=/var/lib/kubelet --cert-dir=/var/lib/kubelet/pki --hostname-override=$M_NAME --node-ip=$M_IP --node-labels=type=real,$M_INIT_LABEL=systemd --v=1
Restart=always
RestartSec=2
[Install]
WantedBy=multi-user.target
EOF
  unit kube-proxy.service <<'EOF'
[Unit]
Description=kube-proxy
After=lull-net.service
[Service]
ExecStart=/opt/lull/bin/kube-proxy --config=/etc/lull/kube-proxy.yaml --v=1
Restart=always
RestartSec=2
[Install]
WantedBy=multi-user.target
EOF
  unit lull-tour.service <<'EOF'
[Unit]
Description=lull tour: a harmless unit to restart; each start appends its InvocationID to /var/lib/lull-tour/starts
[Service]
StateDirectory=lull-tour
ExecStart=/usr/local/sbin/lull-tour
[Install]
WantedBy=multi-user.target
EOF

  cp "${ROOT}/_output/images/pause-${PAUSE_VERSION}.tar" "${ROOT}/_output/images/lull-agent-${LULL_VERSION}.tar" "$M_ROOT/var/tmp/lull-images/"
  log "machine prepared in $((SECONDS - start))s ($M_ROOT)"
}

# supervise: boots the machine, and again whenever it asks for a reboot
# (systemd-nspawn exits 133); a power-off (exit 0) ends the loop. SIGTERM
# shuts the machine down in order (systemd-nspawn passes it on to systemd
# as SIGRTMIN+3) and ends the loop.
supervise() {
  local stopping=0 rc npid boot=0 own
  # A cgroup of its own in the named systemd hierarchy and the unified one,
  # where systemd-nspawn (--keep-unit: there is no host systemd to ask) makes
  # the machine's "payload" cgroup and the machine's systemd its slices:
  # `down` removes the whole tree.
  local h d
  for h in systemd unified; do
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    [[ $h == systemd ]] && own=$(sed -n 's/^[0-9]*:name=systemd://p' /proc/self/cgroup)
    d=/sys/fs/cgroup/$h
    [[ -f /sys/fs/cgroup/cgroup.controllers ]] && { [[ $h == unified ]] || continue; d=/sys/fs/cgroup; }
    mountpoint -q "$d" || continue
    { mkdir -p "$d${own%/}/$M_CGROUP_MACHINE" && echo $$ >"$d${own%/}/$M_CGROUP_MACHINE/cgroup.procs"; } 2>/dev/null || true
  done
  trap 'stopping=1; [[ -n "${npid:-}" ]] && kill -TERM "$npid" 2>/dev/null' TERM INT
  while :; do
    boot=$((boot + 1))
    log "boot $boot: $(date -u +%FT%TZ)"
    SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 systemd-nspawn -D "$M_ROOT" -b --register=no --keep-unit -M "$M_NAME" \
      --console=passive --capability=all --network-bridge="$NODE_BRIDGE" --resolv-conf=off --timezone=off \
      --bind=/dev/kmsg --bind-ro="$BIN:/opt/lull/bin" &
    npid=$!
    echo "$npid" >"$PIDS/real-node-1-nspawn.pid"
    rc=0
    wait "$npid" || rc=$?
    # A signal interrupts wait before the machine is down: wait for it.
    while kill -0 "$npid" 2>/dev/null; do wait "$npid" || rc=$?; done
    npid=
    log "systemd-nspawn exited $rc: $(date -u +%FT%TZ)"
    [[ $stopping -eq 1 ]] && exit 0
    case "$rc" in
      133) log "reboot requested: booting again" ;;
      0) log "powered off"; exit 0 ;;
      *) exit "$rc" ;;
    esac
  done
}

# leader: the host PID of the machine's PID 1 (systemd), or nothing.
leader() {
  local npid
  [[ -f "$PIDS/real-node-1-nspawn.pid" ]] || return 0
  npid=$(cat "$PIDS/real-node-1-nspawn.pid")
  alive "$npid" || return 0
  pgrep -P "$npid" -x systemd | head -1
}

shell_() {
  local l; l=$(leader)
  [[ -n "$l" ]] || die "the machine is not running"
  nsenter -t "$l" -a "$@"
}

k() { "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }

# boot: the supervisor loop, then the node Ready.
boot() {
  local start=$SECONDS
  start_proc real-node-1 "${ROOT}/hack/real-node-1.sh" supervise
  wait_for "$M_NAME booted (systemd is PID 1)" 60 test -n "$(leader)"
  wait_for "$M_NAME Ready" 180 node_ready "$M_NAME"
  log "boot to Ready: $((SECONDS - start))s"
  echo "$((SECONDS - start))" >"$M_DIR/boot-to-ready.seconds"
}

up() {
  local why; why=$(cannot_boot)
  [[ -z "$why" ]] || die "cannot boot here: $why"
  # The images the cluster installed (local-up.sh exports LULL_VERSION; run
  # alone, ask the cluster which tag its agent runs).
  if [[ -z "${LULL_VERSION:-}" ]]; then
    LULL_VERSION=$(k -n lull-system get daemonset lull-agent -o jsonpath='{.spec.template.spec.containers[0].image}')
    LULL_VERSION=${LULL_VERSION##*:}
  fi
  [[ -f "${ROOT}/_output/images/lull-agent-${LULL_VERSION}.tar" ]] ||
    die "no image archive _output/images/lull-agent-${LULL_VERSION}.tar (hack/images.sh builds it)"
  rootfs
  trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "real-node-1: failed; removing it" >&2; down >&2 || true; fi' EXIT
  prepare
  ip route replace "$M_POD_CIDR" via "$M_IP" dev "$NODE_BRIDGE"
  boot
  # lull-agent as installed (manifests/agent, production commands), as a
  # DaemonSet of its own for the nodes booted by systemd: the local
  # overlay's agent (harmless commands) stays on real-node-0.
  # shellcheck source=lib/install.sh
  source "${ROOT}/hack/lib/install.sh"
  write_tag_overlay "$M_DIR/install" "${ROOT}/hack/local-overlay/systemd-agent" "$LULL_VERSION"
  k kustomize "$M_DIR/install" >"$M_DIR/install/rendered.yaml"
  k apply --server-side -f "$M_DIR/install/rendered.yaml" >/dev/null
  wait_for "lull-agent (production commands) running on $M_NAME" 120 k -n lull-system rollout status daemonset/lull-agent-systemd --timeout=5s
  trap - EXIT
  log "up: nsenter -t \$(pgrep -P \$(cat $PIDS/real-node-1-nspawn.pid) -x systemd) -a systemctl status  (or: hack/real-node-1.sh shell systemctl status)"
}

# start: power the machine on again (after `systemctl poweroff` inside).
start() {
  [[ -d "$M_ROOT" ]] || die "no machine in $M_DIR; run 'hack/real-node-1.sh up'"
  if [[ -f "$PIDS/real-node-1.pid" ]] && alive "$(cat "$PIDS/real-node-1.pid")"; then
    log "already running"; return 0
  fi
  rm -f "$PIDS/real-node-1.pid" "$PIDS/real-node-1-nspawn.pid"
  boot
}

# down: the machine shut down in order (or killed), and everything it left
# on this machine removed: processes, mounts, the veth, the route, cgroups,
# its disk.
down() {
  local pid l ns p
  l=$(leader)
  if [[ -f "$PIDS/real-node-1.pid" ]]; then
    pid=$(cat "$PIDS/real-node-1.pid")
    if alive "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      local deadline=$((SECONDS + 60))
      while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
      if alive "$pid"; then
        log "did not shut down in 60s; killing it"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
  fi
  # Whatever still lives in the machine's PID namespace.
  if [[ -n "$l" && -e "/proc/$l/ns/pid" ]]; then
    ns=$(readlink "/proc/$l/ns/pid" 2>/dev/null || true)
    if [[ -n "$ns" ]]; then
      for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/ns/pid" 2>/dev/null)" == "$ns" ]] && kill -KILL "${p#/proc/}" 2>/dev/null
      done
      while alive "$l"; do sleep 0.1; done
    fi
  fi
  rm -f "$PIDS/real-node-1.pid" "$PIDS/real-node-1-nspawn.pid"
  if [[ -d "$M_DIR" ]]; then
    local m mounts
    mapfile -t mounts < <(awk -v d="$M_DIR" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)
    for m in "${mounts[@]}"; do
      umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  fi
  ip link del "$M_VETH" 2>/dev/null || true
  ip route del "$M_POD_CIDR" via "$M_IP" 2>/dev/null || true
  local c cgroups
  mapfile -t cgroups < <(find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -type d \( -name "$M_CGROUP" -o -name "$M_CGROUP_MACHINE" \) 2>/dev/null)
  for c in "${cgroups[@]}"; do
    find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # systemd-nspawn's own directories for mount propagation and locks.
  rm -rf "/run/systemd/nspawn/propagate/$M_NAME"
  rmdir /run/systemd/nspawn/propagate /run/systemd/nspawn/locks /run/systemd/nspawn 2>/dev/null || true
  if [[ -d "$M_DIR" ]] && ! awk -v d="$M_DIR" 'index($2, d) == 1 {f=1} END {exit !f}' /proc/self/mounts; then
    rm -rf "$M_DIR"
  fi
  log "down"
}

case "${1:-}" in
  rootfs) rootfs ;;
  up) up ;;
  start) start ;;
  down) down ;;
  shell) shift; shell_ "$@" ;;
  supervise) supervise ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
