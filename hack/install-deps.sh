#!/usr/bin/env bash
# Installs the few Debian packages lull's scripts need beyond Go, by what
# they are for; a package already present is left alone. Needs root (apt).
#
#   hack/install-deps.sh cluster     openssl, curl (certificates, health checks)
#   hack/install-deps.sh build-runc  gcc, libc headers, libseccomp headers, pkg-config
#   hack/install-deps.sh node        iptables (kube-proxy), iproute2 (the node's bridge)
#   hack/install-deps.sh images      gcc and static libc (the pause image)
#   hack/install-deps.sh machine     systemd-nspawn, mmdebstrap (real-node-1, hack/real-node-1.sh)
#   hack/install-deps.sh lint        shellcheck (hack/lint.sh, make verify)
set -euo pipefail

want=()
need() { # need COMMAND-OR-FILE PACKAGE
  if [[ "$1" == /* ]]; then [[ -e "$1" ]] && return 0; else command -v "$1" >/dev/null && return 0; fi
  want+=("$2")
}

for what in "$@"; do
  case "$what" in
    cluster) need openssl openssl; need curl curl ;;
    build-runc) need gcc gcc; need /usr/include/stdio.h libc6-dev; need /usr/include/seccomp.h libseccomp-dev; need pkg-config pkg-config ;;
    node) need iptables iptables; need ip iproute2 ;;
    images) need gcc gcc; need /usr/lib/x86_64-linux-gnu/libc.a libc6-dev ;;
    # The pause image for another architecture (IMAGE_PLATFORMS, make release).
    images-arm64) need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu; need /usr/aarch64-linux-gnu/lib/libc.a libc6-dev-arm64-cross ;;
    images-amd64) need x86_64-linux-gnu-gcc gcc-x86-64-linux-gnu; need /usr/x86_64-linux-gnu/lib/libc.a libc6-dev-amd64-cross ;;
    machine) need systemd-nspawn systemd-container; need mmdebstrap mmdebstrap ;;
    lint) need shellcheck shellcheck ;;
    *) echo "install-deps: unknown group '$what' (cluster, build-runc, node, images, images-arm64, images-amd64, machine, lint)" >&2; exit 2 ;;
  esac
done
[[ ${#want[@]} -eq 0 ]] && exit 0

mapfile -t want < <(printf '%s\n' "${want[@]}" | sort -u)
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "install-deps: missing Debian packages: ${want[*]}; install them (apt-get install ${want[*]}) and retry" >&2
  exit 1
fi
echo "install-deps: installing ${want[*]} from Debian"
# The package lists may be missing on a fresh machine; update them once.
if ! apt-get install -y -qq "${want[@]}" >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq "${want[@]}" >/dev/null
fi
