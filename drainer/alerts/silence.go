package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// SilenceAuthor is the createdBy of the silences lull makes. An alerts
// gate asking Alertmanager tells lull's silences from everyone else's by
// it: an alert silenced by lull alone still reaches the gate, which
// ignores it only while lull holds its node down (a silence someone else
// makes under this name only makes the gate stricter).
const SilenceAuthor = "lull"

// ErrSilenceNotFound: Alertmanager does not know the silence (it was
// never made there, or has been garbage-collected since it expired).
var ErrSilenceNotFound = errors.New("Alertmanager does not know the silence") //nolint:staticcheck // ST1005: the server's name

// silenceID is what lull takes as a silence's ID (Alertmanager's are
// UUIDs): one path segment, no dots, short enough for the request's status.
var silenceID = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// checkID says why id is not a silence ID lull puts in a URL or a status.
func checkID(id string) error {
	if !silenceID.MatchString(id) {
		return fmt.Errorf("%q is not a silence ID (letters, digits and dashes, at most 64): lull does not put it in a URL", id)
	}
	return nil
}

// MaxSilenceMatcher is the longest matcher, expanded, a silence may have
// (what a request's status.silence.matchers holds).
const MaxSilenceMatcher = 1024

// Silence is an Alertmanager silence.
type Silence struct {
	// ID is Alertmanager's; empty for a silence not yet made.
	ID       string
	Matchers []Matcher
	StartsAt time.Time
	EndsAt   time.Time
	// CreatedBy and Comment are free text Alertmanager keeps.
	CreatedBy string
	Comment   string
	// State is Alertmanager's: active, pending or expired (read only).
	State string
}

// Active reports whether the silence silences now, as Alertmanager says.
func (s Silence) Active() bool { return s.State == "active" }

// amMatcher is a matcher in Alertmanager's API v2.
type amMatcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual *bool  `json:"isEqual,omitempty"`
}

// amSilence is a silence in Alertmanager's API v2.
type amSilence struct {
	ID        string      `json:"id,omitempty"`
	Matchers  []amMatcher `json:"matchers"`
	StartsAt  time.Time   `json:"startsAt"`
	EndsAt    time.Time   `json:"endsAt"`
	CreatedBy string      `json:"createdBy"`
	Comment   string      `json:"comment"`
	Status    *struct {
		State string `json:"state"`
	} `json:"status,omitempty"`
}

func toAM(s Silence) amSilence {
	out := amSilence{ID: s.ID, StartsAt: s.StartsAt.UTC(), EndsAt: s.EndsAt.UTC(), CreatedBy: s.CreatedBy, Comment: s.Comment}
	for _, m := range s.Matchers {
		equal := m.Type == MatchEqual || m.Type == MatchRegexp
		out.Matchers = append(out.Matchers, amMatcher{Name: m.Name, Value: m.Value,
			IsRegex: m.Type == MatchRegexp || m.Type == MatchNotRegexp, IsEqual: &equal})
	}
	return out
}

func fromAM(a amSilence) (Silence, error) {
	s := Silence{ID: a.ID, StartsAt: a.StartsAt, EndsAt: a.EndsAt, CreatedBy: a.CreatedBy, Comment: a.Comment}
	if a.Status != nil {
		s.State = a.Status.State
	}
	for _, m := range a.Matchers {
		equal := m.IsEqual == nil || *m.IsEqual
		t := MatchEqual
		switch {
		case m.IsRegex && equal:
			t = MatchRegexp
		case m.IsRegex:
			t = MatchNotRegexp
		case !equal:
			t = MatchNotEqual
		}
		mm, err := silenceAnchored(Matcher{Name: m.Name, Type: t, Value: m.Value})
		if err != nil {
			return Silence{}, fmt.Errorf("silence %s: matcher %s: %w", a.ID, m.Name, err)
		}
		s.Matchers = append(s.Matchers, mm)
	}
	return s, nil
}

// SilenceMatchers expands a silence's matchers as an admin wrote them
// (PromQL syntax, placeholder in values) for node: the node's name goes
// in as it is in = and != values, and escaped as a regular expression in
// =~ and !~ ones (a dot in a node's name matches a dot only). At least
// one matcher must be an equality matcher whose value names the node,
// the placeholder bounded on each side by the value's start or end or a
// character no node name has (instance="$(NODE_NAME):9100", not
// node="$(NODE_NAME)0", which would name node-10 for node-1), so that
// the silence reaches no further than the node; an expanded matcher is
// at most MaxSilenceMatcher long. The errors say which matcher is wrong.
// Regular expressions are anchored as Alertmanager anchors a silence's,
// so that lull judges what a silence selects as Alertmanager does.
func SilenceMatchers(written []string, node string, placeholder string) ([]Matcher, error) {
	if node == "" {
		return nil, fmt.Errorf("silence matchers: no node name to put in them")
	}
	var out []Matcher
	named := false
	for _, w := range written {
		m, err := ParseMatcher(w)
		if err != nil {
			return nil, fmt.Errorf("silence matchers: %w", err)
		}
		named = named || (m.Type == MatchEqual && NamesNode(m.Value, placeholder))
		name := node
		if m.Type == MatchRegexp || m.Type == MatchNotRegexp {
			name = regexp.QuoteMeta(node)
		}
		m.Value = strings.ReplaceAll(m.Value, placeholder, name)
		if m, err = silenceAnchored(m); err != nil {
			return nil, fmt.Errorf("silence matchers: %w", err)
		}
		if n := len(m.String()); n > MaxSilenceMatcher {
			return nil, fmt.Errorf("silence matcher %s is %d characters long with node %s in it, more than %d: write a shorter one", w, n, node, MaxSilenceMatcher)
		}
		out = append(out, m)
	}
	if !named {
		return nil, fmt.Errorf("silence matchers %q: none is an equality matcher naming the node (such as node=%q or instance=\"%s:9100\", the name not run into other letters, digits, dots or dashes): a silence must reach no further than its node",
			written, placeholder, placeholder)
	}
	return out, nil
}

// NamesNode reports whether value names the node by placeholder, bounded
// on each side by the value's start or end or a character no node name
// has (a node's name is lowercase letters, digits, dots and dashes).
func NamesNode(value, placeholder string) bool {
	nodeChar := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '.' || b == '-' }
	for i := 0; ; {
		j := strings.Index(value[i:], placeholder)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(placeholder)
		if (start == 0 || !nodeChar(value[start-1])) && (end == len(value) || !nodeChar(value[end])) {
			return true
		}
		i = start + 1
	}
}

// ParseSilenceMatcher parses a matcher a silence has (as SilenceMatchers
// wrote it), its regular expression anchored as Alertmanager anchors a
// silence's.
func ParseSilenceMatcher(s string) (Matcher, error) {
	m, err := ParseMatcher(s)
	if err != nil {
		return Matcher{}, err
	}
	return silenceAnchored(m)
}

// silenceAnchored compiles m's regular expression as Alertmanager does a
// silence's: ^(?:re)$, where "." does not match a newline (PromQL's
// matchers, and so an alerts gate's, let it).
func silenceAnchored(m Matcher) (Matcher, error) {
	if m.Type != MatchRegexp && m.Type != MatchNotRegexp {
		return m, nil
	}
	re, err := regexp.Compile("^(?:" + m.Value + ")$")
	if err != nil {
		return Matcher{}, fmt.Errorf("%s: %q is not a valid regular expression: %w", m.Name, m.Value, err)
	}
	m.re = re
	return m, nil
}

// SilenceMatches reports whether an alert with these labels is one the
// silence's matchers select (every one matches), as Alertmanager judges.
func SilenceMatches(ms []Matcher, labels map[string]string) bool {
	if len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if !m.Matches(labels) {
			return false
		}
	}
	return true
}

// PutSilence makes the silence (s.ID empty) or updates it (POST
// /api/v2/silences) and returns its ID. Alertmanager updates a silence in
// place only when its matchers and start are unchanged and it is active;
// otherwise it expires the old one and answers a new ID.
func (c *Client) PutSilence(ctx context.Context, s Silence) (string, error) {
	base, err := c.silenceBase()
	if err != nil {
		return "", err
	}
	u := base.JoinPath("api", "v2", "silences")
	where := fmt.Sprintf("putting a silence to Alertmanager at %s", u.Redacted())
	body, err := json.Marshal(toAM(s))
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	answer, err := c.send(ctx, http.MethodPost, u, body, where)
	if err != nil {
		return "", err
	}
	var got struct {
		SilenceID string `json:"silenceID"`
	}
	if err := json.Unmarshal(answer, &got); err != nil || got.SilenceID == "" {
		return "", fmt.Errorf("%s: the answer names no silenceID: it begins %s", where, c.quote(answer))
	}
	if err := checkID(got.SilenceID); err != nil {
		return "", fmt.Errorf("%s: the answer's silenceID: %w", where, err)
	}
	return got.SilenceID, nil
}

// GetSilence reads one silence (GET /api/v2/silence/{id}); an error
// wrapping ErrSilenceNotFound when Alertmanager does not know it.
func (c *Client) GetSilence(ctx context.Context, id string) (Silence, error) {
	base, err := c.silenceBase()
	if err != nil {
		return Silence{}, err
	}
	if err := checkID(id); err != nil {
		return Silence{}, err
	}
	u := base.JoinPath("api", "v2", "silence", id)
	where := fmt.Sprintf("reading silence %s from Alertmanager at %s", id, shown(base))
	answer, err := c.send(ctx, http.MethodGet, u, nil, where)
	if err != nil {
		return Silence{}, err
	}
	var a amSilence
	if err := json.Unmarshal(answer, &a); err != nil {
		return Silence{}, fmt.Errorf("%s: the answer is not a silence: %w; it begins %s", where, err, c.quote(answer))
	}
	if a.ID != id {
		return Silence{}, fmt.Errorf("%s: the answer is silence %q, not the one asked for", where, a.ID)
	}
	return fromAM(a)
}

// ExpireSilence expires a silence now (DELETE /api/v2/silence/{id}); one
// already expired, or unknown to Alertmanager, is no error.
func (c *Client) ExpireSilence(ctx context.Context, id string) error {
	base, err := c.silenceBase()
	if err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	u := base.JoinPath("api", "v2", "silence", id)
	_, err = c.send(ctx, http.MethodDelete, u, nil, fmt.Sprintf("expiring silence %s in Alertmanager at %s", id, shown(base)))
	if errors.Is(err, ErrSilenceNotFound) {
		return nil
	}
	return err
}

// Silences lists the silences Alertmanager keeps (GET /api/v2/silences),
// expired ones included until it forgets them.
func (c *Client) Silences(ctx context.Context) ([]Silence, error) {
	base, err := c.silenceBase()
	if err != nil {
		return nil, err
	}
	return c.silences(ctx, base)
}

func (c *Client) silences(ctx context.Context, base *url.URL) ([]Silence, error) {
	u := base.JoinPath("api", "v2", "silences")
	where := fmt.Sprintf("listing the silences of Alertmanager at %s", shown(base))
	answer, err := c.send(ctx, http.MethodGet, u, nil, where)
	if err != nil {
		return nil, err
	}
	var list []amSilence
	if err := json.Unmarshal(answer, &list); err != nil {
		return nil, fmt.Errorf("%s: the answer is not a list of silences: %w; it begins %s", where, err, c.quote(answer))
	}
	out := make([]Silence, 0, len(list))
	for _, a := range list {
		s, err := fromAM(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// silenceBase is the Alertmanager's base URL; silences are Alertmanager's.
func (c *Client) silenceBase() (*url.URL, error) {
	if api, err := c.api(); err != nil {
		return nil, err
	} else if api != Alertmanager {
		return nil, fmt.Errorf("silences are Alertmanager's: the client asks %s", api)
	}
	return c.base(Alertmanager)
}

// send sends a request with the client's credentials and returns the
// answer's body; a 404 wraps ErrSilenceNotFound.
func (c *Client) send(ctx context.Context, method string, u *url.URL, body []byte, where string) ([]byte, error) {
	req, err := c.newRequest(ctx, u, where)
	if err != nil {
		return nil, err
	}
	req.Method = method
	if body != nil {
		req.Body, req.ContentLength = readCloser(body), int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return readCloser(body), nil }
		req.Header.Set("Content-Type", "application/json")
	}
	answer, err := c.get(req, where)
	var status *statusError
	if errors.As(err, &status) && status.code == http.StatusNotFound && strings.Contains(u.Path, "api/v2/silence/") {
		// Not found by Alertmanager itself, or by a proxy in front of it
		// (an ingress's default backend): only Alertmanager answering its
		// status at the same base says the silence is gone.
		if c.isAlertmanager(ctx, u) {
			return nil, fmt.Errorf("%w: %w", ErrSilenceNotFound, err)
		}
		return nil, fmt.Errorf("%w (and no Alertmanager answers its status there)", err)
	}
	return answer, err
}

// isAlertmanager reports whether Alertmanager's GET /api/v2/status
// answers beside the silence URL u.
func (c *Client) isAlertmanager(ctx context.Context, u *url.URL) bool {
	i := strings.LastIndex(u.Path, "api/v2/silence/")
	status := *u
	status.Path, status.RawPath = u.Path[:i]+"api/v2/status", ""
	req, err := c.newRequest(ctx, &status, "asking Alertmanager its status")
	if err != nil {
		return false
	}
	body, err := c.get(req, "asking Alertmanager its status")
	if err != nil {
		return false
	}
	var st struct {
		Uptime *time.Time `json:"uptime"`
	}
	return json.Unmarshal(body, &st) == nil && st.Uptime != nil
}

func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
