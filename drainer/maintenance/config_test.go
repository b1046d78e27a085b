package maintenance

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/hostfiles"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/options"
	"lull.dev/lull/lease"
)

var boundFiles = []lullv1alpha1.ConfigFile{
	{Path: "/etc/chrony.conf", Previous: hostfiles.SHA256([]byte("pool a\n")), Contents: []byte("pool b\n")},
}

// configRequest is a request about to start (the gates let it through)
// that writes NodeConfig config, and a cluster holding objs.
func configRequest(t *testing.T, config string, started bool, objs ...client.Object) (*step, client.Client) {
	t.Helper()
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "req-1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Changes: &lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}, Config: config}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForBudget,
			Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionNone, Rule: "chrony", Config: config,
				Steps: []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.StepWriteFiles}}}}}
	if started {
		nm.Status.StartedAt = &metav1.Time{Time: t0()}
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(append(objs, nm)...).WithStatusSubresource(nm).Build()
	r := &Reconciler{Client: c, Metrics: NewMetrics(c), Options: options.DefaultMaintenance(),
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"},
		Leases: lease.New(kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-1"}}),
			lease.Options{Namespace: "lull-leases", Clock: clocktesting.NewFakeClock(t0())})}
	r.Options.Identity = "lull-drainer/x"
	return &step{r: r, logger: klog.Background(), nm: nm, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		now: t0(), status: nm.Status.DeepCopy()}, c
}

// A request that writes a NodeConfig records, when it starts, which one:
// its UID and the hash of its files, read from the API server. A request
// started before keeps its decision as it is (one started by a drainer
// that recorded neither stays so: lull-agent then knows its NodeConfig by
// name), and one that writes nothing reads nothing.
func TestConfigBoundWhenTheRequestStarts(t *testing.T) {
	nc := &lullv1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: lullv1alpha1.ConfigNamespace, UID: "c1-uid-1", Generation: 1},
		Spec: lullv1alpha1.NodeConfigSpec{Files: boundFiles}}
	for _, tc := range []struct {
		name             string
		config           string
		started          bool
		wantUID, wantSHA string
	}{
		{name: "about to start", config: "c1", wantUID: "c1-uid-1", wantSHA: hostfiles.ConfigSHA256(boundFiles)},
		{name: "started before", config: "c1", started: true},
		{name: "writes nothing", config: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := configRequest(t, tc.config, tc.started, nc)
			require.Empty(t, s.bindConfig(context.Background()))
			require.Equal(t, types.UID(tc.wantUID), s.status.Decision.ConfigUID)
			require.Equal(t, tc.wantSHA, s.status.Decision.ConfigSHA256)
		})
	}
}

// A request whose NodeConfig does not exist when every gate lets it
// start does not start: it waits, Pending, saying why, and gives back the
// budget slot and the lease the gates took. Binding the NodeConfig is not
// a new policy decision.
func TestRequestWithoutItsNodeConfigWaitsHoldingNothing(t *testing.T) {
	ctx := context.Background()
	s, c := configRequest(t, "gone", false)
	res, err := s.r.Budget.Reserve(ctx, c, s.nm, budget.Request{Node: "n1", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.True(t, res.Free)
	_, err = s.acquire(ctx)
	require.NoError(t, err)

	msg := s.bindConfig(ctx)
	require.Equal(t, "NodeConfig lull-configs/gone, which the request writes (spec.changes.config), does not exist: the request starts once it does", msg)
	after, err := s.waitForConfig(ctx, msg)
	require.NoError(t, err)
	require.Equal(t, configRetry, after.RequeueAfter)

	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, lullv1alpha1.PhasePending, nm.Status.Phase)
	require.Equal(t, msg, nm.Status.WaitingFor)
	require.Nil(t, nm.Status.StartedAt)
	require.Empty(t, nm.Status.Decision.ConfigUID)
	entries, err := s.r.Budget.Entries(ctx)
	require.NoError(t, err)
	require.NotContains(t, entries, "n1", "the budget slot given back")
	held, err := s.r.Leases.Get(ctx, "n1")
	require.NoError(t, err)
	require.True(t, held == nil || held.Holder == "", "the lease released: %+v", held)

	d := *nm.Status.Decision
	bound := d
	bound.ConfigUID, bound.ConfigSHA256 = "c1-uid-1", hostfiles.ConfigSHA256(boundFiles)
	require.True(t, sameDecision(d, bound), "binding is not announced as a new decision")
	bound.Rule = "other"
	require.False(t, sameDecision(d, bound))
}
