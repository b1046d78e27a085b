package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// lullctl runs kubectl-lull and returns its output and exit code.
func lullctl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(framework.BinDir(), "kubectl-lull"),
		append([]string{"--kubeconfig", cluster.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// TestLeaseCLIWithoutConfiguration: with no kubeconfig anywhere, the
// command says so rather than failing to reach localhost:8080.
func TestLeaseCLIWithoutConfiguration(t *testing.T) {
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), filepath.Join(framework.BinDir(), "kubectl-lull"), "lease", "show", "--all")
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, string(out))
	require.Equal(t, 1, ee.ExitCode(), string(out))
	require.Contains(t, string(out), "error: no configuration has been provided")
	require.NotContains(t, string(out), "localhost:8080")
}

// TestLeaseCLIAndGarbageCollection: the shell interface's exit codes, and a
// deleted node's lease is garbage-collected by kube-controller-manager
// through its ownerReference.
func TestLeaseCLIAndGarbageCollection(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lease.DefaultNamespace}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gc-node"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// A node without a lease is no error; a node that does not exist is.
	out, code := lullctl(t, "lease", "show", "gc-node")
	require.Equal(t, 0, code, out)
	require.Equal(t, "node gc-node has no disruption lease (namespace "+lease.DefaultNamespace+")\n", out)
	out, code = lullctl(t, "lease", "show", "no-such-node")
	require.Equal(t, 1, code, out)
	require.Equal(t, `Error from server (NotFound): nodes "no-such-node" not found`+"\n", out)

	// A duration that is not a positive number of whole seconds is
	// refused, and no lease is created.
	for _, d := range []string{"-90s", "0s"} {
		out, code = lullctl(t, "lease", "acquire", "gc-node", "--holder", "reboot-daemon", "--duration", d)
		require.Equal(t, 1, code, "--duration %s: %s", d, out)
		require.Contains(t, out, "a lease lasts a positive number of whole seconds", d)
		_, err := cs.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name("gc-node"), metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "--duration %s created a lease: %v", d, err)
	}

	out, code = lullctl(t, "lease", "acquire", "gc-node", "--holder", "reboot-daemon", "--operation", "reboot", "--reason", "kernel 6.12", "--duration", "2m")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "reboot-daemon")
	out, code = lullctl(t, "lease", "show", "gc-node", "-o", "jsonpath={.holder}/{.operation}/{.duration}")
	require.Equal(t, 0, code, out)
	require.Equal(t, "reboot-daemon/reboot/2m0s", out)
	out, code = lullctl(t, "lease", "show", "--all", "-o", "name")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "nodelease.cli.lull.dev/gc-node\n")

	out, code = lullctl(t, "lease", "acquire", "gc-node", "--holder", "someone-else", "--operation", "drain")
	require.Equal(t, 3, code, "held by another: exit 3; output: %s", out)
	require.Contains(t, out, `leased by "reboot-daemon" for reboot (kernel 6.12)`)

	out, code = lullctl(t, "lease", "release", "gc-node", "--holder", "someone-else")
	require.Equal(t, 3, code, "releasing another's lease is refused: %s", out)

	out, code = lullctl(t, "lease", "show", "gc-node", "-o", "json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"holder": "reboot-daemon"`)

	out, code = lullctl(t, "lease", "renew", "gc-node", "--holder", "reboot-daemon")
	require.Equal(t, 0, code, out)

	require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, "gc-node", metav1.DeleteOptions{}))
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name("gc-node"), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "lease of a deleted node is garbage-collected; %s", cluster.LogsHint())

	out, code = lullctl(t, "lease", "show", "--all")
	require.Equal(t, 0, code, out)
	require.False(t, strings.Contains(out, "gc-node"), out)
}
