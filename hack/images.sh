#!/usr/bin/env bash
# Builds lull's OCI images from this repo alone — no base image, no registry,
# no container daemon — with hack/imagebuild (go-containerregistry), and
# writes each as one tar that is both an OCI image layout and a
# docker-archive (what `docker save` writes since Docker 25):
#
#   _output/images/<name>-<tag>.tar      ctr -n k8s.io images import / docker load
#   _output/images/<name>-<tag>.digest   the manifest digest (sha256:…)
#
#   hack/images.sh                        every image
#   hack/images.sh pause lull-drainer     only the named ones
#   VERSION=v0.1.0 hack/images.sh         another tag (default: git describe)
#   IMAGE_PLATFORMS="linux/amd64 linux/arm64" hack/images.sh
#                                         one multi-platform image per name: an
#                                         OCI image index of one image per platform
#                                         (make release); default: this machine's
#
# Names and references:
#   lull-scheduler  lull.dev/lull-scheduler:$VERSION   static Go, cmd/lull-scheduler
#   lull-drainer    lull.dev/lull-drainer:$VERSION     static Go, cmd/lull-drainer
#   lull-agent      lull.dev/lull-agent:$VERSION       static Go, cmd/lull-agent (runs as root)
#   pause           lull.dev/pause:$PAUSE_VERSION      static C, hack/images/pause/pause.c
#   e2e-graceful    lull.dev/e2e-graceful:$VERSION     static Go, test/e2e/images/graceful
#
# Reproducible: file mtimes and the config's `created` are the commit time
# (SOURCE_DATE_EPOCH, default `git log -1 --format=%ct`), files are owned by
# 0:0 and sorted, binaries are static and built with -trimpath. Every image
# is assembled a second time from the same binary and must give the same
# digest and the same archive bytes (IMAGES_CHECK_REPRODUCIBLE=0 skips that),
# and both views of every archive are read back and checked
# (`imagebuild verify`).
#
# An image whose archive exists and whose inputs are unchanged (same tag,
# commit, Go, tool; for pause: same pause.c and gcc) is not rebuilt; a dirty
# tree (or a -dirty VERSION) always rebuilds lull's images.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
BIN="${LULL_BIN_DIR:-${ROOT}/_output/bin}"
OUT="${LULL_IMAGES_DIR:-${ROOT}/_output/images}"
WORK="${OUT}/.work"
STAMPS="${OUT}/.stamps"
REGISTRY=lull.dev
ALL=(lull-scheduler lull-drainer lull-agent pause e2e-graceful)

die() { echo "images: $*" >&2; exit 1; }

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    lull-scheduler|lull-drainer|lull-agent|pause|e2e-graceful) ;;
    *) die "unknown image '$a' (known: ${ALL[*]})" ;;
  esac
done
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${ALL[@]}")

command -v go >/dev/null || die "go is not on PATH (Go 1.26 is required)"
command -v git >/dev/null || die "git is not on PATH (versions and SOURCE_DATE_EPOCH come from git)"
GOVER=$(go env GOVERSION)
GOARCH=${GOARCH:-$(go env GOARCH)}
# The platforms of every image: Go cross-compiles (CGO_ENABLED=0), the pause
# image with Debian's cross gcc. More than one gives an image index.
read -r -a PLATFORMS <<<"${IMAGE_PLATFORMS:-linux/${GOARCH}}"
for p in "${PLATFORMS[@]}"; do
  [[ "$p" =~ ^linux/(amd64|arm64)$ ]] || die "IMAGE_PLATFORMS: '$p' is not linux/amd64 or linux/arm64"
done
PLATFORM="${PLATFORMS[*]}"

VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
# An OCI tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
[[ "$VERSION" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "VERSION='$VERSION' is not a valid image tag"
[[ "$VERSION" != latest ]] || die "VERSION=latest: lull's images are tagged with their version, never latest"

HEAD=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null) || die "not a git work tree: the images' revision and SOURCE_DATE_EPOCH come from the commit"
HEAD_EPOCH=$(git -C "$ROOT" log -1 --format=%ct)
# Lull's images are dirty when the version says so or the tree has any
# change (tracked or untracked): their inputs are then not the commit's.
DIRTY=0
[[ "$VERSION" == *-dirty ]] && DIRTY=1
[[ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]] && DIRTY=1
SOURCE_URL=${IMAGE_SOURCE_URL:-https://lull.dev/lull}
CHECK_REPRO=${IMAGES_CHECK_REPRODUCIBLE:-1}

mkdir -p "$OUT" "$WORK" "$STAMPS" "${BIN}/.stamps"
# One run at a time in this output folder.
exec 9>"${OUT}/.lock"
flock 9

# --- the assembler ------------------------------------------------------------
TOOL="${BIN}/imagebuild"
TOOL_SRC="${ROOT}/hack/imagebuild"
grep -Eq "github\.com/google/go-containerregistry ${GGCR_VERSION//./\\.}( |$)" "${TOOL_SRC}/go.mod" ||
  die "hack/imagebuild/go.mod does not require go-containerregistry ${GGCR_VERSION} (GGCR_VERSION in hack/versions.env); run: (cd hack/imagebuild && go get github.com/google/go-containerregistry@${GGCR_VERSION} && go mod tidy)"
# The assembler is rebuilt when its module or its non-test sources change.
tool_src_hash() {
  local f srcs=()
  for f in "$TOOL_SRC"/*.go; do [[ "$f" == *_test.go ]] || srcs+=("$f"); done
  cat "$TOOL_SRC/go.mod" "$TOOL_SRC/go.sum" "${srcs[@]}" | sha256sum | cut -c1-16
}
TOOL_KEY="imagebuild ${GGCR_VERSION} ${GOVER} $(tool_src_hash)"
if [[ -x "$TOOL" && -f "${BIN}/.stamps/imagebuild" && "$(cat "${BIN}/.stamps/imagebuild")" == "$TOOL_KEY" ]]; then
  :
else
  echo "images: building the assembler (hack/imagebuild, go-containerregistry ${GGCR_VERSION}) ..."
  rm -f "${BIN}/.stamps/imagebuild"
  if ! (cd "$TOOL_SRC" && CGO_ENABLED=0 go build -trimpath -o "${TOOL}.tmp" .) >"${OUT}/.imagebuild.build.log" 2>&1; then
    tail -n 20 "${OUT}/.imagebuild.build.log" >&2
    grep -qE '403|404|410|Forbidden|Not Found|verifying module|reading https' "${OUT}/.imagebuild.build.log" &&
      echo "images: the Go module proxy ($(go env GOPROXY)) refused a module; check that GGCR_VERSION in hack/versions.env names a published go-containerregistry version" >&2
    die "building hack/imagebuild failed (log: ${OUT}/.imagebuild.build.log)"
  fi
  mv "${TOOL}.tmp" "$TOOL"
  echo "$TOOL_KEY" >"${BIN}/.stamps/imagebuild"
fi

# --- helpers --------------------------------------------------------------------
rfc3339() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }

# go_static ARCH NAME PACKAGE [LDFLAGS-X]: a static, trimmed Go binary for
# linux/ARCH into $WORK/bin/ARCH.
go_static() {
  local arch=$1 name=$2 pkg=$3 x=${4:-} log="${WORK}/${2}-${1}.build.log" start=$SECONDS out="${WORK}/bin/${1}"
  local ldflags="-s -w"
  [[ -n "$x" ]] && ldflags+=" -X ${x}"
  mkdir -p "$out"
  echo "images: go build ${pkg} (linux/${arch}, static) ..."
  if ! (cd "$ROOT" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" \
        go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "${out}/${name}.tmp" "$pkg") >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "go build ${pkg} for linux/${arch} failed (log: ${log})"
  fi
  mv "${out}/${name}.tmp" "${out}/${name}"
  echo "images: built ${name} binary for linux/${arch} in $((SECONDS - start))s ($(stat -c %s "${out}/${name}") bytes)"
}

# cross_gcc ARCH: the gcc that builds static binaries for linux/ARCH: this
# machine's for its own architecture, Debian's cross compiler otherwise.
cross_gcc() {
  local host
  case "$(uname -m)" in x86_64) host=amd64 ;; aarch64) host=arm64 ;; *) host=$(uname -m) ;; esac
  if [[ "$host" == "$1" ]]; then echo gcc; return; fi
  case "$1" in
    arm64) echo aarch64-linux-gnu-gcc ;;
    amd64) echo x86_64-linux-gnu-gcc ;;
  esac
}

# pause_static ARCH: hack/images/pause/pause.c with gcc -static -Os into
# $WORK/bin/ARCH.
pause_static() {
  local arch=$1 cc out="${WORK}/bin/${1}"
  cc=$(cross_gcc "$arch")
  if [[ -x "${ROOT}/hack/install-deps.sh" ]]; then
    if [[ "$cc" == gcc ]]; then
      "${ROOT}/hack/install-deps.sh" images || die "the pause image needs gcc and static glibc (Debian: gcc libc6-dev)"
    else
      "${ROOT}/hack/install-deps.sh" "images-${arch}" || die "the pause image for linux/${arch} needs Debian's cross gcc (install-deps.sh images-${arch})"
    fi
  fi
  command -v "$cc" >/dev/null || die "$cc is not installed; the pause image for linux/${arch} needs it (hack/install-deps.sh images-${arch})"
  mkdir -p "$out"
  # -ffile-prefix-map: no build path in the binary. -s: no symbols.
  if ! "$cc" -static -Os -s -Wall -Wextra -Werror -ffile-prefix-map="${ROOT}/=" \
       -DVERSION="\"${PAUSE_VERSION}\"" -o "${out}/pause.tmp" "${ROOT}/hack/images/pause/pause.c" 2>"${WORK}/pause-${arch}.build.log"; then
    cat "${WORK}/pause-${arch}.build.log" >&2
    grep -q 'cannot find -lc' "${WORK}/pause-${arch}.build.log" &&
      echo "images: static glibc is missing: apt-get install libc6-dev (or libc6-dev-${arch}-cross)" >&2
    die "$cc -static hack/images/pause/pause.c failed"
  fi
  mv "${out}/pause.tmp" "${out}/pause"
}

# assemble NAME OUTPUT-TAR DIGEST-FILE: runs imagebuild with IMG_ARGS.
assemble() {
  "$TOOL" "${IMG_ARGS[@]}" --output "$2" --digest-file "$3"
}

# image NAME: builds, checks and reports one image.
image() {
  local name=$1 tag ref epoch revision desc key src bin dest user
  case "$name" in
    pause)
      tag=$PAUSE_VERSION
      src="${ROOT}/hack/images/pause/pause.c"
      # The pause image changes only with pause.c: its time and revision are
      # those of the last commit that touched it (HEAD while uncommitted).
      revision=$(git -C "$ROOT" log -1 --format=%H -- hack/images/pause)
      epoch=$(git -C "$ROOT" log -1 --format=%ct -- hack/images/pause)
      if [[ -z "$revision" || -n "$(git -C "$ROOT" status --porcelain -- hack/images/pause)" ]]; then
        revision=$HEAD epoch=$HEAD_EPOCH
      fi
      epoch=${SOURCE_DATE_EPOCH:-$epoch}
      key="pause ${tag} $(sha256sum "$src" | cut -c1-16) $(gcc -dumpfullversion 2>/dev/null || echo nogcc) ${epoch} ${revision} ${PLATFORM// /,} ${TOOL_KEY}"
      desc="Sandbox (pause) container for lull's nodes: holds a pod's namespaces, reaps children (static C)"
      bin=pause dest=/pause user=65535:65535
      ;;
    *)
      tag=$VERSION revision=$HEAD epoch=${SOURCE_DATE_EPOCH:-$HEAD_EPOCH}
      key="${name} ${tag} ${revision} ${epoch} ${GOVER} ${PLATFORM// /,} ${TOOL_KEY}"
      [[ "$DIRTY" == 1 ]] && key+=" dirty"
      bin=$name dest=/${name} user=65532:65532
      case "$name" in
        lull-scheduler) desc="lull-scheduler: kube-scheduler with lull's NodeDisruption plugin (secondary scheduler)" ;;
        lull-drainer) desc="lull-drainer: cordons and drains nodes only inside maintenance windows, under their lease and budgets" ;;
        # Root, for chroot into the host's root and systemctl (docs/agent.md).
        lull-agent) desc="lull-agent: carries out a node's host steps (restart a service, reboot, power off) under its lease"
          user=0:0 ;;
        e2e-graceful) desc="lull e2e test workload: serves :8080, exits 0 GRACEFUL_DELAY after SIGTERM" ;;
      esac
      ;;
  esac
  ref="${REGISTRY}/${name}:${tag}"
  local archive="${OUT}/${name}-${tag}.tar" digestf="${OUT}/${name}-${tag}.digest" stamp="${STAMPS}/${name}-${tag}"

  if [[ "$key" != *" dirty" && -f "$archive" && -f "$digestf" && -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
    report "$archive" "$digestf" "$ref" current
    return 0
  fi
  rm -f "$stamp"

  local p arch
  for p in "${PLATFORMS[@]}"; do
    arch=${p#linux/}
    case "$name" in
      lull-scheduler|lull-drainer|lull-agent) go_static "$arch" "$name" "./cmd/${name}" "lull.dev/lull/internal/version.Version=${VERSION}" ;;
      e2e-graceful) go_static "$arch" "$name" ./test/e2e/images/graceful ;;
      pause) pause_static "$arch" ;;
    esac
  done

  # IMG_ARGS for one platform's image; the binary is that platform's.
  img_args() {
    IMG_ARGS=(
      --ref "$ref" --platform "$1" --created "$epoch"
      --file "${WORK}/bin/${1#linux/}/${bin}:${dest}:0755"
      --user "$user" --workdir / --entrypoint "$dest"
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      --created-by "hack/images.sh ${name}"
      --label "org.opencontainers.image.title=${name}"
      --label "org.opencontainers.image.description=${desc}"
      --label "org.opencontainers.image.version=${tag}"
      --label "org.opencontainers.image.revision=${revision}"
      --label "org.opencontainers.image.created=$(rfc3339 "$epoch")"
      --label "org.opencontainers.image.source=${SOURCE_URL}"
      --label "org.opencontainers.image.licenses=Apache-2.0"
    )
    if [[ "$name" != pause ]]; then
      # Names for the non-root user (65532, as in distroless), and a /tmp.
      IMG_ARGS+=(
        --file "${ROOT}/hack/images/rootfs/etc/passwd:/etc/passwd:0644"
        --file "${ROOT}/hack/images/rootfs/etc/group:/etc/group:0644"
        --dir /tmp:1777
      )
    fi
    if [[ "$name" == e2e-graceful ]]; then
      IMG_ARGS+=(--env GRACEFUL_DELAY=3s)
    fi
  }
  # build_archive OUTPUT-TAR DIGEST-FILE: the image of every platform; with
  # several, each alone in $WORK and then one index of them all.
  build_archive() {
    if [[ ${#PLATFORMS[@]} -eq 1 ]]; then
      img_args "${PLATFORMS[0]}"
      assemble "$name" "$1" "$2"
      return
    fi
    local singles=() q
    for q in "${PLATFORMS[@]}"; do
      img_args "$q"
      local single="${WORK}/${name}-${tag}-${q#linux/}.tar"
      assemble "$name" "$single" "${single%.tar}.digest" || return 1
      singles+=("$single")
    done
    "$TOOL" index --ref "$ref" --created "$epoch" --output "$1" --digest-file "$2" "${singles[@]}"
  }

  echo "images: assembling ${ref} (${PLATFORM}) ..."
  build_archive "$archive" "$digestf" >"${WORK}/${name}.assemble.txt" || die "assembling ${ref} failed"

  if [[ "$CHECK_REPRO" == 1 ]]; then
    # Reproducible: the same binaries and flags assembled again must give
    # the same digest and the same bytes.
    local again="${WORK}/${name}-${tag}.again.tar"
    build_archive "$again" "${again%.tar}.digest" >/dev/null || die "assembling ${ref} a second time failed"
    [[ "$(cat "$digestf")" == "$(cat "${again%.tar}.digest")" ]] ||
      die "${ref} is not reproducible: digest $(cat "$digestf") then $(cat "${again%.tar}.digest")"
    cmp -s "$archive" "$again" || die "${ref} is not reproducible: the two archives differ"
    rm -f "$again" "${again%.tar}.digest"
  fi
  "$TOOL" verify "$archive" >"${WORK}/${name}.verify.txt" || die "${archive} failed verification"
  grep -q "digest=$(cat "$digestf") " "${WORK}/${name}.verify.txt" || die "${archive}: index.json's digest is not $(cat "$digestf")"

  echo "$key" >"$stamp"
  report "$archive" "$digestf" "$ref" built
}

report() { # report ARCHIVE DIGEST-FILE REF WHAT
  local size
  size=$(stat -c %s "$1")
  printf 'images: %-7s %s  %s bytes (%s)  %s  %s\n' "$4" "${1#"${ROOT}"/}" "$size" "$(numfmt --to=iec "$size")" "$(cat "$2")" "$3"
}

for t in "${targets[@]}"; do
  image "$t"
done
