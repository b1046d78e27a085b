package cli

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// `lease release` says what happened: released, nothing to release, a
// node that does not exist (an error, as kubectl says it), or another
// holder's lease (exit ExitHeld, lease kept).
func TestLeaseRelease(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	)
	var out bytes.Buffer
	o := &options{settings: settings.Defaults(), out: &out}
	c := o.newLeaseClient(cs)
	_, err := c.Acquire(t.Context(), "n1", "fw-updater", "firmware", "", 0)
	require.NoError(t, err)

	err = o.releaseLease(t.Context(), cs, "n1", "someone-else")
	var ee *exitError
	require.True(t, errors.As(err, &ee) && ee.code == ExitHeld, "another holder's lease: %v", err)
	info, err := c.Get(t.Context(), "n1")
	require.NoError(t, err)
	require.NotNil(t, info, "the lease is kept")

	require.NoError(t, o.releaseLease(t.Context(), cs, "n1", "fw-updater"))
	require.Equal(t, "released lease of node n1\n", out.String())
	info, err = c.Get(t.Context(), "n1")
	require.NoError(t, err)
	require.Nil(t, info)

	out.Reset()
	require.NoError(t, o.releaseLease(t.Context(), cs, "n2", "fw-updater"))
	require.Equal(t, "node n2 has no disruption lease (namespace "+lease.DefaultNamespace+"); nothing to release\n", out.String())

	err = o.releaseLease(t.Context(), cs, "no-such-node", "fw-updater")
	require.True(t, apierrors.IsNotFound(err), "got %v", err)
}
