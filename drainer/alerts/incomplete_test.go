package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeRule is one rule in a fake /api/v1/rules answer.
type fakeRule struct {
	Type     string            `json:"type"` // alerting or recording
	Name     string            `json:"name"`
	Duration float64           `json:"duration,omitempty"` // for:, in seconds
	Labels   map[string]string `json:"labels"`
}

// fakeGroup is one rule group in a fake /api/v1/rules answer.
type fakeGroup struct {
	Name           string     `json:"name"`
	File           string     `json:"file"`
	Interval       float64    `json:"interval"` // seconds
	LastEvaluation time.Time  `json:"lastEvaluation"`
	Rules          []fakeRule `json:"rules"`
}

// fakeProm is a Prometheus (or Alertmanager) the test sets: it answers
// /api/v1/status/runtimeinfo, /api/v1/rules and /api/v1/alerts
// (/api/v2/status and /api/v2/alerts), and records what it was asked.
type fakeProm struct {
	mu sync.Mutex
	// StartTime and LastConfigTime are runtimeinfo's.
	StartTime, LastConfigTime time.Time
	// Groups are the rule groups.
	Groups []fakeGroup
	// Alerts is /api/v1/alerts' data.alerts, or /api/v2/alerts' list.
	Alerts string
	// Uptime is Alertmanager's /api/v2/status uptime (when it started).
	Uptime time.Time
	// Extra is added to the top level of an answer, by path
	// ("alerts", "rules", "runtimeinfo"), e.g. `"warnings":["..."]`.
	Extra map[string]string
	// Status answers a path ("runtimeinfo", "rules", "status") with this
	// status and body instead.
	Status map[string]struct {
		Code int
		Body string
	}

	seen []string // path?query of each request
}

func (p *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, r.URL.RequestURI())
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	if s, ok := p.Status[name]; ok {
		w.WriteHeader(s.Code)
		_, _ = w.Write([]byte(s.Body))
		return
	}
	extra := ""
	if e := p.Extra[name]; e != "" {
		extra = "," + e
	}
	w.Header().Set("Content-Type", "application/json")
	mustJSON := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	switch r.URL.Path {
	case "/api/v1/status/runtimeinfo":
		fmt.Fprintf(w, `{"status":"success","data":{"startTime":%s,"CWD":"/prometheus","reloadConfigSuccess":true,"lastConfigTime":%s,"storageRetention":"15d"}%s}`,
			mustJSON(p.StartTime), mustJSON(p.LastConfigTime), extra)
	case "/api/v1/rules":
		groups := p.Groups
		if groups == nil {
			groups = []fakeGroup{}
		}
		fmt.Fprintf(w, `{"status":"success","data":{"groups":%s}%s}`, mustJSON(groups), extra)
	case "/api/v1/alerts":
		fmt.Fprintf(w, `{"status":"success","data":{"alerts":%s}%s}`, p.Alerts, extra)
	case "/api/v2/status":
		fmt.Fprintf(w, `{"cluster":{"status":"ready","peers":[]},"config":{"original":"receivers:\n- name: x\n  webhook_configs:\n  - url: https://hooks.example/SECRET-HOOK\n"},"uptime":%s,"versionInfo":{"version":"0.34.1"}}`,
			mustJSON(p.Uptime))
	case "/api/v2/alerts":
		_, _ = w.Write([]byte(p.Alerts))
	default:
		http.NotFound(w, r)
	}
}

func (p *fakeProm) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// start serves p for the test.
func (p *fakeProm) start(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv
}

// nodeDownFiring is one firing NodeDown alert, as /api/v1/alerts lists it.
const nodeDownFiring = `[{"labels":{"alertname":"NodeDown","instance":"n1","severity":"page"},"state":"firing","activeAt":"2026-11-25T09:00:00Z"}]`

// nodeDownPending is NodeDown pending: with firingOnly, it does not count.
const nodeDownPending = `[{"labels":{"alertname":"NodeDown","instance":"n1","severity":"page"},"state":"pending","activeAt":"2026-11-25T10:00:04Z"}]`

// steady is a Prometheus started an hour before t0 whose rules are
// evaluated every 30s, the last time just now: NodeDown (for: 5m,
// severity page), Watchdog, and a recording rule in a group of its own.
func steady() *fakeProm {
	return &fakeProm{
		StartTime:      t0.Add(-time.Hour),
		LastConfigTime: t0.Add(-time.Hour).Truncate(time.Second),
		Groups: []fakeGroup{
			{Name: "node", File: "/etc/prometheus/rules/node.yaml", Interval: 30, LastEvaluation: t0.Add(-10 * time.Second), Rules: []fakeRule{
				{Type: "alerting", Name: "NodeDown", Duration: 300, Labels: map[string]string{"severity": "page"}},
				{Type: "alerting", Name: "Watchdog", Labels: map[string]string{"severity": "none"}},
			}},
			{Name: "records", File: "/etc/prometheus/rules/records.yaml", Interval: 60, LastEvaluation: t0.Add(-20 * time.Second), Rules: []fakeRule{
				{Type: "recording", Name: "node:up:sum", Labels: map[string]string{}},
			}},
		},
		Alerts: `[]`,
	}
}

// young is steady, restarted at t0 (its for: state lost, as with an
// emptyDir store): NodeDown's group evaluated 4s later, the recording
// rules' not yet.
func young() *fakeProm {
	p := steady()
	p.StartTime, p.LastConfigTime = t0.Add(123*time.Millisecond), t0
	p.Groups[0].LastEvaluation = t0.Add(4 * time.Second)
	p.Groups[1].LastEvaluation = time.Time{}
	p.Alerts = nodeDownPending
	return p
}

func pageFilter(t *testing.T, firingOnly bool) Filter {
	t.Helper()
	f, err := ParseFilter([]string{`severity="page"`}, []string{"Watchdog"}, firingOnly)
	require.NoError(t, err)
	return f
}

// An answer the server flags as partial (Thanos' and Prometheus'
// "warnings", VictoriaMetrics' "isPartial") is not an answer: the gate
// holds, naming the warning.
func TestPartialAnswerHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		path  string
		extra string
		want  []string
	}{
		{name: "alerts warnings", path: "alerts", extra: `"warnings":["partial response: store 10.0.0.7:10901 unreachable: context deadline exceeded"]`,
			want: []string{`the answer may be incomplete: the server warns "partial response: store 10.0.0.7:10901 unreachable: context deadline exceeded"`}},
		{name: "several warnings", path: "alerts", extra: `"warnings":["ruler-0 unreachable","ruler-1 unreachable","ruler-2 unreachable"]`,
			want: []string{`the server warns "ruler-0 unreachable" (and 2 more warnings)`}},
		{name: "isPartial", path: "alerts", extra: `"isPartial":true`,
			want: []string{`the answer may be incomplete: the server flags it as partial (isPartial)`}},
		{name: "partialResponse", path: "alerts", extra: `"partialResponse":true`,
			want: []string{`the server flags it as partial (partialResponse)`}},
		{name: "rules warnings", path: "rules", extra: `"warnings":["rule group sync failed on ruler-1"]`,
			want: []string{`/api/v1/rules`, `the server warns "rule group sync failed on ruler-1"`}},
		{name: "runtimeinfo warnings", path: "runtimeinfo", extra: `"warnings":["odd"]`,
			want: []string{`/api/v1/status/runtimeinfo`, `the server warns "odd"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := steady()
			p.Alerts = nodeDownFiring
			p.Extra = map[string]string{tc.path: tc.extra}
			srv := p.start(t)
			alerts, err := (&Client{URL: srv.URL}).Firing(context.Background(), pageFilter(t, true))
			require.ErrorIs(t, err, ErrIncomplete)
			require.Nil(t, alerts)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}

	// Empty warnings, and "infos" (Prometheus' informational notes), are
	// a complete answer.
	p := steady()
	p.Alerts = nodeDownFiring
	p.Extra = map[string]string{"alerts": `"warnings":[],"infos":["PromQL info: metric might not be a counter"],"isPartial":false`}
	srv := p.start(t)
	alerts, err := (&Client{URL: srv.URL}).Firing(context.Background(), pageFilter(t, true))
	require.NoError(t, err)
	require.Equal(t, []string{"NodeDown/n1/firing"}, names(alerts))
}

// A Prometheus that has just started reports no alert that has not been
// evaluated since, and a pending one whose for: state it lost: the gate
// holds until its rules have been evaluated for long enough, and says
// until when.
func TestYoungPrometheusHolds(t *testing.T) {
	ctx := context.Background()

	p := young()
	srv := p.start(t)
	c := &Client{URL: srv.URL}
	alerts, err := c.Firing(ctx, pageFilter(t, true))
	require.ErrorIs(t, err, ErrIncomplete, "4s after a restart, NodeDown (for: 5m) shows pending whether or not it fired before")
	require.Nil(t, alerts)
	require.ErrorContains(t, err, "asking Prometheus at "+srv.URL+" which alerts fire: the answer may be incomplete: ")
	require.ErrorContains(t, err, "Prometheus started at 2026-11-25T10:00:00Z")
	// The recording rules' group (60s) is the slowest: 60s + 3×30s + 5m.
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:07:31Z")
	require.ErrorContains(t, err, `rule group "node" (/etc/prometheus/rules/node.yaml) last evaluated at 2026-11-25T10:00:04Z`)
	require.Equal(t, []string{"/api/v1/status/runtimeinfo", "/api/v1/rules?exclude_alerts=true"}, p.requests(),
		"the alerts are not asked for: the answer would not be complete")

	// Pending alerts counting, for: does not matter: the group's first
	// evaluations after every group has run once are enough.
	p.Groups[1].LastEvaluation = t0.Add(50 * time.Second)
	_, err = c.Firing(ctx, pageFilter(t, false))
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:02:31Z")
	p.Groups[0].LastEvaluation = t0.Add(2*time.Minute + 34*time.Second)
	p.Groups[1].LastEvaluation = t0.Add(2*time.Minute + 10*time.Second)
	alerts, err = c.Firing(ctx, pageFilter(t, false))
	require.NoError(t, err)
	require.Equal(t, []string{"NodeDown/n1/pending"}, names(alerts))
	// With firingOnly, for: (5m) is still running.
	_, err = c.Firing(ctx, pageFilter(t, true))
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:07:31Z")

	// Evaluated at or after the time: the answer is complete again.
	p.Groups[0].LastEvaluation = t0.Add(7*time.Minute + 34*time.Second)
	p.Alerts = nodeDownFiring
	alerts, err = c.Firing(ctx, pageFilter(t, true))
	require.NoError(t, err)
	require.Equal(t, []string{"NodeDown/n1/firing"}, names(alerts))
}

// A rule group not evaluated since Prometheus started (its lastEvaluation
// zero, or before the start) holds, whatever its rules: an alert may read
// what its recording rules record.
func TestGroupNotEvaluatedSinceStartHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		last time.Time
	}{
		{name: "never", last: time.Time{}},
		{name: "before the start", last: t0.Add(-2 * time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := steady()
			p.Groups[1].LastEvaluation = tc.last
			srv := p.start(t)
			_, err := (&Client{URL: srv.URL}).Firing(context.Background(), pageFilter(t, true))
			require.ErrorIs(t, err, ErrIncomplete)
			require.ErrorContains(t, err, "Prometheus started at 2026-11-25T09:00:00Z; its alerts are complete once each rule group has been evaluated since")
			require.ErrorContains(t, err, `rule group "records" (/etc/prometheus/rules/records.yaml) has not been evaluated since`)
		})
	}
}

// Configuration loaded after the start (a long WAL replay delays it; a
// reload restarts renamed groups without their for: state) counts from
// when it was loaded.
func TestConfigurationLoadedLaterHolds(t *testing.T) {
	p := steady()
	p.LastConfigTime = t0.Add(-time.Minute)
	srv := p.start(t)
	_, err := (&Client{URL: srv.URL}).Firing(context.Background(), pageFilter(t, true))
	require.ErrorIs(t, err, ErrIncomplete)
	require.ErrorContains(t, err, "Prometheus started at 2026-11-25T09:00:00Z and loaded its configuration at 2026-11-25T09:59:00Z")
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:06:30Z")
}

// Only the rules whose alerts the gate could count make it wait for their
// for: an ignored alert, or one whose own labels no matcher accepts, does
// not; a label the rule sets from a template could be anything.
func TestOnlyRulesTheGateCouldCountWait(t *testing.T) {
	p := steady()
	p.StartTime, p.LastConfigTime = t0.Add(-10*time.Minute), t0.Add(-10*time.Minute)
	p.Groups[0].Rules = append(p.Groups[0].Rules,
		fakeRule{Type: "alerting", Name: "DiskSlow", Duration: 3600, Labels: map[string]string{"severity": "info"}},
		fakeRule{Type: "alerting", Name: "Watchdog", Duration: 3600, Labels: map[string]string{"severity": "page"}},
	)
	srv := p.start(t)
	c := &Client{URL: srv.URL}
	_, err := c.Firing(context.Background(), pageFilter(t, true))
	require.NoError(t, err, "10 minutes after the start, only NodeDown's for: (5m) counts")

	// The severity comes from the series: DiskSlow could be paging.
	p.Groups[0].Rules[2].Labels = map[string]string{"severity": `{{ $labels.severity }}`}
	_, err = c.Firing(context.Background(), pageFilter(t, true))
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:52:30Z")
	p.Groups[0].Rules[2].Labels = map[string]string{}
	_, err = c.Firing(context.Background(), pageFilter(t, true))
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:52:30Z")
	// No matchers: every alert could count.
	p.Groups[0].Rules[2].Labels = map[string]string{"severity": "info"}
	f, err := ParseFilter(nil, []string{"Watchdog"}, true)
	require.NoError(t, err)
	_, err = c.Firing(context.Background(), f)
	require.ErrorContains(t, err, "its alerts are complete once its rules are evaluated at or after 2026-11-25T10:52:30Z")
	// Matched by name.
	f, err = ParseFilter([]string{`alertname=~"Node.*"`}, nil, true)
	require.NoError(t, err)
	_, err = c.Firing(context.Background(), f)
	require.NoError(t, err)
}

// What lull needs to know of Prometheus, it must be told: a server that
// does not say when it started or how its rules are evaluated holds.
func TestPrometheusStatusErrorsHold(t *testing.T) {
	type answer = struct {
		Code int
		Body string
	}
	for _, tc := range []struct {
		name   string
		status map[string]answer
		edit   func(*fakeProm)
		want   []string
	}{
		{name: "no runtimeinfo", status: map[string]answer{"runtimeinfo": {404, "404 page not found"}},
			want: []string{"asking Prometheus at ", "/api/v1/status/runtimeinfo when it started: the server answered 404 Not Found"}},
		{name: "runtimeinfo garbage", status: map[string]answer{"runtimeinfo": {200, "<html>"}},
			want: []string{"/api/v1/status/runtimeinfo when it started: the answer is not Prometheus' JSON"}},
		{name: "runtimeinfo without startTime", status: map[string]answer{"runtimeinfo": {200, `{"status":"success","data":{"CWD":"/"}}`}},
			want: []string{"/api/v1/status/runtimeinfo when it started: the answer does not say when the server started (data.startTime)"}},
		{name: "runtimeinfo error", status: map[string]answer{"runtimeinfo": {200, `{"status":"error","errorType":"internal","error":"boom"}`}},
			want: []string{`the server answered with an error: "internal: boom"`}},
		{name: "no rules", status: map[string]answer{"rules": {403, "forbidden"}},
			want: []string{"/api/v1/rules?exclude_alerts=true how its rules are evaluated: the server answered 403 Forbidden (check the credentials)"}},
		{name: "rules without groups", status: map[string]answer{"rules": {200, `{"status":"success","data":{}}`}},
			want: []string{"the answer has no list of rule groups (data.groups)"}},
		{name: "group without interval", edit: func(p *fakeProm) { p.Groups[1].Interval = 0 },
			want: []string{`rule group "records" (/etc/prometheus/rules/records.yaml) has no evaluation interval`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := steady()
			p.Status = tc.status
			if tc.edit != nil {
				tc.edit(p)
			}
			srv := p.start(t)
			alerts, err := (&Client{URL: srv.URL}).Firing(context.Background(), pageFilter(t, true))
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrIncomplete, "lull could not ask")
			require.Nil(t, alerts)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// Alertmanager keeps no alerts across a restart: until Prometheus has
// sent its firing alerts again, it answers with fewer than fire.
func TestYoungAlertmanagerHolds(t *testing.T) {
	p := &fakeProm{Alerts: `[]`, Uptime: t0.Add(-30 * time.Second)}
	srv := p.start(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	c := &Client{URL: srv.URL, API: Alertmanager, Clock: clk}
	alerts, err := c.Firing(context.Background(), Filter{})
	require.ErrorIs(t, err, ErrIncomplete)
	require.Nil(t, alerts)
	require.EqualError(t, err, "asking Alertmanager at "+srv.URL+" which alerts fire: the answer may be incomplete: Alertmanager started at 2026-11-25T09:59:30Z "+
		"and keeps no alerts across a restart; Prometheus sends a firing alert again only every 2m0s "+
		"(its --rules.alert.resend-delay, 1m0s by default, and the rule evaluation after it, every 1m0s by default): complete at 2026-11-25T10:01:30Z")
	require.Equal(t, []string{"/api/v2/status"}, p.requests())

	clk.SetTime(t0.Add(89 * time.Second))
	_, err = c.Firing(context.Background(), Filter{})
	require.ErrorIs(t, err, ErrIncomplete)
	clk.SetTime(t0.Add(90 * time.Second))
	alerts, err = c.Firing(context.Background(), Filter{})
	require.NoError(t, err)
	require.Empty(t, alerts)
	require.Equal(t, "/api/v2/alerts?active=true&inhibited=false&silenced=true", p.requests()[3])

	// A status that does not say when it started holds, and its
	// configuration (which may hold receivers' secrets) is never quoted.
	p.Status = map[string]struct {
		Code int
		Body string
	}{"status": {200, `{"config":{"original":"password: SECRET-PW"},"uptime":"yesterday"}`}}
	_, err = c.Firing(context.Background(), Filter{})
	require.ErrorContains(t, err, "/api/v2/status when it started: the answer does not say when Alertmanager started (uptime)")
	require.NotErrorIs(t, err, ErrIncomplete, "not an answer at all")
	require.NotContains(t, err.Error(), "SECRET-PW")
	p.Status = map[string]struct {
		Code int
		Body string
	}{"status": {200, `{"config":{"original":"password: SECRET-PW"},"uptime":17}`}}
	_, err = c.Firing(context.Background(), Filter{})
	require.ErrorContains(t, err, "/api/v2/status when it started: the answer is not Alertmanager's status JSON")
	require.NotContains(t, err.Error(), "SECRET-PW")
	p.Status = nil
	p.Uptime = time.Time{}
	_, err = c.Firing(context.Background(), Filter{})
	require.ErrorContains(t, err, "the answer does not say when Alertmanager started (uptime)")
	require.NotContains(t, err.Error(), "SECRET-HOOK")
}

// Which alerting rules' alerts a filter could count, from the rule's name
// and the labels it sets alone.
func TestCouldCount(t *testing.T) {
	f, err := ParseFilter([]string{`severity=~"page|critical"`, `team!="dev"`, `alertname!~"Info.*"`}, []string{"Watchdog"}, true)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{name: "NodeDown", labels: map[string]string{"severity": "page"}, want: true},
		{name: "NodeDown", labels: map[string]string{"severity": "critical", "team": "infra"}, want: true},
		{name: "NodeDown", labels: map[string]string{"severity": "warning"}, want: false},
		{name: "NodeDown", labels: map[string]string{"severity": "page", "team": "dev"}, want: false},
		// The rule sets the label empty: the alert has none, which is "".
		{name: "NodeDown", labels: map[string]string{"severity": ""}, want: false},
		// Labels the rule does not set come from the series: anything.
		{name: "NodeDown", labels: nil, want: true},
		{name: "NodeDown", labels: map[string]string{"team": "infra"}, want: true},
		// A template could expand to anything.
		{name: "NodeDown", labels: map[string]string{"severity": "{{ $labels.severity }}"}, want: true},
		{name: "NodeDown", labels: map[string]string{"severity": "page", "team": "{{ $labels.team }}"}, want: true},
		// The alert's name is the rule's, whatever its labels say.
		{name: "InfoInhibitor", labels: map[string]string{"severity": "page"}, want: false},
		{name: "NodeDown", labels: map[string]string{"severity": "page", "alertname": "InfoX"}, want: true},
		{name: "Watchdog", labels: map[string]string{"severity": "page"}, want: false},
		{name: "WatchdogFailed", labels: map[string]string{"severity": "page"}, want: true},
	} {
		require.Equal(t, tc.want, f.couldCount(tc.name, tc.labels), "%s %v", tc.name, tc.labels)
	}
	require.True(t, Filter{}.couldCount("Anything", map[string]string{"severity": "none"}), "no matchers: every alert")
}
