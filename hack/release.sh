#!/usr/bin/env bash
# Builds a lull release into dist/ (ignored by git):
#
#   make release VERSION=v0.1.0
#   hack/release.sh                      (VERSION from the environment)
#
# What it writes, for VERSION=vX.Y.Z:
#   kubectl-lull_vX.Y.Z_<os>_<arch>.tar.gz   kubectl-lull and LICENSE, per platform
#   lull.yaml                                the krew plugin manifest (uri, sha256)
#   lull-scheduler-vX.Y.Z.tar,               the images lull.dev/lull-scheduler:vX.Y.Z,
#   lull-drainer-vX.Y.Z.tar,                 lull.dev/lull-drainer:vX.Y.Z
#   lull-agent-vX.Y.Z.tar                    and lull.dev/lull-agent:vX.Y.Z (hack/images.sh)
#   lull-install.yaml                        `kubectl kustomize manifests/install`, images at vX.Y.Z
#   lull-X.Y.Z.tgz                           the Helm chart (version X.Y.Z, appVersion vX.Y.Z)
#   checksums.txt                            sha256 of every file above
#
# Environment:
#   VERSION      the release, vMAJOR.MINOR.PATCH[-PRERELEASE] (required)
#   DIST         output folder (default: dist); emptied first
#   PLATFORMS    os/arch list for kubectl-lull (default: linux/amd64 linux/arm64
#                darwin/amd64 darwin/arm64)
#   RELEASE_URL  where the archives will be downloadable; the krew manifest's
#                uris are RELEASE_URL/<archive> (default:
#                https://github.com/lull-dev/lull/releases/download/VERSION)
#   SKIP_IMAGES  1: do not build the image archives (tests, quick runs)
#   IMAGE_PLATFORMS  the images' platforms (default: linux/amd64 linux/arm64):
#                each image archive is one OCI image index of them
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN="${LULL_BIN_DIR:-${ROOT}/_output/bin}"
# shellcheck source=lib/install.sh
source "${ROOT}/hack/lib/install.sh"

VERSION=${VERSION:-}
if [[ ! "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION must be vMAJOR.MINOR.PATCH[-PRERELEASE] (make release VERSION=v0.1.0), not '${VERSION}'" >&2
  exit 2
fi
CHART_VERSION=${VERSION#v}
DIST=${DIST:-dist}
[[ "$DIST" = /* ]] || DIST="${ROOT}/${DIST}"
DIST=$(realpath -m "$DIST")
case "${ROOT}/" in
  "${DIST%/}/"*) echo "release: DIST=${DIST} would hold the repository; it is emptied first" >&2; exit 2 ;;
esac
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
RELEASE_URL=${RELEASE_URL:-https://github.com/lull-dev/lull/releases/download/${VERSION}}
RELEASE_URL=${RELEASE_URL%/}
SKIP_IMAGES=${SKIP_IMAGES:-0}

step() { echo "release: $*"; }
start=$SECONDS

"${ROOT}/hack/build-binaries.sh" kubectl helm >/dev/null
KUBECTL="${BIN}/kubectl"
HELM="${BIN}/helm"

rm -rf "$DIST"
mkdir -p "$DIST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Archives are reproducible: fixed owner, order and times (the commit's time).
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
archive() { # $1: archive path; the rest: files and folders in $work/stage
  tar -C "$work/stage" --sort=name --owner=0 --group=0 --numeric-owner \
      --mtime="@${mtime}" --format=gnu -cf - "${@:2}" | gzip -9n >"$1"
}

# kubectl-lull, per platform.
declare -a archives=()
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  name="kubectl-lull_${VERSION}_${os}_${arch}.tar.gz"
  step "kubectl-lull ${os}/${arch}"
  rm -rf "$work/stage" && mkdir -p "$work/stage"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X lull.dev/lull/internal/version.Version=${VERSION}" \
    -o "$work/stage/kubectl-lull" ./cmd/kubectl-lull
  cp LICENSE "$work/stage/LICENSE"
  archive "$DIST/$name" kubectl-lull LICENSE
  archives+=("$p $name")
done

# The krew plugin manifest.
step "krew manifest lull.yaml"
{
  cat <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: lull
spec:
  version: ${VERSION}
  homepage: https://lull.dev
  shortDescription: Safe node maintenance with windows, budgets and leases
  description: |
    kubectl lull requests maintenance of nodes and shows, before anyone acts,
    what lull-drainer would do, when, and what would block it: plan, status,
    windows, why, request, complete, cancel, and the node disruption lease
    (lease acquire|renew|release|show) that other tools can share.
    It needs lull (lull-scheduler and lull-drainer) installed in the cluster.
  platforms:
EOF
  for a in "${archives[@]}"; do
    p=${a%% *} name=${a#* }
    sum=$(sha256sum "$DIST/$name" | cut -d' ' -f1)
    cat <<EOF
  - selector:
      matchLabels:
        os: ${p%/*}
        arch: ${p#*/}
    uri: ${RELEASE_URL}/${name}
    sha256: ${sum}
    files:
    - from: kubectl-lull
      to: .
    - from: LICENSE
      to: .
    bin: kubectl-lull
EOF
  done
} >"$DIST/lull.yaml"

# The images.
if [[ "$SKIP_IMAGES" == 1 ]]; then
  step "images: skipped (SKIP_IMAGES=1)"
elif [[ ! -x "${ROOT}/hack/images.sh" ]]; then
  echo "release: hack/images.sh does not exist yet, so the image archives cannot be built;" >&2
  echo "release: run with SKIP_IMAGES=1 to build the rest of the release." >&2
  exit 1
else
  step "images (hack/images.sh)"
  VERSION="$VERSION" IMAGE_PLATFORMS="${IMAGE_PLATFORMS:-linux/amd64 linux/arm64}" "${ROOT}/hack/images.sh" lull-scheduler lull-drainer lull-agent
  for img in lull-scheduler lull-drainer lull-agent; do
    f="${LULL_IMAGES_DIR:-${ROOT}/_output/images}/${img}-${VERSION}.tar"
    [[ -f "$f" ]] || { echo "release: hack/images.sh did not write $f" >&2; exit 1; }
    cp "$f" "$DIST/"
  done
fi

# One install YAML: manifests/install with the release's image tags.
step "lull-install.yaml"
write_tag_overlay "$work/overlay" "${ROOT}/manifests/install" "$VERSION"
"$KUBECTL" kustomize "$work/overlay" >"$DIST/lull-install.yaml"

# The Helm chart: image tags default to appVersion, the release.
step "chart lull-${CHART_VERSION}.tgz"
"$HELM" lint --quiet charts/lull >/dev/null
"$HELM" package charts/lull --version "$CHART_VERSION" --app-version "$VERSION" -d "$work/chart" >/dev/null
# helm package stamps the current time: repack with the archives' fixed
# owner, order and times, so that the chart is reproducible too.
rm -rf "$work/stage" && mkdir -p "$work/stage"
tar -xzmf "$work/chart/lull-${CHART_VERSION}.tgz" -C "$work/stage"
archive "$DIST/lull-${CHART_VERSION}.tgz" lull

step "checksums.txt"
# shellcheck disable=SC2094 # find leaves checksums.txt out: it is only written
(cd "$DIST" && find . -maxdepth 1 -type f ! -name checksums.txt -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >checksums.txt)

step "${VERSION} in ${DIST} ($((SECONDS - start))s):"
# shellcheck disable=SC2012 # a listing for people to read, not parsed
(cd "$DIST" && ls -l | tail -n +2)
