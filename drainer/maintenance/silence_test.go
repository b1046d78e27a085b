package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// fakeAM keeps silences as Alertmanager's API v2 does, on the test's
// clock: a POST with the ID of an active silence whose matchers and start
// are unchanged updates it in place; any other POST with an ID expires
// the old one and makes a new one; DELETE expires.
type fakeAM struct {
	mu       sync.Mutex
	now      func() time.Time
	silences map[string]map[string]any
	order    []string
	next     int
	requests []string
	auth     []string
	down     bool
}

func (a *fakeAM) state(s map[string]any) string {
	ends, _ := time.Parse(time.RFC3339Nano, s["endsAt"].(string))
	starts, _ := time.Parse(time.RFC3339Nano, s["startsAt"].(string))
	switch now := a.now(); {
	case !now.Before(ends):
		return "expired"
	case now.Before(starts):
		return "pending"
	}
	return "active"
}

func (a *fakeAM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, r.Method+" "+r.URL.Path)
	a.auth = append(a.auth, r.Header.Get("Authorization"))
	if a.down {
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
		return
	}
	out := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	with := func(s map[string]any) map[string]any {
		c := map[string]any{}
		for k, v := range s {
			c[k] = v
		}
		c["status"] = map[string]any{"state": a.state(s)}
		return c
	}
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	switch {
	case r.URL.Path == "/api/v2/status":
		out(map[string]any{"uptime": "2026-01-01T00:00:00Z"})
	case r.Method == http.MethodPost && r.URL.Path == "/api/v2/silences":
		var s map[string]any
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if id, _ := s["id"].(string); id != "" {
			old, ok := a.silences[id]
			if !ok {
				http.Error(w, "not found", http.StatusNotFound)
				return
			}
			if a.state(old) == "active" && fmt.Sprint(old["matchers"]) == fmt.Sprint(s["matchers"]) && old["startsAt"] == s["startsAt"] {
				old["endsAt"] = s["endsAt"]
				out(map[string]string{"silenceID": id})
				return
			}
			if a.state(old) == "active" {
				old["endsAt"] = stamp(a.now())
			}
		}
		a.next++
		id := fmt.Sprintf("s%d", a.next)
		s["id"] = id
		if starts, _ := time.Parse(time.RFC3339Nano, s["startsAt"].(string)); starts.Before(a.now()) {
			s["startsAt"] = stamp(a.now())
		}
		a.silences[id] = s
		a.order = append(a.order, id)
		out(map[string]string{"silenceID": id})
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/silences":
		list := []map[string]any{}
		for _, id := range a.order {
			list = append(list, with(a.silences[id]))
		}
		out(list)
	case strings.HasPrefix(r.URL.Path, "/api/v2/silence/"):
		s, ok := a.silences[strings.TrimPrefix(r.URL.Path, "/api/v2/silence/")]
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if r.Method == http.MethodDelete {
			if a.state(s) == "active" {
				s["endsAt"] = stamp(a.now())
			}
			return
		}
		out(with(s))
	default:
		http.Error(w, "not served", http.StatusNotFound)
	}
}

// active are the IDs of the silences active now.
func (a *fakeAM) active() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, id := range a.order {
		if a.state(a.silences[id]) == "active" {
			out = append(out, id)
		}
	}
	return out
}

// expire expires a silence as a person would (DELETE).
func (a *fakeAM) expire(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.silences[id]["endsAt"] = a.now().UTC().Format(time.RFC3339Nano)
}

// silenceEnv is one request of node n1, under a window with silences, and
// an Alertmanager.
type silenceEnv struct {
	t    *testing.T
	clk  *clocktesting.FakeClock
	am   *fakeAM
	url  string
	r    *Reconciler
	nm   *lullv1alpha1.NodeMaintenance
	node *corev1.Node
	w    *lullv1alpha1.MaintenanceWindow
}

func newSilenceEnv(t *testing.T, objs ...client.Object) *silenceEnv {
	clk := clocktesting.NewFakeClock(t0())
	am := &fakeAM{now: clk.Now, silences: map[string]map[string]any{}}
	srv := httptest.NewServer(am)
	t.Cleanup(srv.Close)
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Silences: &lullv1alpha1.Silences{URL: srv.URL}}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	return &silenceEnv{t: t, clk: clk, am: am, url: srv.URL, w: w,
		r:    &Reconciler{Client: c, Secrets: c, Clock: clk},
		nm:   &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1"}},
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
}

// step is a round of the request, its status st, now.
func (e *silenceEnv) step(st *lullv1alpha1.NodeMaintenanceStatus) *step {
	return &step{r: e.r, logger: klog.Background(), nm: e.nm, node: e.node, now: e.clk.Now(), status: st,
		ws: []*lullv1alpha1.MaintenanceWindow{e.w}, wsLoaded: true}
}

// rebooting is a request whose reboot is handed out.
func rebooting() *lullv1alpha1.NodeMaintenanceStatus {
	return &lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing, Actions: []lullv1alpha1.ActionStatus{
		{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning, Timeout: lullv1alpha1.Duration{Duration: 15 * time.Minute}}}}
}

// A node lull reboots has one silence of its own, seen active, with the
// node's name in its matchers; lull extends it in place while the node is
// down, adopts the one a lost status write left behind instead of making
// another, and expires it, seen expired, once the node is back.
func TestSilenceFollowsTheNodeDown(t *testing.T) {
	e := newSilenceEnv(t)
	ctx := context.Background()
	st := rebooting()
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.NotNil(t, st.Silence)
	require.Equal(t, []string{st.Silence.ID}, e.am.active())
	require.Equal(t, []string{`node="n1"`}, st.Silence.Matchers)
	require.Equal(t, "pool", st.Silence.Window)
	require.Equal(t, t0().Add(lullv1alpha1.DefaultSilenceDuration), st.Silence.EndsAt.Time)
	require.True(t, meta.IsStatusConditionTrue(st.Conditions, ConditionSilenced))
	first := st.Silence.ID

	// Fresh: nothing is asked.
	n := len(e.am.requests)
	e.clk.Step(time.Minute)
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Len(t, e.am.requests, n, "a fresh silence is not asked about")

	// Past half its duration: extended in place.
	e.clk.Step(5 * time.Minute)
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Equal(t, first, st.Silence.ID, "extended in place")
	require.Equal(t, e.clk.Now().Add(lullv1alpha1.DefaultSilenceDuration), st.Silence.EndsAt.Time)
	require.Equal(t, []string{first}, e.am.active())

	// A status write lost: the next round adopts the silence.
	lost := rebooting()
	require.NoError(t, e.step(lost).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Equal(t, first, lost.Silence.ID, "adopted, not made again")
	require.Equal(t, []string{first}, e.am.active())

	// The node is back: the silence goes.
	back := rebooting()
	back.Silence = st.Silence
	back.Actions[0].State = lullv1alpha1.ActionSucceeded
	require.False(t, back.DownOnPurpose())
	require.NoError(t, e.step(back).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Nil(t, back.Silence)
	require.Empty(t, e.am.active())
	c := meta.FindStatusCondition(back.Conditions, ConditionSilenced)
	require.Equal(t, ReasonSilenceExpired, c.Reason)
}

// Whatever ends the request (completed, aborted, a reboot that timed
// out: a node still down then is news) expires the silence; a powered-off
// node keeps it.
func TestSilenceEndsWithThePurpose(t *testing.T) {
	for name, tc := range map[string]struct {
		phase lullv1alpha1.MaintenancePhase
		state lullv1alpha1.ActionState
		kept  bool
	}{
		"completed":         {lullv1alpha1.PhaseCompleted, lullv1alpha1.ActionSucceeded, false},
		"failed":            {lullv1alpha1.PhaseFailed, lullv1alpha1.ActionRunning, false},
		"reboot timed out":  {lullv1alpha1.PhaseActing, lullv1alpha1.ActionTimedOut, false},
		"uncordoning":       {lullv1alpha1.PhaseUncordoning, lullv1alpha1.ActionSucceeded, false},
		"still rebooting":   {lullv1alpha1.PhaseActing, lullv1alpha1.ActionRunning, true},
		"reboot not yet":    {lullv1alpha1.PhaseActing, lullv1alpha1.ActionPending, true},
		"powered off, held": {lullv1alpha1.PhasePoweredOff, lullv1alpha1.ActionSucceeded, true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newSilenceEnv(t)
			ctx := context.Background()
			st := rebooting()
			require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
			st.Actions[0].State = tc.state
			require.NoError(t, e.step(st).syncSilence(ctx, tc.phase))
			require.Equal(t, tc.kept, st.Silence != nil)
			require.Equal(t, tc.kept, len(e.am.active()) == 1)
		})
	}
}

// Someone who expires lull's silence wants the node's alerts: lull does
// not make it again for this request, and says so.
func TestSilenceWithdrawnIsNotMadeAgain(t *testing.T) {
	e := newSilenceEnv(t)
	ctx := context.Background()
	st := rebooting()
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	e.am.expire(st.Silence.ID)
	e.clk.Step(6 * time.Minute)
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.True(t, st.Silence.Withdrawn)
	require.Empty(t, e.am.active(), "not made again")
	e.clk.Step(6 * time.Minute)
	n := len(e.am.requests)
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Len(t, e.am.requests, n, "not asked again")
	c := meta.FindStatusCondition(st.Conditions, ConditionSilenced)
	require.Equal(t, ReasonSilenceWithdrawn, c.Reason)

	// Its end still clears the record.
	st.Actions[0].State = lullv1alpha1.ActionSucceeded
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Nil(t, st.Silence)
}

// A silence that lapsed while lull was away (lull stopped longer than its
// duration) is made again, as a new one, while the node is still down.
func TestSilenceLapsedIsMadeAgain(t *testing.T) {
	e := newSilenceEnv(t)
	ctx := context.Background()
	st := rebooting()
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	first := st.Silence.ID
	e.clk.Step(11 * time.Minute)
	require.Empty(t, e.am.active(), "expired by itself")
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.NotEqual(t, first, st.Silence.ID)
	require.False(t, st.Silence.Withdrawn)
	require.Equal(t, []string{st.Silence.ID}, e.am.active())

	// An Alertmanager that forgot it (restarted without its storage): made
	// again.
	e.am.mu.Lock()
	delete(e.am.silences, st.Silence.ID)
	e.am.order = nil
	e.am.mu.Unlock()
	e.clk.Step(6 * time.Minute)
	second := st.Silence.ID
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.NotEqual(t, second, st.Silence.ID)
	require.Equal(t, []string{st.Silence.ID}, e.am.active())
}

// An Alertmanager that fails is reported (condition, one event) and not
// asked again in the same moment; the request is told what to do.
func TestSilenceNotKeptIsReported(t *testing.T) {
	e := newSilenceEnv(t)
	ctx := context.Background()
	e.am.down = true
	st := rebooting()
	st.Phase = lullv1alpha1.PhaseDraining
	s := e.step(st)
	err := s.syncSilence(ctx, lullv1alpha1.PhaseActing)
	require.Error(t, err)
	require.Contains(t, err.Error(), "503")
	msg := s.silenceNotKept(err)
	require.Contains(t, msg, "before lull-agent takes it down")
	require.Contains(t, msg, "remove spec.silences")
	require.Nil(t, st.Silence)
	n := len(e.am.requests)
	require.Error(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.Len(t, e.am.requests, n, "not asked again moments later")
	e.am.down = false
	e.clk.Step(silenceRetry)
	require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
	require.NotNil(t, st.Silence)
}

// The silence's credentials are bound as an alerts gate's: a Secret
// without the label, or whose url names another server, sends nothing.
func TestSilenceCredentialsBound(t *testing.T) {
	secret := func(name string, labels map[string]string, url string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lullv1alpha1.ConfigNamespace, Labels: labels},
			Data: map[string][]byte{"token": []byte("s3cret"), "url": []byte(url), "insecure-http": []byte("true")}}
	}
	label := map[string]string{lullv1alpha1.AlertsCredentialsLabel: "true"}
	for name, tc := range map[string]struct {
		secret *corev1.Secret
		err    string
	}{
		"unlabelled":     {secret("am", nil, "URL"), "lacks the label"},
		"another server": {secret("am", label, "http://alertmanager.example:9093"), "may be sent only to"},
		"bound":          {secret("am", label, "URL"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			e := newSilenceEnv(t)
			tc.secret.Data["url"] = []byte(strings.ReplaceAll(string(tc.secret.Data["url"]), "URL", e.url))
			require.NoError(t, e.r.Client.Create(context.Background(), tc.secret))
			e.w.Spec.Silences.SecretName = "am"
			st := rebooting()
			err := e.step(st).syncSilence(context.Background(), lullv1alpha1.PhaseActing)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Empty(t, e.am.requests, "nothing sent")
				return
			}
			require.NoError(t, err)
			for _, a := range e.am.auth {
				require.Equal(t, "Bearer s3cret", a)
			}
		})
	}
}

// The window's matchers, the node's name put in (escaped in a regular
// expression); one that does not name the node by equality is refused.
func TestSilenceMatchersNameTheNode(t *testing.T) {
	e := newSilenceEnv(t)
	e.node.Name, e.nm.Spec.NodeName = "n1.example", "n1.example"
	e.w.Spec.Silences.Matchers = []string{`instance="$(NODE_NAME):9100"`, `node=~"$(NODE_NAME)|"`, `severity!="info"`}
	st := rebooting()
	require.NoError(t, e.step(st).syncSilence(context.Background(), lullv1alpha1.PhaseActing))
	require.Equal(t, []string{`instance="n1.example:9100"`, `node=~"n1\\.example|"`, `severity!="info"`}, st.Silence.Matchers)

	e = newSilenceEnv(t)
	e.w.Spec.Silences.Matchers = []string{`node=~"$(NODE_NAME)|.*"`}
	st = rebooting()
	require.ErrorContains(t, e.step(st).syncSilence(context.Background(), lullv1alpha1.PhaseActing), "none is an equality matcher naming the node")
	require.Empty(t, e.am.requests)
}

// An ended request whose last round could not expire its silence keeps
// the record (and its finalizer) until the silence is seen expired, or
// until it has passed its end: at most its duration.
func TestSilenceOfAnEndedRequest(t *testing.T) {
	for _, reachable := range []bool{true, false} {
		t.Run(fmt.Sprintf("Alertmanager reachable %v", reachable), func(t *testing.T) {
			e := newSilenceEnv(t)
			ctx := context.Background()
			st := rebooting()
			require.NoError(t, e.step(st).syncSilence(ctx, lullv1alpha1.PhaseActing))
			id := st.Silence.ID
			st.Phase = lullv1alpha1.PhaseCompleted
			require.NoError(t, e.r.Client.Create(ctx, e.nm))
			e.nm.Status = *st
			require.NoError(t, e.r.Client.Status().Update(ctx, e.nm))
			e.am.down = !reachable
			require.NoError(t, e.r.expireFinished(ctx, e.nm, e.node))
			if reachable {
				require.Nil(t, e.nm.Status.Silence)
				require.Empty(t, e.am.active())
				return
			}
			require.NotNil(t, e.nm.Status.Silence, "kept while it may still silence")
			require.Equal(t, id, e.nm.Status.Silence.ID)
			e.clk.Step(lullv1alpha1.DefaultSilenceDuration)
			require.NoError(t, e.r.expireFinished(ctx, e.nm, e.node))
			require.Nil(t, e.nm.Status.Silence, "past its end it has expired by itself")
		})
	}
}

// An Alertmanager that does not answer is not asked again by every other
// request in the same moment (reconciles run one at a time); each says
// why, and they all try again once silenceRetry has passed.
func TestSilenceAlertmanagerAwayIsNotAskedByEveryone(t *testing.T) {
	e := newSilenceEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: connection refused
	e.w.Spec.Silences.URL = refused
	ctx := context.Background()
	err = e.step(rebooting()).syncSilence(ctx, lullv1alpha1.PhaseActing)
	require.ErrorContains(t, err, "connection refused")

	other := e.step(rebooting())
	other.nm = &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-2"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2"}}
	other.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	err = other.syncSilence(ctx, lullv1alpha1.PhaseActing)
	require.ErrorContains(t, err, "did not answer at", "not asked again in the same moment")

	e.clk.Step(silenceRetry)
	other.now = e.clk.Now()
	err = other.syncSilence(ctx, lullv1alpha1.PhaseActing)
	require.ErrorContains(t, err, "connection refused", "asked again once silenceRetry has passed")
}
