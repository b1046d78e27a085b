#!/usr/bin/env bash
# Builds the pinned test and cluster binaries from the Go module proxy into
# _output/bin (ignored by git), once per version: a binary whose stamp matches
# the pinned version and Go toolchain is reused, so a second run takes seconds.
#
#   hack/build-binaries.sh              build everything
#   hack/build-binaries.sh etcd kwok    build only the named binaries
#
# Names: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
#        kwok controller-gen
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
BIN="${LULL_BIN_DIR:-${ROOT}/_output/bin}"
STAMPS="${BIN}/.stamps"
mkdir -p "$STAMPS"

ALL=(etcd controller-gen kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${ALL[@]}")

command -v go >/dev/null || { echo "build-binaries: go is not on PATH (Go 1.26 is required)" >&2; exit 1; }
GOVER=$(go env GOVERSION)

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
    kwok) echo "$KWOK_VERSION" ;;
    kube-*|kubectl) echo "$KUBE_VERSION" ;;
    *) echo "build-binaries: unknown binary '$1' (known: ${ALL[*]})" >&2; return 1 ;;
  esac
}

build_one() {
  local name=$1 version out stamp want
  version=$(version_of "$name")
  out="${BIN}/${name}"
  stamp="${STAMPS}/${name}"
  want="${name} ${version} ${GOVER}"
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
      kwok)
        # kwok is built on older Kubernetes libraries: keep it out of our
        # modules and install it by version.
        tmpbin=$(mktemp -d)
        GOBIN="$tmpbin" GOFLAGS=-trimpath go install "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
        mv "$tmpbin/kwok" "$out.tmp" && rmdir "$tmpbin" ;;
      *)
        cd "$ROOT" && go build -trimpath -ldflags="$(kube_ldflags)" -o "$out.tmp" "k8s.io/kubernetes/cmd/${name}" ;;
    esac
  ) >"$log" 2>&1; then
    echo "build-binaries: FAILED to build ${name} ${version}; last lines of ${log}:" >&2
    tail -n 20 "$log" >&2
    if grep -qE '403|404|410|Forbidden|Not Found|verifying module|reading https' "$log"; then
      echo "build-binaries: the Go module proxy ($(go env GOPROXY)) refused a module for ${name} ${version}." >&2
      echo "build-binaries: check the version in hack/versions.env against ../shared/TOOLCHAIN.md." >&2
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
