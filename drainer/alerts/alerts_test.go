package alerts

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func TestParseMatcher(t *testing.T) {
	for _, tc := range []struct {
		in     string
		name   string
		typ    MatchType
		value  string
		String string
	}{
		{in: `severity="critical"`, name: "severity", typ: MatchEqual, value: "critical", String: `severity="critical"`},
		{in: `  severity = "critical"  `, name: "severity", typ: MatchEqual, value: "critical", String: `severity="critical"`},
		{in: `severity!="info"`, name: "severity", typ: MatchNotEqual, value: "info", String: `severity!="info"`},
		{in: `alertname=~"Node.*"`, name: "alertname", typ: MatchRegexp, value: "Node.*", String: `alertname=~"Node.*"`},
		{in: `namespace !~ "dev-.*"`, name: "namespace", typ: MatchNotRegexp, value: "dev-.*", String: `namespace!~"dev-.*"`},
		{in: `team=""`, name: "team", typ: MatchEqual, value: "", String: `team=""`},
		{in: `_x1="a=b!=c"`, name: "_x1", typ: MatchEqual, value: "a=b!=c", String: `_x1="a=b!=c"`},
		{in: `msg="say \"hi\" \\ bye"`, name: "msg", typ: MatchEqual, value: `say "hi" \ bye`, String: `msg="say \"hi\" \\ bye"`},
		{in: `host=~"a\\.b"`, name: "host", typ: MatchRegexp, value: `a\.b`, String: `host=~"a\\.b"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := ParseMatcher(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.name, m.Name)
			require.Equal(t, tc.typ, m.Type)
			require.Equal(t, tc.value, m.Value)
			require.Equal(t, tc.String, m.String())
			again, err := ParseMatcher(m.String())
			require.NoError(t, err)
			require.Equal(t, m.String(), again.String())
		})
	}
}

func TestParseMatcherErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{in: ``, want: `empty alert matcher: write one like severity="critical"`},
		{in: `   `, want: `empty alert matcher`},
		{in: `severity=critical`, want: `matcher "severity=critical": quote the value: severity="critical"`},
		{in: `severity=~crit.*`, want: `quote the value: severity=~"crit.*"`},
		{in: `severity='critical'`, want: `use double quotes around the value: severity="critical"`},
		{in: "severity=`critical`", want: `use double quotes around the value: severity="critical"`},
		{in: `severity`, want: `no operator: write name="value"`},
		{in: `="x"`, want: `the label name is missing`},
		{in: `1sev="x"`, want: `label name "1sev" is not valid`},
		{in: `sev.x="x"`, want: `label name "sev.x" is not valid`},
		{in: `sev x="x"`, want: `label name "sev x" is not valid`},
		{in: `sev=="x"`, want: `use = rather than ==`},
		{in: `sev~"x"`, want: `unknown operator after "sev"`},
		{in: `sev!"x"`, want: `unknown operator after "sev"`},
		{in: `sev=`, want: `the value is missing: write sev="..."`},
		{in: `sev="x`, want: `closing double quote is missing`},
		{in: `sev="x\"`, want: `closing double quote is missing`},
		{in: `sev="x" y`, want: `unexpected "y" after the value`},
		{in: `a="x",b="y"`, want: `unexpected ",b=\"y\"" after the value: give one matcher per entry`},
		{in: `{a="x"}`, want: `without braces`},
		{in: `sev=~"("`, want: `invalid regular expression "("`},
		{in: `sev!~"a[" `, want: `invalid regular expression "a["`},
		{in: `sev=~"a\.b"`, want: `invalid escape: write a backslash as \\`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseMatcher(tc.in)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			if strings.TrimSpace(tc.in) != "" {
				require.Contains(t, err.Error(), fmt.Sprintf("matcher %q", tc.in), "the error names the matcher")
			}
		})
	}
}

func mustMatcher(t *testing.T, s string) Matcher {
	t.Helper()
	m, err := ParseMatcher(s)
	require.NoError(t, err)
	return m
}

func TestMatcherMatches(t *testing.T) {
	labels := map[string]string{"alertname": "NodeDown", "severity": "critical", "team": ""}
	for _, tc := range []struct {
		matcher string
		want    bool
	}{
		{`severity="critical"`, true},
		{`severity="crit"`, false},
		{`severity!="critical"`, false},
		{`severity!="info"`, true},
		// Regular expressions are anchored as in PromQL.
		{`severity=~"crit"`, false},
		{`severity=~"crit.*"`, true},
		{`severity=~".*ical"`, true},
		{`severity=~"critical|warning"`, true},
		{`severity!~"crit"`, true},
		{`severity!~"crit.*"`, false},
		{`alertname=~"Node"`, false},
		// A missing label is the empty string.
		{`namespace=""`, true},
		{`namespace="x"`, false},
		{`namespace!="x"`, true},
		{`namespace!=""`, false},
		{`namespace=~".*"`, true},
		{`namespace=~".+"`, false},
		{`namespace!~".+"`, true},
		// As is an empty one.
		{`team=""`, true},
		{`team!=""`, false},
	} {
		t.Run(tc.matcher, func(t *testing.T) {
			require.Equal(t, tc.want, mustMatcher(t, tc.matcher).Matches(labels))
		})
	}
	require.True(t, mustMatcher(t, `severity="critical"`).Matches(nil) == false)
	require.True(t, mustMatcher(t, `severity=""`).Matches(nil))

	// Built by hand: the regular expression is compiled (anchored) on use.
	require.False(t, Matcher{Name: "severity", Type: MatchRegexp, Value: "crit"}.Matches(labels))
	require.True(t, Matcher{Name: "severity", Type: MatchRegexp, Value: "crit.*"}.Matches(labels))
	require.True(t, Matcher{Name: "severity", Type: MatchNotRegexp, Value: "crit"}.Matches(labels))
	// Invalid ones match nothing.
	require.False(t, Matcher{Name: "severity", Type: MatchRegexp, Value: "("}.Matches(labels))
	require.False(t, Matcher{Name: "severity", Type: MatchNotRegexp, Value: "("}.Matches(labels))
	require.False(t, Matcher{Name: "severity", Type: "==", Value: "critical"}.Matches(labels))
}

func TestParseFilter(t *testing.T) {
	f, err := ParseFilter([]string{`severity="critical"`, `namespace!~"dev-.*"`}, []string{"Watchdog", "Info.*"}, true)
	require.NoError(t, err)
	require.True(t, f.FiringOnly)
	require.Len(t, f.Matchers, 2)
	require.Len(t, f.Ignore, 2)

	count := func(labels map[string]string) bool { return f.counts(labels) }
	require.True(t, count(map[string]string{"alertname": "NodeDown", "severity": "critical"}))
	require.False(t, count(map[string]string{"alertname": "NodeDown", "severity": "warning"}))
	require.False(t, count(map[string]string{"alertname": "NodeDown", "severity": "critical", "namespace": "dev-a"}))
	// Ignore is anchored: Watchdog, not WatchdogFailed or MyWatchdog.
	require.False(t, count(map[string]string{"alertname": "Watchdog", "severity": "critical"}))
	require.True(t, count(map[string]string{"alertname": "WatchdogFailed", "severity": "critical"}))
	require.True(t, count(map[string]string{"alertname": "MyWatchdog", "severity": "critical"}))
	require.False(t, count(map[string]string{"alertname": "InfoInhibitor", "severity": "critical"}))
	// An alternation is anchored as a whole.
	f2, err := ParseFilter(nil, []string{"A|B"}, false)
	require.NoError(t, err)
	require.False(t, f2.counts(map[string]string{"alertname": "B"}))
	require.True(t, f2.counts(map[string]string{"alertname": "AB"}))

	// No matchers: every alert counts.
	f3, err := ParseFilter(nil, nil, false)
	require.NoError(t, err)
	require.True(t, f3.counts(map[string]string{"alertname": "Anything"}))
	require.True(t, f3.counts(nil))

	_, err = ParseFilter([]string{`severity="critical"`, `team=platform`}, nil, false)
	require.EqualError(t, err, `alert filter: matcher "team=platform": quote the value: team="platform"`)
	_, err = ParseFilter(nil, []string{"Watchdog", "Info("}, false)
	require.ErrorContains(t, err, `alert names to ignore: "Info(" is not a valid regular expression`)
	require.NotContains(t, err.Error(), "^(?:", "the error shows the expression as given")
	_, err = ParseFilter(nil, []string{""}, false)
	require.ErrorContains(t, err, "an entry is empty")
}

func TestAlertString(t *testing.T) {
	a := Alert{Name: "NodeDown", Labels: map[string]string{"severity": "critical", "alertname": "NodeDown", "instance": "n1"}, State: "firing", Since: t0}
	require.Equal(t, `NodeDown{instance="n1",severity="critical"} firing since 2026-11-25T10:00:00Z`, a.String())
	// Since in UTC, without fractions of a second.
	a.Since = time.Date(2026, 11, 25, 11, 0, 0, 5e8, time.FixedZone("CET", 3600))
	require.Equal(t, `NodeDown{instance="n1",severity="critical"} firing since 2026-11-25T10:00:00Z`, a.String())
	require.Equal(t, `Watchdog firing`, Alert{Name: "Watchdog", Labels: map[string]string{"alertname": "Watchdog"}, State: "firing"}.String())
	require.Equal(t, `{job="x"} pending`, Alert{Labels: map[string]string{"job": "x"}, State: "pending"}.String())
	require.Equal(t, `A{v="a \"b\""}`, Alert{Name: "A", Labels: map[string]string{"v": `a "b"`}}.String())
}

func TestSummary(t *testing.T) {
	mk := func(name string) Alert {
		return Alert{Name: name, Labels: map[string]string{"alertname": name, "severity": "critical"}, State: "firing", Since: t0}
	}
	a, b, c := mk("A"), mk("B"), mk("C")
	since := " firing since 2026-11-25T10:00:00Z"
	require.Equal(t, "no matching alert fires", Summary(nil, 3))
	require.Equal(t, `1 alert fires: A{severity="critical"}`+since, Summary([]Alert{a}, 3))
	require.Equal(t, `2 alerts fire: A{severity="critical"}`+since+`, B{severity="critical"}`+since, Summary([]Alert{a, b}, 2))
	require.Equal(t, `3 alerts fire: A{severity="critical"}`+since+`, B{severity="critical"}`+since+`, and 1 more`, Summary([]Alert{a, b, c}, 2))
	require.Equal(t, `3 alerts fire: A{severity="critical"}`+since+`, and 2 more`, Summary([]Alert{a, b, c}, 1))
	require.Equal(t, `3 alerts fire`, Summary([]Alert{a, b, c}, 0))
	require.Equal(t, `3 alerts fire: A{severity="critical"}`+since+`, B{severity="critical"}`+since+`, C{severity="critical"}`+since, Summary([]Alert{a, b, c}, -1))
	require.Equal(t, Summary([]Alert{a, b, c}, -1), Summary([]Alert{a, b, c}, 10))
}

// promAlerts is a Prometheus /api/v1/alerts answer.
const promAlerts = `{"status":"success","data":{"alerts":[
 {"labels":{"alertname":"NodeDown","instance":"n2","severity":"critical"},"annotations":{"summary":"n2 is down"},"state":"firing","activeAt":"2026-11-25T10:00:00.123456789Z","value":"1e+00"},
 {"labels":{"alertname":"NodeDown","instance":"n1","severity":"critical"},"annotations":{},"state":"firing","activeAt":"2026-11-25T09:00:00Z","value":"1e+00"},
 {"labels":{"alertname":"DiskFilling","instance":"n1","severity":"warning"},"annotations":{},"state":"pending","activeAt":"2026-11-25T10:05:00Z","value":"1e+00"},
 {"labels":{"alertname":"Watchdog","severity":"none"},"annotations":{},"state":"firing","activeAt":"2026-11-01T00:00:00Z","value":"1e+00"}
]}}`

// amAlerts is an Alertmanager /api/v2/alerts answer.
const amAlerts = `[
 {"labels":{"alertname":"NodeDown","instance":"n1","severity":"critical"},"annotations":{},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]},"startsAt":"2026-11-25T09:00:00Z","endsAt":"2026-11-25T11:00:00Z","fingerprint":"a","receivers":[{"name":"x"}],"updatedAt":"2026-11-25T10:00:00Z"},
 {"labels":{"alertname":"DiskFilling","instance":"n1","severity":"warning"},"annotations":{},"status":{"state":"unprocessed","silencedBy":[],"inhibitedBy":[]},"startsAt":"2026-11-25T10:05:00Z","fingerprint":"b"},
 {"labels":{"alertname":"KubeletDown","instance":"n3","severity":"critical"},"annotations":{},"status":{"state":"suppressed","silencedBy":["s"],"inhibitedBy":[]},"startsAt":"2026-11-25T10:05:00Z","fingerprint":"c"},
 {"labels":{"alertname":"Watchdog","severity":"none"},"annotations":{},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]},"startsAt":"2026-11-01T00:00:00Z","fingerprint":"d"},
 {"labels":{"alertname":"NodeNotReady","instance":"n4","severity":"critical"},"annotations":{},"status":{"state":"suppressed","silencedBy":["l"],"inhibitedBy":[]},"startsAt":"2026-11-25T10:05:00Z","fingerprint":"e"},
 {"labels":{"alertname":"NodeNotReady","instance":"n5","severity":"critical"},"annotations":{},"status":{"state":"suppressed","silencedBy":["l","s"],"inhibitedBy":[]},"startsAt":"2026-11-25T10:05:00Z","fingerprint":"f"},
 {"labels":{"alertname":"NodeNotReady","instance":"n6","severity":"critical"},"annotations":{},"status":{"state":"suppressed","silencedBy":[],"inhibitedBy":["x"]},"startsAt":"2026-11-25T10:05:00Z","fingerprint":"g"}
]`

// request is what a test server saw.
type request struct {
	Method, Path, RawQuery, Authorization, Accept string
	User, Password                                string
	BasicAuth                                     bool
}

// server answers the alerts (/api/v1/alerts, /api/v2/alerts) with status
// and body, and the questions asked before them as a server up for long
// and evaluating its rules would (see settled); it records every request.
func server(t *testing.T, status int, body string) (*httptest.Server, *[]request) {
	t.Helper()
	var seen []request
	srv := httptest.NewServer(handler(&seen, status, body))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func handler(seen *[]request, status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, password, ok := r.BasicAuth()
		*seen = append(*seen, request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
			Authorization: r.Header.Get("Authorization"), Accept: r.Header.Get("Accept"),
			User: user, Password: password, BasicAuth: ok})
		w.Header().Set("Content-Type", "application/json")
		if answer, ok := settled[r.URL.Path[strings.Index(r.URL.Path, "/api/")+1:]]; ok {
			_, _ = w.Write([]byte(answer))
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

// settled are the answers of a Prometheus and an Alertmanager that
// started long ago, whose rules have been evaluated since, by path.
var settled = map[string]string{
	"api/v1/status/runtimeinfo": `{"status":"success","data":{"startTime":"2000-01-01T00:00:00.5Z","lastConfigTime":"2000-01-01T00:00:01Z"}}`,
	"api/v1/rules": `{"status":"success","data":{"groups":[{"name":"g","file":"r.yml","interval":30,"lastEvaluation":"2026-11-25T09:59:50Z",` +
		`"rules":[{"type":"alerting","name":"NodeDown","duration":300,"labels":{"severity":"critical"}}]}]}}`,
	"api/v2/status": `{"uptime":"2000-01-01T00:00:00Z","config":{"original":""}}`,
	// A silence of someone's (s) and one of lull's (l).
	"api/v2/silence/s": `{"id":"s","matchers":[{"name":"instance","value":"n3","isRegex":false,"isEqual":true}],"startsAt":"2026-11-25T09:00:00Z","endsAt":"2026-11-25T12:00:00Z","createdBy":"alice","comment":"known","status":{"state":"active"}}`,
	"api/v2/silence/l": `{"id":"l","matchers":[{"name":"instance","value":"n4","isRegex":false,"isEqual":true}],"startsAt":"2026-11-25T09:00:00Z","endsAt":"2026-11-25T10:10:00Z","createdBy":"lull","comment":"reboot","status":{"state":"active"}}`,
}

// promRequests are the requests of one Prometheus Firing, in order.
var promRequests = []request{
	{Method: http.MethodGet, Path: "/api/v1/status/runtimeinfo", Accept: "application/json"},
	{Method: http.MethodGet, Path: "/api/v1/rules", RawQuery: "exclude_alerts=true", Accept: "application/json"},
	{Method: http.MethodGet, Path: "/api/v1/alerts", Accept: "application/json"},
}

func names(alerts []Alert) []string {
	var out []string
	for _, a := range alerts {
		out = append(out, a.Name+"/"+a.Labels["instance"]+"/"+a.State)
	}
	return out
}

func TestPrometheus(t *testing.T) {
	srv, seen := server(t, http.StatusOK, promAlerts)
	c := &Client{URL: srv.URL}

	all, err := c.Firing(context.Background(), Filter{})
	require.NoError(t, err)
	require.Equal(t, promRequests, *seen)
	// Sorted by name, then labels; pending alerts count.
	require.Equal(t, []string{"DiskFilling/n1/pending", "NodeDown/n1/firing", "NodeDown/n2/firing", "Watchdog//firing"}, names(all))
	require.Equal(t, Alert{
		Name:   "NodeDown",
		Labels: map[string]string{"alertname": "NodeDown", "instance": "n2", "severity": "critical"},
		State:  "firing",
		Since:  time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.UTC),
	}, all[2])

	// FiringOnly: pending alerts do not count.
	f, err := ParseFilter(nil, []string{"Watchdog"}, true)
	require.NoError(t, err)
	firing, err := c.Firing(context.Background(), f)
	require.NoError(t, err)
	require.Equal(t, []string{"NodeDown/n1/firing", "NodeDown/n2/firing"}, names(firing))

	f, err = ParseFilter([]string{`severity=~"warning|critical"`, `instance="n1"`}, nil, false)
	require.NoError(t, err)
	matching, err := c.Firing(context.Background(), f)
	require.NoError(t, err)
	require.Equal(t, []string{"DiskFilling/n1/pending", "NodeDown/n1/firing"}, names(matching))
	require.Equal(t, `2 alerts fire: DiskFilling{instance="n1",severity="warning"} pending since 2026-11-25T10:05:00Z, and 1 more`, Summary(matching, 1))

	f.FiringOnly = true
	matching, err = c.Firing(context.Background(), f)
	require.NoError(t, err)
	require.Equal(t, []string{"NodeDown/n1/firing"}, names(matching))

	// Nothing matches.
	f, err = ParseFilter([]string{`severity="crit"`}, nil, false)
	require.NoError(t, err)
	none, err := c.Firing(context.Background(), f)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, "no matching alert fires", Summary(none, 3))

	// The API's name is not case sensitive.
	c.API = "prometheus"
	_, err = c.Firing(context.Background(), Filter{})
	require.NoError(t, err)
}

func TestPrometheusNoAlerts(t *testing.T) {
	srv, _ := server(t, http.StatusOK, `{"status":"success","data":{"alerts":[]}}`)
	alerts, err := (&Client{URL: srv.URL, API: Prometheus}).Firing(context.Background(), Filter{})
	require.NoError(t, err)
	require.Empty(t, alerts)
}

func TestAlertmanager(t *testing.T) {
	srv, seen := server(t, http.StatusOK, amAlerts)
	c := &Client{URL: srv.URL, API: Alertmanager}

	for _, firingOnly := range []bool{false, true} {
		*seen = nil
		alerts, err := c.Firing(context.Background(), Filter{FiringOnly: firingOnly})
		require.NoError(t, err)
		require.Len(t, *seen, 4)
		require.Equal(t, "/api/v2/status", (*seen)[0].Path, "asked first when it started")
		r := (*seen)[1]
		require.Equal(t, http.MethodGet, r.Method)
		require.Equal(t, "/api/v2/alerts", r.Path)
		require.Equal(t, "active=true&inhibited=false&silenced=true", r.RawQuery)
		require.Equal(t, "/api/v2/silence/s", (*seen)[2].Path, "whose silences silence them, each asked once")
		require.Equal(t, "/api/v2/silence/l", (*seen)[3].Path)
		// Only active alerts count, whatever FiringOnly says, and those
		// lull's silences alone silence (the gate ignores them only while
		// lull holds their node down); not one someone else silenced too,
		// nor an inhibited one.
		require.Equal(t, []string{"NodeDown/n1/firing", "NodeNotReady/n4/firing", "Watchdog//firing"}, names(alerts), "firingOnly %v", firingOnly)
		require.Equal(t, time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC), alerts[0].Since)
	}

	f, err := ParseFilter([]string{`severity="critical"`}, []string{"Watch.*"}, false)
	require.NoError(t, err)
	alerts, err := c.Firing(context.Background(), f)
	require.NoError(t, err)
	require.Equal(t, `2 alerts fire: NodeDown{instance="n1",severity="critical"} firing since 2026-11-25T09:00:00Z, NodeNotReady{instance="n4",severity="critical"} firing since 2026-11-25T10:05:00Z`, Summary(alerts, 5))
}

func TestPathPrefix(t *testing.T) {
	srv, seen := server(t, http.StatusOK, `{"status":"success","data":{"alerts":[]}}`)
	for _, tc := range []struct {
		url  string
		api  API
		path string
	}{
		{url: srv.URL + "/", path: "/api/v1/alerts"},
		{url: srv.URL + "/prometheus", path: "/prometheus/api/v1/alerts"},
		{url: srv.URL + "/prometheus/", path: "/prometheus/api/v1/alerts"},
		{url: srv.URL + "/monitoring/prometheus//", path: "/monitoring/prometheus/api/v1/alerts"},
		{url: srv.URL + "/alertmanager/", api: Alertmanager, path: "/alertmanager/api/v2/alerts"},
	} {
		prefix := strings.TrimSuffix(tc.path, "/api/v1/alerts")
		*seen = nil
		c := &Client{URL: tc.url, API: tc.api}
		_, err := c.Firing(context.Background(), Filter{})
		if tc.api == Alertmanager {
			// The server answers Prometheus' JSON, which is not a list.
			require.ErrorContains(t, err, "not a JSON list of alerts")
		} else {
			require.NoError(t, err)
		}
		if tc.api == Alertmanager {
			require.Len(t, *seen, 2)
			require.Equal(t, "/alertmanager/api/v2/status", (*seen)[0].Path)
			require.Equal(t, tc.path, (*seen)[1].Path, tc.url)
			continue
		}
		require.Len(t, *seen, 3)
		require.Equal(t, prefix+"/api/v1/status/runtimeinfo", (*seen)[0].Path, tc.url)
		require.Equal(t, prefix+"/api/v1/rules", (*seen)[1].Path, tc.url)
		require.Equal(t, tc.path, (*seen)[2].Path, tc.url)
	}
}

func TestCredentials(t *testing.T) {
	srv, seen := server(t, http.StatusOK, `{"status":"success","data":{"alerts":[]}}`)
	ctx := context.Background()

	_, err := (&Client{URL: srv.URL}).Firing(ctx, Filter{})
	require.NoError(t, err)
	require.Empty(t, (*seen)[0].Authorization)

	*seen = nil
	_, err = (&Client{URL: srv.URL, BearerToken: "s3cr3t-token\n"}).Firing(ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, *seen, 3)
	for _, r := range *seen {
		require.Equal(t, "Bearer s3cr3t-token", r.Authorization, r.Path)
	}

	*seen = nil
	_, err = (&Client{URL: srv.URL, Username: "lull", Password: "pa:ss word"}).Firing(ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, *seen, 3)
	for _, r := range *seen {
		require.True(t, r.BasicAuth, r.Path)
		require.Equal(t, "lull", r.User)
		require.Equal(t, "pa:ss word", r.Password)
	}

	*seen = nil
	_, err = (&Client{URL: srv.URL, API: Alertmanager, BearerToken: "am-token"}).Firing(ctx, Filter{})
	require.ErrorContains(t, err, "not a JSON list of alerts", "the server answers Prometheus' JSON")
	require.Len(t, *seen, 2)
	for _, r := range *seen {
		require.Equal(t, "Bearer am-token", r.Authorization, r.Path)
	}

	*seen = nil
	_, err = (&Client{URL: srv.URL, BearerToken: "t0k3n", Username: "lull", Password: "pa55"}).Firing(ctx, Filter{})
	require.ErrorContains(t, err, "both a bearer token and a username and password are given")
	require.NotContains(t, err.Error(), "t0k3n")
	require.NotContains(t, err.Error(), "pa55")
	require.Empty(t, *seen, "nothing is sent")
}

func TestCredentialsNeverInErrors(t *testing.T) {
	// A server that echoes the credentials back.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, "bad credentials: %s", r.Header.Get("Authorization"))
	}))
	t.Cleanup(echo.Close)
	_, err := (&Client{URL: echo.URL, BearerToken: "t0k3n-value"}).Firing(context.Background(), Filter{})
	require.ErrorContains(t, err, "401 Unauthorized (check the credentials)")
	require.ErrorContains(t, err, "Bearer <redacted>")
	require.NotContains(t, err.Error(), "t0k3n-value")

	// Credentials in the URL are not shown either.
	addr := closedAddr(t)
	_, err = (&Client{URL: "http://lull:hunter2@" + addr + "/"}).Firing(context.Background(), Filter{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "lull:xxxxx@"+addr)
	require.NotContains(t, err.Error(), "hunter2")
}

// pemOf returns a TLS test server's certificate in PEM.
func pemOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// selfSigned returns a self-signed CA certificate for 127.0.0.1 in PEM,
// another than httptest's.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTLS(t *testing.T) {
	var seen []request
	srv := httptest.NewUnstartedServer(handler(&seen, http.StatusOK, promAlerts))
	// The handshakes refused below are expected: do not log them.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	otherCA := selfSigned(t)
	ctx := context.Background()

	alerts, err := (&Client{URL: srv.URL, CA: pemOf(srv), BearerToken: "tok"}).Firing(ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, alerts, 4)
	require.Len(t, seen, 3)
	require.Equal(t, "Bearer tok", seen[0].Authorization)

	// The system's roots do not trust the test server.
	_, err = (&Client{URL: srv.URL}).Firing(ctx, Filter{})
	require.ErrorContains(t, err, "asking Prometheus at "+srv.URL+"/api/v1/status/runtimeinfo when it started: ")
	require.ErrorContains(t, err, "certificate")

	// Only the CA given is trusted.
	_, err = (&Client{URL: srv.URL, CA: otherCA}).Firing(ctx, Filter{})
	require.ErrorContains(t, err, "certificate")
	require.Len(t, seen, 3)

	// A client built by NewHTTPClient.
	hc, err := NewHTTPClient(pemOf(srv), time.Second)
	require.NoError(t, err)
	require.Equal(t, time.Second, hc.Timeout)
	_, err = (&Client{URL: srv.URL, HTTP: hc}).Firing(ctx, Filter{})
	require.NoError(t, err)
	// A bundle of several certificates.
	hc, err = NewHTTPClient(append(otherCA, pemOf(srv)...), time.Second)
	require.NoError(t, err)
	_, err = (&Client{URL: srv.URL, HTTP: hc}).Firing(ctx, Filter{})
	require.NoError(t, err)

	_, err = NewHTTPClient([]byte("not a certificate"), time.Second)
	require.EqualError(t, err, "the CA bundle holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)")
	_, err = (&Client{URL: srv.URL, CA: []byte("garbage")}).Firing(ctx, Filter{})
	require.ErrorContains(t, err, "the CA bundle holds no PEM certificate")

	// No CA: the system's roots, and the default timeout.
	hc, err = NewHTTPClient(nil, 0)
	require.NoError(t, err)
	require.Zero(t, hc.Timeout)
}

func TestRedirectRefused(t *testing.T) {
	elsewhere, elsewhereSeen := server(t, http.StatusOK, promAlerts)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/api/v1/alerts", http.StatusFound)
	}))
	t.Cleanup(redirect.Close)

	for _, c := range []*Client{
		{URL: redirect.URL, BearerToken: "tok"},
		{URL: redirect.URL, Username: "u", Password: "p"},
	} {
		_, err := c.Firing(context.Background(), Filter{})
		require.Error(t, err)
		require.Contains(t, err.Error(), "asking Prometheus at "+redirect.URL+"/api/v1/status/runtimeinfo when it started: ")
		require.Contains(t, err.Error(), "the server redirects to "+elsewhere.URL+"/api/v1/alerts, which is not followed")
	}
	require.Empty(t, *elsewhereSeen, "credentials are not sent elsewhere")
}

func TestServerErrors(t *testing.T) {
	long := strings.Repeat("x", 300) + "TAIL"
	big := `{"status":"success","data":{"alerts":[` + strings.Repeat(`{"labels":{"alertname":"A"},"state":"firing"},`, 200000) + `{}]}}`
	require.Greater(t, len(big), maxBody)
	for _, tc := range []struct {
		name   string
		api    API
		status int
		body   string
		want   []string
	}{
		{name: "500", status: http.StatusInternalServerError, body: "upstream\n  broken",
			want: []string{`the server answered 500 Internal Server Error: "upstream broken"`}},
		{name: "500 long body", status: http.StatusInternalServerError, body: long,
			want: []string{`the server answered 500 Internal Server Error: "` + strings.Repeat("x", 200) + `" (cut at 200 bytes)`}},
		{name: "404", status: http.StatusNotFound, body: "404 page not found",
			want: []string{"404 Not Found (check the URL and whether the server is Prometheus or Alertmanager)"}},
		{name: "403 Alertmanager", api: Alertmanager, status: http.StatusForbidden, body: "",
			want: []string{"asking Alertmanager at ", "/api/v2/alerts?active=true&inhibited=false&silenced=true which alerts fire: the server answered 403 Forbidden (check the credentials)"}},
		{name: "status error", status: http.StatusOK, body: `{"status":"error","errorType":"execution","error":"query timed out"}`,
			want: []string{`the server answered with an error: "execution: query timed out"`}},
		{name: "status error long", status: http.StatusOK, body: `{"status":"error","errorType":"internal","error":"` + long + `"}`,
			want: []string{`(cut at 200 bytes)`}},
		{name: "unknown status", status: http.StatusOK, body: `{"status":"weird"}`,
			want: []string{`the answer's status is "weird", not "success"`}},
		{name: "no data", status: http.StatusOK, body: `{"status":"success"}`,
			want: []string{`the answer has no list of alerts (data.alerts)`}},
		{name: "null alerts", status: http.StatusOK, body: `{"status":"success","data":{"alerts":null}}`,
			want: []string{`the answer has no list of alerts (data.alerts)`}},
		{name: "garbage", status: http.StatusOK, body: `<html>garbage</html>`,
			want: []string{`the answer is not Prometheus' JSON: invalid character '<'`, `it begins "<html>garbage</html>"`}},
		{name: "wrong shape", status: http.StatusOK, body: `{"status":"success","data":{"alerts":{"a":1}}}`,
			want: []string{`the answer is not Prometheus' JSON`}},
		{name: "truncated", status: http.StatusOK, body: promAlerts[:100],
			want: []string{`the answer is not Prometheus' JSON: unexpected end of JSON input`}},
		{name: "too big", status: http.StatusOK, body: big,
			want: []string{`the answer is larger than 8 MiB`}},
		{name: "Alertmanager garbage", api: Alertmanager, status: http.StatusOK, body: `garbage`,
			want: []string{`the answer is not a JSON list of alerts: is this Alertmanager? It begins "garbage"`}},
		{name: "Alertmanager null", api: Alertmanager, status: http.StatusOK, body: `null`,
			want: []string{`the answer is not a JSON list of alerts`}},
		{name: "Alertmanager truncated", api: Alertmanager, status: http.StatusOK, body: amAlerts[:100],
			want: []string{`the answer is not Alertmanager's JSON: unexpected end of JSON input`}},
		{name: "Alertmanager wrong shape", api: Alertmanager, status: http.StatusOK, body: `[{"labels":"x"}]`,
			want: []string{`the answer is not Alertmanager's JSON`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := server(t, tc.status, tc.body)
			alerts, err := (&Client{URL: srv.URL, API: tc.api}).Firing(context.Background(), Filter{})
			require.Error(t, err)
			require.Nil(t, alerts)
			require.Contains(t, err.Error(), "at "+srv.URL+"/api/", "the error names the URL")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "TAIL", "at most 200 bytes of the body")
			require.Less(t, len(err.Error()), 600)
		})
	}
}

// closedAddr returns an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestConnectionRefused(t *testing.T) {
	addr := closedAddr(t)
	_, err := (&Client{URL: "http://" + addr}).Firing(context.Background(), Filter{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "asking Prometheus at http://"+addr+"/api/v1/status/runtimeinfo when it started: ")
	require.Contains(t, err.Error(), "connection refused")
}

func TestContextCanceled(t *testing.T) {
	srv, seen := server(t, http.StatusOK, promAlerts)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&Client{URL: srv.URL}).Firing(ctx, Filter{})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, *seen)
}

func TestClientConfigErrors(t *testing.T) {
	srv, seen := server(t, http.StatusOK, promAlerts)
	ctx := context.Background()
	for _, tc := range []struct {
		client Client
		filter Filter
		want   string
	}{
		{client: Client{}, want: "no Prometheus URL given"},
		{client: Client{URL: "  ", API: Alertmanager}, want: "no Alertmanager URL given"},
		{client: Client{URL: "prometheus:9090"}, want: "must start with http:// or https:// and name a host"},
		{client: Client{URL: "ftp://prometheus"}, want: "must start with http:// or https://"},
		{client: Client{URL: "http:///api"}, want: "name a host"},
		{client: Client{URL: "http://u:secret@[::1"}, want: "Prometheus URL is not valid"},
		{client: Client{URL: srv.URL + "#x"}, want: "has a fragment"},
		{client: Client{URL: srv.URL, API: "Thanos"}, want: `unknown alerts API "Thanos": use Prometheus or Alertmanager`},
		{client: Client{URL: srv.URL}, filter: Filter{Matchers: []Matcher{{Name: "a", Type: MatchRegexp, Value: "("}}},
			want: `alert filter: matcher a=~"(": invalid regular expression "("`},
		{client: Client{URL: srv.URL}, filter: Filter{Matchers: []Matcher{{Name: "a", Type: "~=", Value: "x"}}},
			want: `unknown operator "~="`},
		{client: Client{URL: srv.URL}, filter: Filter{Matchers: []Matcher{{Name: "a-b", Type: MatchEqual, Value: "x"}}},
			want: `label name "a-b" is not valid`},
		{client: Client{URL: srv.URL}, filter: Filter{Ignore: []*regexp.Regexp{nil}},
			want: `alert name to ignore #1 is nil`},
	} {
		_, err := tc.client.Firing(ctx, tc.filter)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "secret")
	}
	require.Empty(t, *seen, "nothing is asked")

	// A matcher built by hand with a valid regular expression works.
	f := Filter{Matchers: []Matcher{{Name: "instance", Type: MatchRegexp, Value: "n1"}}}
	alerts, err := (&Client{URL: srv.URL}).Firing(ctx, f)
	require.NoError(t, err)
	require.Equal(t, []string{"DiskFilling/n1/pending", "NodeDown/n1/firing"}, names(alerts))
}

func TestLabelsAreCopied(t *testing.T) {
	var answer promAnswer
	require.NoError(t, json.Unmarshal([]byte(promAlerts), &answer))
	labels := answer.Data.Alerts[0].Labels
	a := newAlert(labels, "firing", "not a time")
	a.Labels["x"] = "y"
	require.NotContains(t, labels, "x")
	require.True(t, a.Since.IsZero())
	require.Equal(t, `NodeDown{instance="n2",severity="critical",x="y"} firing`, a.String())
}

func TestQuote(t *testing.T) {
	c := &Client{Username: "lull", Password: "pa55word", BearerToken: " t0k3n "}
	require.Equal(t, `"a b c"`, c.quote([]byte("a\n\tb  c ")))
	require.Equal(t, `"x <redacted> y <redacted> z Basic <redacted>"`,
		c.quote([]byte("x t0k3n y pa55word z Basic bHVsbDpwYTU1d29yZA==")))
	// A secret across the cut is blanked out too, not cut in two.
	body := strings.Repeat("a", 196) + "pa55word" + strings.Repeat("b", 100)
	require.Equal(t, `"`+strings.Repeat("a", 196)+`<red" (cut at 200 bytes)`, c.quote([]byte(body)))
	// The cut does not split a rune.
	body = strings.Repeat("a", 199) + "é" + "tail"
	require.Equal(t, `"`+strings.Repeat("a", 199)+`" (cut at 200 bytes)`, c.quote([]byte(body)))
	// Exactly 200 bytes are not cut.
	require.Equal(t, `"`+strings.Repeat("a", 200)+`"`, c.quote([]byte(strings.Repeat("a", 200))))
	require.Equal(t, `""`, (&Client{}).quote(nil))
}

func TestBasicAuthNotEchoed(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = fmt.Fprintf(w, "denied: %s", r.Header.Get("Authorization"))
	}))
	t.Cleanup(echo.Close)
	_, err := (&Client{URL: echo.URL, Username: "lull", Password: "pa55word"}).Firing(context.Background(), Filter{})
	require.ErrorContains(t, err, `403 Forbidden (check the credentials): "denied: Basic <redacted>"`)
}
