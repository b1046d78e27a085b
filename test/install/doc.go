// Package install tests lull's install entry points with the real tools:
// manifests/install (kubectl kustomize), the Helm chart charts/lull (helm),
// and a release built by hack/release.sh (kubectl-lull installed with krew).
// The pinned kubectl, helm, krew and kube-apiserver come from
// hack/build-binaries.sh.
package install
