# shellcheck shell=bash
# Sourced: the one way lull's scripts point manifests/install (or an overlay
# of it) at images of a given tag.

# write_tag_overlay DIR BASE TAG: writes DIR/kustomization.yaml, which takes
# the kustomization in the directory BASE and tags lull's images TAG.
write_tag_overlay() {
  local dir=$1 base=$2 tag=$3
  mkdir -p "$dir"
  cat >"$dir/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$dir" "$base")
images:
- name: lull.dev/lull-scheduler
  newTag: "${tag}"
- name: lull.dev/lull-drainer
  newTag: "${tag}"
- name: lull.dev/lull-agent
  newTag: "${tag}"
KUST
}
