package maintenance

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// redteamEnv is newSilenceEnv with a client that keeps the status
// subresource and the objects a request's end touches (its node, a
// labelled credentials Secret), and a reconciler that can end requests
// (leases, budget).
func redteamEnv(t *testing.T, withSecret bool) (*silenceEnv, client.Client) {
	e := newSilenceEnv(t)
	e.node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	objs := []client.Object{e.node}
	if withSecret {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "am", Namespace: lullv1alpha1.ConfigNamespace,
			Labels: map[string]string{lullv1alpha1.AlertsCredentialsLabel: "true"}},
			Data: map[string][]byte{"token": []byte("s3cret"), "url": []byte(e.url), "insecure-http": []byte("true")}})
		e.w.Spec.Silences.SecretName = "am"
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	e.r = &Reconciler{Client: c, APIReader: c, Secrets: c, Clock: e.clk,
		Kube:    kubefake.NewClientset(),
		Leases:  lease.New(kubefake.NewClientset(), lease.Options{Namespace: "lull-system", Clock: e.clk}),
		Budget:  &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/test", Clock: e.clk},
		Options: Options{Settings: settings.Defaults()}}
	e.r.Options.Default()
	return e, c
}

// silenced makes the node's silence as the round entering Acting does and
// stores the request (finalizer, status) as lull would have.
func (e *silenceEnv) silenced(c client.Client, st *lullv1alpha1.NodeMaintenanceStatus) {
	e.t.Helper()
	ctx := context.Background()
	require.NoError(e.t, e.step(st).syncSilence(ctx, st.Phase))
	require.NotNil(e.t, st.Silence)
	e.nm.Finalizers = []string{Finalizer}
	require.NoError(e.t, c.Create(ctx, e.nm))
	e.nm.Status = *st
	require.NoError(e.t, c.Status().Update(ctx, e.nm))
}

// Red team (silences), finding 5: lull uninstalled expires no silence
// whose window names a Secret. The uninstall (drainer/app endRequests)
// builds the Reconciler that runs WindDown without Secrets (nor
// ConfigNamespace): its last save cannot read the credentials ("no reader
// of Secrets"), the failure is only reported, and the finalizer goes.
// The node's alerts stay silenced up to the silence's duration (24h at
// most) after lull is gone, though the promise lists "uninstalled" among
// the ends that expire it.
func TestRedteamSilenceUninstallExpiresIt(t *testing.T) {
	e, c := redteamEnv(t, true)
	ctx := context.Background()
	e.silenced(c, rebooting())
	require.Len(t, e.am.active(), 1)

	// As drainer/app's endRequests builds it (with the Secrets since the
	// finding).
	r := &Reconciler{Client: c, APIReader: c, Secrets: c, Kube: kubefake.NewClientset(), Clock: e.clk, Options: e.r.Options,
		Leases: lease.New(kubefake.NewClientset(), lease.Options{Namespace: "lull-system", Clock: e.clk})}
	n, err := r.WindDown(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, e.am.active(), "lull was uninstalled, yet the node's silence is still active in Alertmanager (requests %v)", e.am.requests)
}

// Red team (silences), finding 6: a request deleted while its node is
// down, in a moment when Alertmanager does not answer, loses its
// finalizer at once: finalize completes it (the silence could not be
// expired, which is only reported) and removes the finalizer, so the
// record that would have let lull expire the silence is gone. The
// working tree's new check in finalize only covers a request already
// finished before it was deleted.
func TestRedteamSilenceDeletedWhileDownKeepsFinalizerUntilExpired(t *testing.T) {
	e, c := redteamEnv(t, false)
	ctx := context.Background()
	e.silenced(c, rebooting())
	require.NoError(t, c.Delete(ctx, e.nm))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(e.nm), e.nm))
	require.NotNil(t, e.nm.DeletionTimestamp)

	e.am.mu.Lock()
	e.am.down = true
	e.am.mu.Unlock()
	_, err := e.r.finalize(ctx, e.nm, e.node)
	require.NoError(t, err)

	var got lullv1alpha1.NodeMaintenance
	err = c.Get(ctx, client.ObjectKeyFromObject(e.nm), &got)
	require.Len(t, e.am.active(), 1, "the silence is still active in Alertmanager")
	require.False(t, apierrors.IsNotFound(err),
		"the deleted request is gone (finalizer removed) while its silence is active and unexpired: nothing will expire it")
}

// Red team (silences), finding 7: a request that completes while
// Alertmanager does not answer keeps status.silence but loses its
// finalizer in the same round (finishAs removes it whatever the silence):
// the reconcile loop's "the finalizer and the record stay until the
// silence is seen expired" does not hold, and deleting the finished record
// (kubectl lull request, kubectl delete) drops the last trace of a
// silence that is still active.
func TestRedteamSilenceCompletedKeepsFinalizerUntilExpired(t *testing.T) {
	e, c := redteamEnv(t, false)
	ctx := context.Background()
	st := rebooting()
	e.silenced(c, st)
	// The node is back.
	e.nm.Status.Actions[0].State = lullv1alpha1.ActionSucceeded
	require.NoError(t, c.Status().Update(ctx, e.nm))

	e.am.mu.Lock()
	e.am.down = true
	e.am.mu.Unlock()
	_, err := e.r.complete(ctx, e.nm, e.node, false)
	require.NoError(t, err)
	var got lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(e.nm), &got))
	require.Equal(t, lullv1alpha1.PhaseCompleted, got.Status.Phase)
	require.NotNil(t, got.Status.Silence, "not seen expired: the record stays")
	require.True(t, controllerutil.ContainsFinalizer(&got, Finalizer),
		"the finalizer went with the silence still recorded and active (%v): a delete now forgets it", e.am.active())
}

// Red team (silences), finding 8: lull puts a new silence with startsAt
// = its own now and refuses it unless Alertmanager shows it active at
// once. An Alertmanager whose clock is behind lull's (by more than the
// round's own latency) keeps it pending: the round entering Acting fails,
// and every retry makes another pending silence (adoption only looks at
// active ones). Once lull adopts one, the others turn active on their own
// and lull never expires them: the node's alerts stay silenced after it
// is back, up to the silence's duration.
func TestRedteamSilenceAlertmanagerClockBehind(t *testing.T) {
	e := newSilenceEnv(t)
	e.am.now = func() time.Time { return e.clk.Now().Add(-25 * time.Second) }
	ctx := context.Background()
	st := rebooting()
	var err error
	for range 4 {
		if err = e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing); err == nil {
			break
		}
		e.clk.Step(silenceRetry)
	}
	require.NoError(t, err)
	// The node comes back at once: lull expires its silence.
	st.Actions[0].State = lullv1alpha1.ActionSucceeded
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Nil(t, st.Silence)
	e.clk.Step(time.Minute)
	require.Empty(t, e.am.active(), "silences lull made for the request are still active after the node is back and lull expired 'its' silence")
}

// Red team (silences), finding 9: a silence someone expired is made again
// when lull's next look comes after the recorded end (lull restarted or
// failed over, its worker busy, a 1m duration): keepSilence only calls it
// withdrawn while lull's now is before rec.EndsAt, although Alertmanager's
// endsAt (well before the recorded end) already says someone expired it.
func TestRedteamSilenceWithdrawnSeenLate(t *testing.T) {
	e := newSilenceEnv(t)
	ctx := context.Background()
	st := rebooting()
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	e.clk.Step(time.Minute)
	e.am.expire(st.Silence.ID) // on call: "I want this node's alerts"
	e.clk.Step(lullv1alpha1.DefaultSilenceDuration)
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Empty(t, e.am.active(), "a silence someone expired was made again for the same request")
	require.True(t, st.Silence.Withdrawn)
}

// Red team (silences), finding 10: any 404 on /api/v2/silence/{id} is
// taken for "Alertmanager does not know the silence", and lull forgets
// the silence as if seen expired (event SilenceExpired: "its alerts page
// again"). A 404 from something in front of Alertmanager (an ingress'
// default backend during a rollout, a wrong route) is not Alertmanager's:
// the silence stays active, unrecorded, for up to its duration after the
// node is back.
func TestRedteamSilenceNotFoundFromAProxyIsNotExpired(t *testing.T) {
	e := newSilenceEnv(t)
	var mu sync.Mutex
	proxy404 := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		p := proxy404
		mu.Unlock()
		if p {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("<html><body>default backend - 404</body></html>"))
			return
		}
		e.am.ServeHTTP(w, r)
	}))
	defer srv.Close()
	e.w.Spec.Silences.URL = srv.URL
	ctx := context.Background()
	st := rebooting()
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	mu.Lock()
	proxy404 = true
	mu.Unlock()
	st.Actions[0].State = lullv1alpha1.ActionSucceeded
	err := e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing)
	require.Len(t, e.am.active(), 1, "the silence is still active in Alertmanager")
	require.True(t, err != nil || st.Silence != nil,
		"lull forgot the silence as expired on a 404 that Alertmanager never gave; the silence is still active")
}

// Red team (silences), finding 11: nothing schedules the round that
// extends a silence. The save that keeps it returns the phase's own
// requeue: in PoweredOff, --lease-duration/3. With a window's duration of
// 1m (allowed) and a node lease of 6m (allowed: any positive duration),
// the next round comes 2m later: the silence has lapsed for a minute and
// the powered-off node pages although lull holds it down on purpose.
func TestRedteamSilenceRoundBeforeItLapses(t *testing.T) {
	e, c := redteamEnv(t, false)
	e.w.Spec.Silences.Duration = &lullv1alpha1.Duration{Duration: time.Minute}
	e.r.Options.LeaseDuration = 6 * time.Minute
	ctx := context.Background()
	st := rebooting()
	st.Actions = []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepPowerOff, State: lullv1alpha1.ActionSucceeded}}
	st.Phase = lullv1alpha1.PhasePoweredOff
	e.silenced(c, st)
	s := e.step(e.nm.Status.DeepCopy())
	// As poweredOff saves.
	res, err := s.save(ctx, lullv1alpha1.PhasePoweredOff, reconcile.Result{RequeueAfter: e.r.Options.LeaseDuration / 3})
	require.NoError(t, err)
	require.NotNil(t, s.status.Silence)
	left := s.status.Silence.EndsAt.Sub(e.clk.Now())
	require.Positive(t, res.RequeueAfter)
	require.Less(t, res.RequeueAfter, left,
		"the next round (in %s) comes after the silence ends (in %s): it lapses while the node is down on purpose", res.RequeueAfter, left)
}

// Red team (silences), finding 1 through the controller: the silence ID
// Alertmanager answers is used as a path, and the read-back right after
// the POST carries the Secret's token outside the Secret's url.
func TestRedteamSilenceIDFromAlertmanagerStaysUnderTheURL(t *testing.T) {
	e := newSilenceEnv(t)
	var mu sync.Mutex
	var outside []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/am/api/v2/silences":
			_ = json.NewEncoder(w).Encode(map[string]string{"silenceID": "../../../../grafana/api/admin/users"})
		case r.Method == http.MethodGet && r.URL.Path == "/am/api/v2/silences":
			_, _ = w.Write([]byte("[]"))
		case !strings.HasPrefix(r.URL.Path, "/am/"):
			mu.Lock()
			outside = append(outside, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
			mu.Unlock()
			_, _ = w.Write([]byte(`{"id":"x","status":{"state":"active"},"matchers":[],"endsAt":"2099-01-01T00:00:00Z"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "am", Namespace: lullv1alpha1.ConfigNamespace,
		Labels: map[string]string{lullv1alpha1.AlertsCredentialsLabel: "true"}},
		Data: map[string][]byte{"token": []byte("s3cret"), "url": []byte(srv.URL + "/am"), "insecure-http": []byte("true")}}
	require.NoError(t, e.r.Client.Create(context.Background(), secret))
	e.w.Spec.Silences.URL, e.w.Spec.Silences.SecretName = srv.URL+"/am", "am"
	_ = e.step(rebooting()).syncSilence(context.Background(), lullv1alpha1.PhaseActing)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, outside, "lull sent requests outside the Secret's url %s/am", srv.URL)
}
