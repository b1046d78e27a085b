package alerts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Red team (silences), finding 1: the silence ID is joined into the URL
// as it comes (from Alertmanager's answer to a POST, from its list when
// lull adopts a silence, from status.silence.id): url.JoinPath cleans dot
// segments, so an ID such as ../../../grafana/api/admin sends lull's GET
// (and DELETE) with the Secret's credentials outside the path prefix the
// Secret's owner allowed (https://host/alertmanager). CredentialsMayGo
// refuses "." and ".." segments in the window's url for exactly this
// reason; the ID, appended afterwards, escapes it.
func TestRedteamSilenceIDStaysUnderTheAllowedPrefix(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"abc-123","status":{"state":"active"},"matchers":[]}`))
	}))
	defer srv.Close()

	allowed := srv.URL + "/alertmanager"
	// The Secret's owner allows exactly this prefix, and the window's url is
	// under it: credentials may go.
	require.NoError(t, CredentialsMayGo(allowed, []byte("true"), allowed))
	c := &Client{URL: allowed, API: Alertmanager, BearerToken: "s3cret"}
	ctx := context.Background()

	_, err := c.GetSilence(ctx, "../../../../grafana/api/admin/users")
	require.ErrorContains(t, err, "is not a silence ID")
	require.ErrorContains(t, c.ExpireSilence(ctx, "../../../../grafana/api/dashboards/uid/prod"), "is not a silence ID")
	_, err = c.GetSilence(ctx, "abc-123")
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 1, "only the valid ID was asked about")
	for _, s := range seen {
		require.Contains(t, s, " /alertmanager/",
			"a silence ID from Alertmanager (or the status) took lull's credentials outside the Secret's url %s: %s", allowed, s)
	}
}

// Red team (silences), finding 2: "at least one equality matcher naming
// the node" is checked as "the value contains $(NODE_NAME)", so text
// around the placeholder names another node: node="$(NODE_NAME)0" for
// node-1 is node="node-10". Admission (the CRD's CEL rule) and
// SilenceMatchers accept it; the silence (and what every alerts gate
// ignores) reaches node-10's alerts while lull reboots node-1.
func TestRedteamSilenceMatcherAffixReachesAnotherNode(t *testing.T) {
	for _, written := range [][]string{
		{`node="$(NODE_NAME)0"`},            // node-1 -> node-10
		{`node="$(NODE_NAME)-replacement"`}, // node-1 -> node-1-replacement
		{`instance="$(NODE_NAME)0:9100"`},   // the documented instance form, one digit more
	} {
		ms, err := SilenceMatchers(written, "node-1", "$(NODE_NAME)")
		if err != nil {
			continue // refused: held
		}
		other := map[string]string{"alertname": "KubeNodeNotReady", "node": "node-10", "instance": "node-10:9100"}
		if strings.Contains(written[0], "replacement") {
			other["node"] = "node-1-replacement"
		}
		require.False(t, SilenceMatches(ms, other),
			"matchers %v accepted for node-1 select the alerts of node %s, which lull does not take down", written, other["node"])
	}
}

// Red team (silences), finding 3: the status keeps each expanded matcher
// in at most 1024 characters (SilenceStatus.Matchers, items MaxLength
// 1024), while the window's matcher may be 512 characters and the node's
// name 253: $(NODE_NAME) (13 characters) grows up to 253 (and more in a
// regular expression, where each dot is escaped). SilenceMatchers accepts
// a matcher the API server will then refuse in status.silence: the silence
// is made in Alertmanager, the status write carrying phase Acting fails
// validation, and every round makes/adopts it again without the request
// ever moving on.
func TestRedteamSilenceMatchersFitTheStatus(t *testing.T) {
	node := strings.TrimSuffix(strings.Repeat(strings.Repeat("a", 61)+".", 4), ".") // 247 characters, a valid node name
	require.LessOrEqual(t, len(node), 253)
	written := []string{
		`node="$(NODE_NAME)"`,
		`instance=~"$(NODE_NAME)|$(NODE_NAME):9100|$(NODE_NAME):9256|$(NODE_NAME):10250"`, // 81 characters, well within the CRD's 512
	}
	for _, w := range written {
		require.LessOrEqual(t, len(w), 512)
	}
	ms, err := SilenceMatchers(written, node, "$(NODE_NAME)")
	if err != nil {
		return // refused with a clear error: held
	}
	for _, m := range ms {
		require.LessOrEqual(t, len(m.String()), 1024,
			"SilenceMatchers accepted a matcher whose expansion (%d characters) status.silence.matchers (MaxLength 1024) refuses", len(m.String()))
	}
}

// Red team (silences), finding 4: an ID Alertmanager (or anything
// answering at its url) returns is recorded as it is, though
// status.silence.id takes at most 64 characters: a longer one (or one with
// path characters, finding 1) is accepted by PutSilence, and the status
// write that should record it then fails validation on every round.
func TestRedteamSilenceIDIsValidated(t *testing.T) {
	long := strings.Repeat("f", 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"silenceID":"` + long + `"}`))
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL, API: Alertmanager}
	id, err := c.PutSilence(context.Background(), Silence{Matchers: []Matcher{{Name: "node", Type: MatchEqual, Value: "n1"}}})
	if err != nil {
		return // refused: held
	}
	require.LessOrEqual(t, len(id), 64, "PutSilence returned an ID status.silence.id (MaxLength 64) cannot hold")
}

// Red team (silences), finding 14: to tell lull's silences from others',
// the Alertmanager gate now lists every silence Alertmanager keeps
// (GET /api/v2/silences, expired ones included for their retention, 120h
// by default) whenever any matching alert is silenced, and the whole list
// must fit in 8 MiB and parse. An Alertmanager with many silences (CI
// pipelines silencing per deploy) makes the gate fail closed for good
// where it used to pass: an alert someone silenced now holds every wave.
// keepSilence lists them too, before every new silence: no node of a
// window with silences gets its host steps.
func TestRedteamSilenceGateWithManySilences(t *testing.T) {
	one := `{"id":"%d","matchers":[{"name":"job","value":"deploy-%d","isRegex":false,"isEqual":true}],"startsAt":"2026-11-21T09:00:00Z","endsAt":"2026-11-21T09:10:00Z","createdBy":"ci-pipeline","comment":"deploy window for service %d, silenced by the pipeline","status":{"state":"expired"}}`
	var b strings.Builder
	b.WriteString(`[{"id":"s","matchers":[{"name":"instance","value":"n3","isRegex":false,"isEqual":true}],"startsAt":"2026-11-25T09:00:00Z","endsAt":"2026-11-25T12:00:00Z","createdBy":"alice","comment":"known","status":{"state":"active"}}`)
	for i := 0; b.Len() <= maxBody; i++ {
		b.WriteString(",")
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(one, "%d", "x"), `"id":"x"`, `"id":"`+strings.Repeat("0", 8)+strconv.Itoa(i)+`"`))
	}
	b.WriteString("]")
	list := b.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v2/status":
			_, _ = w.Write([]byte(`{"uptime":"2000-01-01T00:00:00Z","config":{"original":""}}`))
		case "/api/v2/alerts":
			_, _ = w.Write([]byte(`[{"labels":{"alertname":"KubeletDown","instance":"n3","severity":"critical"},"annotations":{},"status":{"state":"suppressed","silencedBy":["s"],"inhibitedBy":[]},"startsAt":"2026-11-25T10:05:00Z","fingerprint":"c"}]`))
		case "/api/v2/silences":
			_, _ = w.Write([]byte(list))
		case "/api/v2/silence/s":
			_, _ = w.Write([]byte(list[1 : strings.Index(list, `}},{`)+2]))
		}
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL, API: Alertmanager}
	got, err := c.Firing(context.Background(), Filter{})
	require.NoError(t, err, "an alert someone silenced holds the gate because Alertmanager keeps many silences")
	require.Empty(t, got)
}
