#!/usr/bin/env bash
# Builds the pinned test and cluster binaries from the Go module proxy into
# _output/bin (ignored by git), once per version: a binary whose stamp matches
# the pinned version and Go toolchain is reused, so a second run takes seconds.
#
#   hack/build-binaries.sh              build everything
#   hack/build-binaries.sh etcd kwok    build only the named binaries
#
# Names: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
#        kwok controller-gen, and the real node's kubelet kube-proxy
#        containerd (with containerd-shim-runc-v2 and ctr) runc cni-plugins
#        (bridge, host-local, loopback into _output/bin/cni)
#        Packaging: helm (renders and packages charts/lull), krew (the
#        release test installs kubectl-lull with it)
#        Tests: prometheus (a real Prometheus whose alerts the e2e tests
#        fire and clear), promtool (unit tests of lull's alert rules),
#        alertmanager (a real Alertmanager behind the alerts gate),
#        capi-manager (Cluster API's core controllers, e2e),
#        karpenter-kwok (Karpenter with its kwok cloud provider, e2e)
#        Lint: golangci-lint (hack/lint.sh, make verify)
#        Codegen: conversion-gen, defaulter-gen (k8s.io/code-generator, for
#        hack/update-codegen.sh beside controller-gen)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
BIN="${LULL_BIN_DIR:-${ROOT}/_output/bin}"
STAMPS="${BIN}/.stamps"
mkdir -p "$STAMPS" "$BIN/cni"

ALL=(etcd controller-gen kube-apiserver kube-controller-manager kube-scheduler kubectl kwok
     kubelet kube-proxy containerd runc cni-plugins)
ALL+=(helm krew)   # packaging: chart rendering and packaging, release test
ALL+=(prometheus promtool)  # e2e: a real Prometheus evaluating alert rules; unit tests of lull's rules
ALL+=(alertmanager)  # integration: a real Alertmanager behind the alerts gate
ALL+=(capi-manager)  # e2e: Cluster API's real core controllers (Machines wait for lull)
ALL+=(karpenter-kwok)  # e2e: Karpenter's real controllers (consolidation and drift beside lull)
ALL+=(golangci-lint)  # lint: make verify (hack/lint.sh)
ALL+=(conversion-gen defaulter-gen)  # codegen: hack/update-codegen.sh (plugin args)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${ALL[@]}")

command -v go >/dev/null || { echo "build-binaries: go is not on PATH (Go 1.26 is required)" >&2; exit 1; }
GOVER=$(go env GOVERSION)
# Every Go build of the project is static (CGO_ENABLED=0: the Makefile, the
# test runner and the image builds say the same), so the Kubernetes packages
# compiled for one binary are reused by all the others and by the tests.
# runc alone needs cgo.
export CGO_ENABLED=0

# One build at a time: a second caller waits for the first and then finds
# everything current.
exec 9>"${BIN}/.lock"
flock 9

kube_ldflags() {
  local major minor
  major=$(echo "${KUBE_VERSION#v}" | cut -d. -f1)
  minor=$(echo "${KUBE_VERSION#v}" | cut -d. -f2)
  echo "-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
}

version_of() {
  case "$1" in
    etcd) echo "$ETCD_VERSION" ;;
    controller-gen) echo "$CONTROLLER_TOOLS_VERSION" ;;
    conversion-gen|defaulter-gen) echo "$KUBE_STAGING_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    kube-*|kubectl|kubelet) echo "$KUBE_VERSION" ;;
    containerd) echo "$CONTAINERD_VERSION" ;;
    runc) echo "$RUNC_VERSION" ;;
    cni-plugins) echo "$CNI_PLUGINS_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    krew) echo "$KREW_VERSION" ;;
    prometheus|promtool) echo "$PROMETHEUS_VERSION" ;;
    alertmanager) echo "$ALERTMANAGER_VERSION" ;;
    capi-manager) echo "$CLUSTER_API_VERSION" ;;
    karpenter-kwok) echo "$KARPENTER_VERSION" ;;
    golangci-lint) echo "$GOLANGCI_LINT_VERSION" ;;
    *) echo "build-binaries: unknown binary '$1' (known: ${ALL[*]})" >&2; return 1 ;;
  esac
}

build_one() {
  local name=$1 version out stamp want
  version=$(version_of "$name")
  out="${BIN}/${name}"
  [[ "$name" == cni-plugins ]] && out="${BIN}/cni/bridge"
  stamp="${STAMPS}/${name}"
  want="${name} ${version} ${GOVER}"
  case "$name" in prometheus|promtool) want+=" remove_all_sd" ;; esac
  if [[ -x "$out" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "build-binaries: ${name} ${version} is current"
    return 0
  fi
  echo "build-binaries: building ${name} ${version} (${GOVER}) ..."
  local start=$SECONDS log="${BIN}/.${name}.build.log"
  rm -f "$stamp"
  if ! (
    set -e
    case "$name" in
      etcd)
        cd "${ROOT}/hack/tools" && go build -trimpath -ldflags=-s -o "$out.tmp" go.etcd.io/etcd/server/v3 ;;
      controller-gen)
        cd "${ROOT}/hack/tools" && go build -trimpath -o "$out.tmp" sigs.k8s.io/controller-tools/cmd/controller-gen ;;
      conversion-gen|defaulter-gen)
        # k8s.io/code-generator is a staging module: hack/tools/go.mod pins
        # it to KUBE_STAGING_VERSION.
        grep -q "k8s.io/code-generator ${KUBE_STAGING_VERSION}" "${ROOT}/hack/tools/go.mod" || {
          echo "hack/tools/go.mod does not pin k8s.io/code-generator ${KUBE_STAGING_VERSION} (KUBE_STAGING_VERSION)"; exit 1; }
        cd "${ROOT}/hack/tools" && go build -trimpath -o "$out.tmp" "k8s.io/code-generator/cmd/${name}" ;;
      kwok)
        # kwok is built on older Kubernetes libraries: keep it out of our
        # modules and install it by version.
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS=-trimpath go install "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
        mv "$tmpbin/kwok" "$out.tmp" && rmdir "$tmpbin" ;;
      containerd)
        # Static, without the cgo-only btrfs snapshotter: overlayfs is what
        # the node uses. The shim and ctr come from the same version.
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS="-trimpath -tags=no_btrfs" go install \
          -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
          "github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD_VERSION}" \
          "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" \
          "github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD_VERSION}"
        mv "$tmpbin/containerd-shim-runc-v2" "$tmpbin/ctr" "$BIN/"
        mv "$tmpbin/containerd" "$out.tmp" && rmdir "$tmpbin" ;;
      runc)
        # runc needs cgo (its nsenter is C) and libseccomp's headers.
        "${ROOT}/hack/install-deps.sh" build-runc
        tmpbin=$(mktemp -d)
        CGO_ENABLED=1 GOBIN="$tmpbin" GOFLAGS="-trimpath -tags=seccomp,urfave_cli_no_docs" go install \
          -ldflags="-s -w -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@${RUNC_VERSION}"
        mv "$tmpbin/runc" "$out.tmp" && rmdir "$tmpbin" ;;
      cni-plugins)
        # Only what the node's network needs: a bridge in the cluster's own
        # address range, host-local addresses, and the loopback interface.
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS=-trimpath go install -ldflags=-s \
          "github.com/containernetworking/plugins/plugins/main/bridge@${CNI_PLUGINS_VERSION}" \
          "github.com/containernetworking/plugins/plugins/main/loopback@${CNI_PLUGINS_VERSION}" \
          "github.com/containernetworking/plugins/plugins/ipam/host-local@${CNI_PLUGINS_VERSION}"
        mv "$tmpbin/host-local" "$tmpbin/loopback" "$BIN/cni/"
        mv "$tmpbin/bridge" "$out.tmp" && rmdir "$tmpbin" ;;
      helm)
        # Helm's go.mod has no replace directives: install it by version,
        # outside lull's modules.
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS=-trimpath go install \
          -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
          "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
        mv "$tmpbin/helm" "$out.tmp" && rmdir "$tmpbin" ;;
      krew)
        # `go install sigs.k8s.io/krew/cmd/krew@...` is refused (the proxy
        # answers 403 for krew's version list): build it from its own module.
        grep -q "sigs.k8s.io/krew ${KREW_VERSION}" "${ROOT}/hack/tools/krew/go.mod" || {
          echo "hack/tools/krew/go.mod does not pin sigs.k8s.io/krew ${KREW_VERSION} (KREW_VERSION)"; exit 1; }
        cd "${ROOT}/hack/tools/krew" && go build -trimpath \
          -ldflags="-s -w -X sigs.k8s.io/krew/internal/version.gitTag=${KREW_VERSION}" \
          -o "$out.tmp" sigs.k8s.io/krew/cmd/krew ;;
      prometheus|promtool)
        # Prometheus 3.x is published as module versions v0.3XX.Y (3.XX.Y);
        # its go.mod has no replace directives: install it by version,
        # outside lull's modules. Without the builtinassets tag the web UI
        # is not embedded; the tests use the HTTP API only. remove_all_sd
        # leaves out every service discovery but static, file and HTTP
        # (the tests scrape static targets), so the cloud SDKs and
        # client-go are not compiled.
        pv=${PROMETHEUS_VERSION#v0.}
        pv="${pv:0:1}.${pv:1}"
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS=-trimpath go install -tags remove_all_sd \
          -ldflags="-s -w -X github.com/prometheus/common/version.Version=${pv} -X github.com/prometheus/common/version.Branch=${PROMETHEUS_VERSION}" \
          "github.com/prometheus/prometheus/cmd/${name}@${PROMETHEUS_VERSION}"
        mv "$tmpbin/${name}" "$out.tmp" && rmdir "$tmpbin" ;;
      alertmanager)
        # Built in its own module (its go.mod and go.sum, its dependencies
        # outside lull's go.sum), from a copy of the module: its web UI
        # (ui/app/dist, embedded) is built by npm and is not in the module
        # zip, so the copy gets a placeholder page in its place. The tests
        # use the HTTP API only.
        src=$(cd / && go mod download -json "github.com/prometheus/alertmanager@${ALERTMANAGER_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
        [[ -n "$src" && -f "$src/go.mod" ]] || { echo "github.com/prometheus/alertmanager@${ALERTMANAGER_VERSION}: not downloaded"; exit 1; }
        tmpsrc=$(mktemp -d)
        cp -r "$src/." "$tmpsrc/" && chmod -R u+w "$tmpsrc"
        for ui in elm mantine; do
          mkdir -p "$tmpsrc/ui/app/dist/$ui"
          echo '<!doctype html><p>The Alertmanager web UI is not built here (lull builds Alertmanager for its API).</p>' >"$tmpsrc/ui/app/dist/$ui/index.html"
        done
        (cd "$tmpsrc" && GOFLAGS=-trimpath go build \
          -ldflags="-s -w -X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v}" \
          -o "$out.tmp" ./cmd/alertmanager)
        rm -rf "$tmpsrc" ;;
      capi-manager)
        # Cluster API v1.14 is on Kubernetes v0.36 libraries and its go.mod
        # replaces its api module with ./api (go install refuses that): it
        # is built from a module of its own, hack/tools/cluster-api.
        grep -q "sigs.k8s.io/cluster-api ${CLUSTER_API_VERSION}" "${ROOT}/hack/tools/cluster-api/go.mod" || {
          echo "hack/tools/cluster-api/go.mod does not pin sigs.k8s.io/cluster-api ${CLUSTER_API_VERSION} (CLUSTER_API_VERSION)"; exit 1; }
        cd "${ROOT}/hack/tools/cluster-api" && go build -trimpath \
          -ldflags="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=${CLUSTER_API_VERSION}" \
          -o "$out.tmp" sigs.k8s.io/cluster-api/core ;;
      karpenter-kwok)
        # Karpenter v1.14 is on Kubernetes v0.35 libraries: built from a
        # module of its own, hack/tools/karpenter, like Cluster API.
        grep -q "sigs.k8s.io/karpenter ${KARPENTER_VERSION}" "${ROOT}/hack/tools/karpenter/go.mod" || {
          echo "hack/tools/karpenter/go.mod does not pin sigs.k8s.io/karpenter ${KARPENTER_VERSION} (KARPENTER_VERSION)"; exit 1; }
        cd "${ROOT}/hack/tools/karpenter" && go build -trimpath -ldflags="-s -w" \
          -o "$out.tmp" sigs.k8s.io/karpenter/kwok ;;
      golangci-lint)
        # golangci-lint's go.mod has no replace directives: install it by
        # version, outside lull's modules (its many dependencies stay out
        # of lull's go.sum). It reads its version from the build info.
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS=-trimpath go install -ldflags="-s -w" \
          "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${GOLANGCI_LINT_VERSION}"
        mv "$tmpbin/golangci-lint" "$out.tmp" && rmdir "$tmpbin" ;;
      *)
        cd "$ROOT" && go build -trimpath -ldflags="$(kube_ldflags)" -o "$out.tmp" "k8s.io/kubernetes/cmd/${name}" ;;
    esac
  ) >"$log" 2>&1; then
    echo "build-binaries: FAILED to build ${name} ${version}; last lines of ${log}:" >&2
    tail -n 20 "$log" >&2
    if grep -qE '403|404|410|Forbidden|Not Found|verifying module|reading https' "$log"; then
      echo "build-binaries: the Go module proxy ($(go env GOPROXY)) refused a module for ${name} ${version}." >&2
      echo "build-binaries: check that its version in hack/versions.env is published on the proxy." >&2
    fi
    rm -f "$out.tmp"
    return 1
  fi
  mv "$out.tmp" "$out"
  echo "$want" >"$stamp"
  echo "build-binaries: built ${name} ${version} in $((SECONDS - start))s"
}

for t in "${targets[@]}"; do
  build_one "$t"
done
