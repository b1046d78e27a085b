package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// run runs kubectl-lull in-process and returns its exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// noKubeconfig leaves kubectl-lull no configuration to find: no kubeconfig
// file, not in a cluster.
func noKubeconfig(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "missing"))
	for _, env := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_MASTER"} {
		t.Setenv(env, "")
		require.NoError(t, os.Unsetenv(env))
	}
}

// Without any configuration, every verb that reads the cluster says so
// (not "connection refused" from localhost:8080, clientcmd's default).
func TestNoConfiguration(t *testing.T) {
	noKubeconfig(t)
	for _, args := range [][]string{
		{"status"}, {"lease", "show", "n1"}, {"lease", "acquire", "n1", "--holder", "me"}, {"windows"}, {"version"},
		{"plan", "n1", "--class", "kernel-update"}, {"complete", "n1"},
	} {
		code, _, errOut := run(t, args...)
		require.Equal(t, ExitError, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "error: no configuration has been provided: point kubectl lull at a cluster with --kubeconfig", args)
		require.NotContains(t, errOut, "localhost:8080", args)
	}
	code, out, errOut := run(t, "version", "--client")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, "Client Version: dev\n", out)
}

// A lease lasts a positive number of whole seconds: anything else is
// refused before the cluster is asked (the library would have replaced it
// with the default 300 s).
func TestLeaseAcquireRefusesBadDurations(t *testing.T) {
	noKubeconfig(t)
	for dur, want := range map[string]string{
		"-90s":   "--duration -1m30s: a lease lasts a positive number of whole seconds",
		"0s":     "--duration 0s: a lease lasts a positive number of whole seconds",
		"1500ms": "--duration 1.5s: a lease lasts a positive number of whole seconds",
		"banana": `invalid argument "banana" for "--duration" flag`,
	} {
		code, out, errOut := run(t, "lease", "acquire", "n1", "--holder", "me", "--duration", dur)
		require.Equal(t, ExitError, code, dur)
		require.Empty(t, out, dur)
		require.Contains(t, errOut, want, dur)
	}
	code, _, errOut := run(t, "lease", "acquire", "n1", "--holder", "me", "--wait", "-1s")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, "--wait -1s: give how long to keep trying")
	code, _, errOut = run(t, "lease", "acquire", "n1", "--holder", " ")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, "--holder must name the actor")
}

func TestBadOutputFormatFailsFirst(t *testing.T) {
	noKubeconfig(t)
	code, _, errOut := run(t, "status", "-o", "tabel")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, `error: -o "tabel": unknown output format; use one of wide, json, yaml`)
	code, _, errOut = run(t, "version", "-o", "name")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, `-o "name": version prints json or yaml`)
}

func TestErrorText(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "x")
	require.Equal(t, `Error from server (NotFound): nodes "x" not found`, errorText(notFound))
	require.Equal(t, `error: reading node x: nodes "x" not found`, errorText(fmt.Errorf("reading node x: %w", notFound)))
	noCRD := fmt.Errorf("listing MaintenanceWindows: %w", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "lull.dev", Kind: "MaintenanceWindow"}, SearchedVersions: []string{"v1alpha1"}})
	require.Contains(t, errorText(noCRD), "lull's CustomResourceDefinitions are not installed in this cluster")
}
