package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// The node and holder docs/lease-protocol.md's kubectl-only blocks use.
const (
	docNode   = "worker-7"
	docHolder = "alice"
)

var docMarker = regexp.MustCompile(`^<!-- leasedoc-test: ([a-z-]+) -->$`)

// leaseDocBlocks returns the shell blocks of docs/lease-protocol.md marked
// `<!-- leasedoc-test: NAME -->` on the line before their fence, by NAME.
func leaseDocBlocks(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(framework.RepoRoot(), "docs", "lease-protocol.md"))
	require.NoError(t, err)
	defer f.Close()
	blocks := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := docMarker.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		require.True(t, sc.Scan() && sc.Text() == "```sh", "the line after the marker %q opens a sh block", m[1])
		var body strings.Builder
		for sc.Scan() && sc.Text() != "```" {
			body.WriteString(sc.Text() + "\n")
		}
		blocks[m[1]] = body.String()
	}
	require.NoError(t, sc.Err())
	for _, name := range []string{"acquire", "renew", "release"} {
		require.NotEmpty(t, blocks[name], "docs/lease-protocol.md has no block marked leasedoc-test: %s", name)
	}
	return blocks
}

// runDocBlock runs a documented block in bash with the cluster's kubeconfig.
func runDocBlock(t *testing.T, block string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig, "PATH="+framework.BinDir()+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func docLease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(t.Context(), lease.Name(docNode), metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

// docPodRejection creates a lull-scheduled pod that fits only the
// documented node and returns the scheduler's reason for not placing it.
func docPodRejection(t *testing.T, e *sysEnv) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "leasedoc", Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "lull-scheduler", NodeSelector: map[string]string{"kubernetes.io/hostname": docNode},
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}}},
	}
	require.NoError(t, e.c.Create(t.Context(), pod))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	var msg string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, nil
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				msg = c.Message
			}
		}
		return msg != "", nil
	})
	require.NoError(t, err, "the scheduler never reported the pod unschedulable; spec.nodeName=%q", pod.Spec.NodeName)
	return msg
}

// The lease protocol's kubectl-only acquire, renew and release, run as
// documented: kubectl lull shows the lease with its real times, the
// scheduler, the preview and the drainer honour it, the renewal changes
// only renewTime, release lets the drainer in, and renewal and release
// fail once someone else holds the lease.
func TestLeaseDocKubectlOnly(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	blocks := leaseDocBlocks(t)
	_, err := cluster.Clientset.CoreV1().Nodes().Create(ctx, kwokNode(docNode, nil), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := context.Background()
		_ = cluster.Clientset.CoreV1().Nodes().Delete(bg, docNode, metav1.DeleteOptions{})
		_ = e.c.Delete(bg, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: docNode}})
		_ = cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Delete(bg, lease.Name(docNode), metav1.DeleteOptions{})
	})

	acquired := docAcquire(t, blocks["acquire"])
	docHonoured(t, e, acquired)
	docRenew(t, e, blocks["renew"], acquired)
	docRelease(t, e, blocks["release"])
	docFenced(t, blocks)
}

// docAcquire runs the acquire block and checks the lease it makes, as
// kubectl lull shows it; a second acquire fails while the lease exists.
func docAcquire(t *testing.T, block string) time.Time {
	t.Helper()
	before := time.Now().Truncate(time.Microsecond)
	out, err := runDocBlock(t, block)
	require.NoError(t, err, out)
	after := time.Now()
	l := docLease(t)
	require.Equal(t, docHolder, *l.Spec.HolderIdentity)
	require.Equal(t, int32(3600), *l.Spec.LeaseDurationSeconds)
	require.Equal(t, int32(0), *l.Spec.LeaseTransitions)
	require.NotNil(t, l.Spec.AcquireTime)
	acquired := l.Spec.AcquireTime.Time
	require.False(t, acquired.Before(before) || acquired.After(after), "acquireTime %v is the time of the acquire [%v, %v]", acquired, before, after)
	require.True(t, l.Spec.RenewTime.Equal(l.Spec.AcquireTime), "renewTime %v = acquireTime %v", l.Spec.RenewTime, acquired)

	out, code := lullctl(t, "lease", "show", docNode)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, docHolder)
	require.Contains(t, out, "reboot")
	require.Contains(t, out, acquired.UTC().Format(time.RFC3339), "kubectl lull lease show prints the acquire time")
	require.NotContains(t, out, "0001-01-01")

	out, err = runDocBlock(t, block)
	require.Error(t, err, "a second acquire while the lease exists must fail: %s", out)
	require.Contains(t, out, "AlreadyExists")
	require.Equal(t, l.ResourceVersion, docLease(t).ResourceVersion, "the failed acquire changed nothing")
	return acquired
}

// docHonoured: the scheduler keeps pods off the node, the preview and the
// drainer wait for alice, naming the operation and since when.
func docHonoured(t *testing.T, e *sysEnv, acquired time.Time) {
	t.Helper()
	require.Contains(t, docPodRejection(t, e), `node is leased for disruption by "alice" for reboot (kernel 6.12)`)
	p := planOf(t, "kernel-update", docNode)
	require.Equal(t, plan.StartHolder, p.Start)
	require.Equal(t, docHolder, p.LeaseHolder)
	e.patchNode(docNode, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	nm := e.waitNM(docNode, "WaitingForLease", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForLease))
	require.Contains(t, nm.Status.WaitingFor, `"alice" for reboot (kernel 6.12) since `+acquired.UTC().Format(time.RFC3339))
}

// docRenew runs the renew block: renewTime moves on, the fencing fields and
// acquireTime stay, and the drainer still waits.
func docRenew(t *testing.T, e *sysEnv, block string, acquired time.Time) {
	t.Helper()
	before := docLease(t)
	out, err := runDocBlock(t, block)
	require.NoError(t, err, out)
	l := docLease(t)
	require.NotEqual(t, before.ResourceVersion, l.ResourceVersion)
	require.True(t, l.Spec.RenewTime.After(before.Spec.RenewTime.Time), "renewTime %v after %v", l.Spec.RenewTime, before.Spec.RenewTime)
	require.Equal(t, before.UID, l.UID)
	require.Equal(t, before.Spec.HolderIdentity, l.Spec.HolderIdentity)
	require.Equal(t, before.Spec.LeaseTransitions, l.Spec.LeaseTransitions)
	require.Equal(t, before.Spec.LeaseDurationSeconds, l.Spec.LeaseDurationSeconds)
	require.True(t, l.Spec.AcquireTime.Equal(&metav1.MicroTime{Time: acquired}), "acquireTime unchanged")
	require.Equal(t, before.Annotations, l.Annotations)
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, e.c.Get(t.Context(), client.ObjectKey{Name: docNode}, &nm))
	require.Equal(t, lullv1alpha1.PhaseWaitingForLease, nm.Status.Phase)
}

// docRelease runs the release block: the lease is gone and the drainer
// takes the node.
func docRelease(t *testing.T, e *sysEnv, block string) {
	t.Helper()
	held := docLease(t)
	out, err := runDocBlock(t, block)
	require.NoError(t, err, out)
	// The waiting drainer may take a new lease at once: alice's is gone
	// when there is none or one with another UID.
	l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(t.Context(), lease.Name(docNode), metav1.GetOptions{})
	if err == nil {
		require.NotEqual(t, held.UID, l.UID, "alice's lease was not released; holder %s", *l.Spec.HolderIdentity)
	} else {
		require.True(t, apierrors.IsNotFound(err), "reading the lease: %v", err)
	}
	nm := e.waitNM(docNode, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	require.True(t, strings.HasPrefix(nm.Status.LeaseHolder, "lull-drainer"), "lease holder %q", nm.Status.LeaseHolder)
	e.complete(docNode)
}

// docFenced: once another actor holds the lease, the documented renewal
// and release fail and change nothing.
func docFenced(t *testing.T, blocks map[string]string) {
	t.Helper()
	out, err := runDocBlock(t, blocks["acquire"])
	require.NoError(t, err, out)
	takeover := `{"spec":{"holderIdentity":"bob","leaseTransitions":1}}`
	_, err = cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Patch(t.Context(), lease.Name(docNode),
		types.MergePatchType, []byte(takeover), metav1.PatchOptions{})
	require.NoError(t, err)
	taken := docLease(t)
	for _, step := range []string{"renew", "release"} {
		out, err = runDocBlock(t, blocks[step])
		require.Error(t, err, "%s after a takeover must fail: %s", step, out)
		require.Equal(t, taken.ResourceVersion, docLease(t).ResourceVersion, "%s after a takeover changed the lease", step)
	}
}
