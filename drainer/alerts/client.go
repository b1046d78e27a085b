package alerts

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/utils/clock"
)

const (
	// DefaultTimeout bounds a question when Client.HTTP is nil.
	DefaultTimeout = 10 * time.Second
	// maxBody is the largest answer read; a larger one is an error.
	maxBody = 8 << 20
	// maxQuoted is the most of an answer's body an error quotes.
	maxQuoted = 200
)

// Client asks one server which alerts fire.
type Client struct {
	// URL is the server's base URL, e.g. http://10.244.0.1:9090 or
	// https://alertmanager.monitoring:9093/; a trailing slash and a path
	// prefix (https://monitoring.example/prometheus) are allowed.
	URL string
	// API says which server answers; "" means Prometheus.
	API API
	// HTTP asks; nil: NewHTTPClient(CA, DefaultTimeout). A client given
	// here brings its own TLS configuration: CA is not used.
	HTTP *http.Client

	// BearerToken, or else Username and Password (basic auth), are the
	// credentials to send, typically from a Secret. Setting both is an
	// error. Leading and trailing white space around the token (such as
	// the newline of a file turned into a Secret) is dropped.
	BearerToken string
	// Username for basic auth.
	Username string
	// Password for basic auth.
	Password string
	// CA is the PEM bundle that an https server's certificate must chain
	// to, instead of the system's roots; empty: the system's roots.
	CA []byte

	// Clock says what time it is, to judge how long ago Alertmanager
	// started; nil: the real clock. (Prometheus is judged by its own
	// timestamps alone.)
	Clock clock.PassiveClock
}

// NewHTTPClient returns an *http.Client whose requests time out after
// timeout (0: never), using the proxy from the environment as Go's
// default client does. When ca is non-empty, https servers must present a
// certificate that chains to one of its PEM certificates, and to nothing
// else (not the system's roots); it is an error if ca holds no
// certificate. Redirects are not followed, so that credentials are never
// sent elsewhere: a redirect is an error naming where it pointed.
func NewHTTPClient(ca []byte, timeout time.Duration) (*http.Client, error) {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("cannot build an HTTP client: http.DefaultTransport is a %T, not an *http.Transport", http.DefaultTransport)
	}
	transport := base.Clone()
	transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if len(bytes.TrimSpace(ca)) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("the CA bundle holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)")
		}
		transport.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("the server redirects to %s, which is not followed so that credentials go nowhere else: set the URL to the server that answers", req.URL.Redacted())
		},
	}, nil
}

// Firing returns the alerts that count under f, sorted by name, then
// labels. Any failure is an error that says which URL was asked and what
// went wrong: the request cannot be sent or gets no answer, the answer's
// status is not 2xx, Prometheus answers "status":"error", the answer is
// not the JSON expected or is larger than 8 MiB. An answer that may lack
// alerts that fire is an error too, wrapping ErrIncomplete: the server
// flags it as partial, or has not been up long enough to know every alert
// that fires. The caller should fail closed on any error. Errors quote at
// most 200 bytes of an answer, and never the credentials.
//
// Prometheus is asked three questions, in this order: when it started
// (/api/v1/status/runtimeinfo), how its rules are evaluated
// (/api/v1/rules), and which alerts fire (/api/v1/alerts) — the last
// answer is as recent as the evaluations the second showed. Alertmanager
// is asked when it started (/api/v2/status), then which alerts fire.
func (c *Client) Firing(ctx context.Context, f Filter) ([]Alert, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	base, err := c.base(api)
	if err != nil {
		return nil, err
	}
	if c.HTTP == nil {
		// One client for the questions below, its connections let go after.
		hc, err := NewHTTPClient(c.CA, DefaultTimeout)
		if err != nil {
			return nil, fmt.Errorf("asking %s at %s which alerts fire: %w", api, shown(base), err)
		}
		defer hc.CloseIdleConnections()
		withHTTP := *c
		withHTTP.HTTP = hc
		c = &withHTTP
	}
	if api == Alertmanager {
		err = c.alertmanagerComplete(ctx, base)
	} else {
		err = c.prometheusComplete(ctx, base, f)
	}
	if err != nil {
		return nil, err
	}

	u := alertsURL(api, base)
	where := fmt.Sprintf("asking %s at %s which alerts fire", api, u.Redacted())
	body, err := c.ask(ctx, u, where)
	if err != nil {
		return nil, err
	}
	var alerts []Alert
	if api == Alertmanager {
		alerts, err = c.alertmanager(ctx, body, f)
	} else {
		alerts, err = c.prometheus(body, f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	slices.SortFunc(alerts, compareAlerts)
	return alerts, nil
}

// ask GETs u with the client's credentials and returns the answer's body;
// where says what is asked, for errors.
func (c *Client) ask(ctx context.Context, u *url.URL, where string) ([]byte, error) {
	req, err := c.newRequest(ctx, u, where)
	if err != nil {
		return nil, err
	}
	return c.get(req, where)
}

// newRequest is the GET request for u, with the client's credentials;
// where says what is asked, for errors.
func (c *Client) newRequest(ctx context.Context, u *url.URL, where string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	req.Header.Set("Accept", "application/json")
	token := strings.TrimSpace(c.BearerToken)
	switch {
	case token != "" && (c.Username != "" || c.Password != ""):
		return nil, fmt.Errorf("%s: both a bearer token and a username and password are given: give one or the other", where)
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	case c.Username != "" || c.Password != "":
		req.SetBasicAuth(c.Username, c.Password)
	}
	return req, nil
}

// get sends req and returns the answer's body: an error unless the
// server answers 2xx with at most maxBody bytes.
func (c *Client) get(req *http.Request, where string) ([]byte, error) {
	hc := c.HTTP
	if hc == nil {
		var err error
		if hc, err = NewHTTPClient(c.CA, DefaultTimeout); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		// This client is used once: let its connections go.
		defer hc.CloseIdleConnections()
	}

	resp, err := hc.Do(req)
	if err != nil {
		// The request's URL is in where already.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer (status %s): %w", where, resp.Status, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s: the server answered %s%s: %s", where, resp.Status, statusHint(resp.StatusCode), c.quote(body))}
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("%s: the answer is larger than %d MiB", where, maxBody>>20)
	}
	return body, nil
}

// statusError is an answer whose status is not 2xx.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// api returns the API the client asks.
func (c *Client) api() (API, error) {
	switch {
	case c.API == "" || strings.EqualFold(string(c.API), string(Prometheus)):
		return Prometheus, nil
	case strings.EqualFold(string(c.API), string(Alertmanager)):
		return Alertmanager, nil
	default:
		return "", fmt.Errorf("unknown alerts API %q: use %s or %s", string(c.API), Prometheus, Alertmanager)
	}
}

// base returns the server's base URL, checked.
func (c *Client) base(api API) (*url.URL, error) {
	if strings.TrimSpace(c.URL) == "" {
		return nil, fmt.Errorf("no %s URL given: set one such as http://prometheus.monitoring:9090", api)
	}
	base, err := url.Parse(strings.TrimSpace(c.URL))
	if err != nil {
		// url.Parse's error quotes the URL, which may hold a password.
		return nil, fmt.Errorf("%s URL is not valid: set one such as http://prometheus.monitoring:9090", api)
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("%s URL %s must start with http:// or https:// and name a host, e.g. http://prometheus.monitoring:9090", api, base.Redacted())
	}
	if base.Fragment != "" {
		return nil, fmt.Errorf("%s URL %s has a fragment (#...): remove it", api, base.Redacted())
	}
	return base, nil
}

// alertsURL returns the URL to ask for api's alerts.
func alertsURL(api API, base *url.URL) *url.URL {
	if api == Prometheus {
		return base.JoinPath("api", "v1", "alerts")
	}
	u := base.JoinPath("api", "v2", "alerts")
	q := u.Query()
	q.Set("active", "true")
	// Silenced alerts too: one silenced by lull alone still counts unless
	// lull holds its node down (Firing).
	q.Set("silenced", "true")
	q.Set("inhibited", "false")
	u.RawQuery = q.Encode()
	return u
}

// promEnvelope is what every answer of Prometheus' API carries beside
// its data.
type promEnvelope struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	// Warnings say what went wrong while answering: Thanos' partial
	// responses (a store or ruler not answering), Prometheus' own.
	Warnings []string `json:"warnings"`
	// IsPartial is VictoriaMetrics' flag of a partial answer,
	// PartialResponse the same flag in another spelling.
	IsPartial       bool `json:"isPartial"`
	PartialResponse bool `json:"partialResponse"`
}

// check returns the error an answer with this envelope is, nil when it
// is a complete success; body is the whole answer, for errors.
func (c *Client) check(e promEnvelope, body []byte) error {
	switch {
	case e.Status == "error":
		msg := e.Error
		if e.ErrorType != "" {
			msg = e.ErrorType + ": " + msg
		}
		return fmt.Errorf("the server answered with an error: %s", c.quote([]byte(msg)))
	case e.Status != "success":
		return fmt.Errorf("the answer's status is %s, not \"success\": is this Prometheus? It begins %s", c.quote([]byte(e.Status)), c.quote(body))
	case len(e.Warnings) > 0:
		more := ""
		if n := len(e.Warnings) - 1; n == 1 {
			more = " (and 1 more warning)"
		} else if n > 1 {
			more = fmt.Sprintf(" (and %d more warnings)", n)
		}
		return fmt.Errorf("%w: the server warns %s%s", ErrIncomplete, c.quote([]byte(e.Warnings[0])), more)
	case e.IsPartial:
		return fmt.Errorf("%w: the server flags it as partial (isPartial)", ErrIncomplete)
	case e.PartialResponse:
		return fmt.Errorf("%w: the server flags it as partial (partialResponse)", ErrIncomplete)
	}
	return nil
}

// promAnswer is Prometheus' answer to GET /api/v1/alerts.
type promAnswer struct {
	promEnvelope
	Data *struct {
		Alerts []struct {
			Labels   map[string]string `json:"labels"`
			State    string            `json:"state"`
			ActiveAt string            `json:"activeAt"`
		} `json:"alerts"`
	} `json:"data"`
}

// prometheus returns the alerts that count in Prometheus' answer.
func (c *Client) prometheus(body []byte, f Filter) ([]Alert, error) {
	var answer promAnswer
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("the answer is not Prometheus' JSON: %w; it begins %s", err, c.quote(body))
	}
	if err := c.check(answer.promEnvelope, body); err != nil {
		return nil, err
	}
	if answer.Data == nil || answer.Data.Alerts == nil {
		return nil, fmt.Errorf("the answer has no list of alerts (data.alerts): is this Prometheus? It begins %s", c.quote(body))
	}
	var out []Alert
	for _, a := range answer.Data.Alerts {
		switch {
		case a.State == "firing":
		case a.State == "pending" && !f.FiringOnly:
		default:
			continue
		}
		if !f.counts(a.Labels) {
			continue
		}
		out = append(out, newAlert(a.Labels, a.State, a.ActiveAt))
	}
	return out, nil
}

// amAlert is one alert in Alertmanager's answer to GET /api/v2/alerts.
type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State       string   `json:"state"`
		SilencedBy  []string `json:"silencedBy"`
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status"`
	StartsAt string `json:"startsAt"`
}

// alertmanager returns the alerts that count in Alertmanager's answer:
// the active ones, and those silenced by lull's silences alone (the
// caller ignores those while lull holds their node down); an alert that
// anyone else silenced, or that is inhibited, does not count.
func (c *Client) alertmanager(ctx context.Context, body []byte, f Filter) ([]Alert, error) {
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, fmt.Errorf("the answer is not a JSON list of alerts: is this Alertmanager? It begins %s", c.quote(body))
	}
	var answer []amAlert
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("the answer is not Alertmanager's JSON: %w; it begins %s", err, c.quote(body))
	}
	var out []Alert
	authors := &silenceAuthors{c: c, known: map[string]bool{}}
	for _, a := range answer {
		if !f.counts(a.Labels) || len(a.Status.InhibitedBy) > 0 {
			continue
		}
		switch {
		case a.Status.State == "active" && len(a.Status.SilencedBy) == 0:
		case a.Status.State == "suppressed" && len(a.Status.SilencedBy) > 0:
			others, err := authors.byOthers(ctx, a.Status.SilencedBy)
			if err != nil {
				return nil, err
			}
			if others {
				continue // someone else silenced it
			}
		default:
			continue
		}
		out = append(out, newAlert(a.Labels, "firing", a.StartsAt))
	}
	return out, nil
}

// silenceAuthors tells whose the silences that silence an answer's
// alerts are, reading each once (GET /api/v2/silence/{id}): not the whole
// list, which grows with every silence Alertmanager keeps.
type silenceAuthors struct {
	c     *Client
	known map[string]bool // ID → someone else's (true) or lull's (false)
}

// byOthers reports whether someone other than lull silenced the alert:
// one of ids is not lull's (SilenceAuthor). A silence Alertmanager does
// not know (another replica's, not yet gossiped) is taken as lull's: the
// alert then counts unless lull holds its node down (fails closed).
func (a *silenceAuthors) byOthers(ctx context.Context, ids []string) (bool, error) {
	for _, id := range ids {
		others, ok := a.known[id]
		if !ok {
			s, err := a.c.GetSilence(ctx, id)
			switch {
			case errors.Is(err, ErrSilenceNotFound):
			case err != nil:
				return false, err
			default:
				others = s.CreatedBy != SilenceAuthor
			}
			a.known[id] = others
		}
		if others {
			return true, nil
		}
	}
	return false, nil
}

// newAlert returns an alert with a copy of labels, active since the
// RFC 3339 time since (zero if it is not one).
func newAlert(labels map[string]string, state, since string) Alert {
	a := Alert{Name: labels["alertname"], Labels: make(map[string]string, len(labels)), State: state}
	for k, v := range labels {
		a.Labels[k] = v
	}
	if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
		a.Since = t
	}
	return a
}

// statusHint says what to check after an HTTP status.
func statusHint(code int) string {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return " (check the credentials)"
	case http.StatusNotFound:
		return " (check the URL and whether the server is Prometheus or Alertmanager)"
	default:
		return ""
	}
}

// quote returns at most the first 200 bytes of b, on one line, quoted,
// with the credentials blanked out should the server echo them.
func (c *Client) quote(b []byte) string {
	secrets := c.secrets()
	// Blank out before cutting, so that no part of a secret is left at
	// the cut, but not through all of a large body.
	look := maxQuoted
	for _, secret := range secrets {
		look = max(look, maxQuoted+len(secret))
	}
	s := string(b[:min(len(b), look)])
	for _, secret := range secrets {
		s = strings.ReplaceAll(s, secret, "<redacted>")
	}
	cut := len(b) > look || len(s) > maxQuoted
	if len(s) > maxQuoted {
		// Cut before the rune the limit falls in, not through it.
		end := maxQuoted
		for end > maxQuoted-utf8.UTFMax && !utf8.RuneStart(s[end]) {
			end--
		}
		s = s[:end]
	}
	s = strings.Join(strings.Fields(s), " ")
	if cut {
		return fmt.Sprintf("%q (cut at %d bytes)", s, maxQuoted)
	}
	return fmt.Sprintf("%q", s)
}

// secrets returns the credentials an error must not show: the token, the
// password, and the basic auth value of the Authorization header.
func (c *Client) secrets() []string {
	var out []string
	if token := strings.TrimSpace(c.BearerToken); token != "" {
		out = append(out, token)
	}
	if c.Username != "" || c.Password != "" {
		out = append(out, base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password)))
	}
	if c.Password != "" {
		out = append(out, c.Password)
	}
	return out
}
