package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// ErrIncomplete is wrapped by the errors of answers that may lack alerts
// that fire: the server flags the answer as partial, or has not been up
// long enough to know every alert that fires. Such an answer says
// nothing about what does not fire, so the gate holds (fails closed).
var ErrIncomplete = errors.New("the answer may be incomplete")

const (
	// PrometheusResendDelay is Prometheus' default
	// --rules.alert.resend-delay: it sends a firing alert to Alertmanager
	// again at the first rule evaluation more than this after it last
	// sent it.
	PrometheusResendDelay = time.Minute
	// PrometheusEvaluationInterval is Prometheus' default
	// evaluation_interval, how often it evaluates a rule group.
	PrometheusEvaluationInterval = time.Minute
	// AlertmanagerResendWait is how long after Alertmanager starts its
	// answer may lack alerts that fire: Alertmanager keeps no alerts
	// across a restart (only silences and notification logs), and
	// Prometheus sends a firing alert again only after its resend delay,
	// at its next rule evaluation. Prometheus' defaults are assumed: the
	// gate cannot see the Prometheus servers that send to Alertmanager.
	AlertmanagerResendWait = PrometheusResendDelay + PrometheusEvaluationInterval
	// maxGroupsNamed is the most rule groups an error names.
	maxGroupsNamed = 3
)

// runtimeInfo is the data of Prometheus' GET /api/v1/status/runtimeinfo.
type runtimeInfo struct {
	// StartTime is when the process started.
	StartTime time.Time `json:"startTime"`
	// LastConfigTime is when the configuration (with the rules) was
	// last loaded, in whole seconds: at the start after the store has
	// opened (which may take minutes of WAL replay), and at each reload.
	LastConfigTime time.Time `json:"lastConfigTime"`
}

// ruleGroup is one group of Prometheus' GET /api/v1/rules.
type ruleGroup struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Interval is how often the group is evaluated, in seconds.
	Interval float64 `json:"interval"`
	// LastEvaluation is when its last evaluation began; zero before the
	// first.
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []struct {
		// Type is "alerting" or "recording".
		Type string `json:"type"`
		Name string `json:"name"`
		// Duration is an alerting rule's for:, in seconds.
		Duration float64           `json:"duration"`
		Labels   map[string]string `json:"labels"`
	} `json:"rules"`
}

// prometheusComplete asks Prometheus when it started and how its rules
// are evaluated, and returns an error wrapping ErrIncomplete while its
// alerts may not show every alert that fires (see rulesEvaluated), or an
// error when it cannot be asked.
func (c *Client) prometheusComplete(ctx context.Context, base *url.URL, f Filter) error {
	u := base.JoinPath("api", "v1", "status", "runtimeinfo")
	where := fmt.Sprintf("asking %s at %s when it started", Prometheus, u.Redacted())
	var info runtimeInfo
	if err := c.askProm(ctx, u, where, &info); err != nil {
		return err
	}
	if info.StartTime.IsZero() {
		return fmt.Errorf("%s: the answer does not say when the server started (data.startTime): is this Prometheus?", where)
	}

	u = base.JoinPath("api", "v1", "rules")
	// The alerts come from /api/v1/alerts: leave them out here.
	u.RawQuery = url.Values{"exclude_alerts": {"true"}}.Encode()
	where = fmt.Sprintf("asking %s at %s how its rules are evaluated", Prometheus, u.Redacted())
	var rules struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := c.askProm(ctx, u, where, &rules); err != nil {
		return err
	}
	if rules.Groups == nil {
		return fmt.Errorf("%s: the answer has no list of rule groups (data.groups): is this Prometheus?", where)
	}

	where = fmt.Sprintf("asking %s at %s which alerts fire", Prometheus, shown(base))
	reason, err := rulesEvaluated(info, rules.Groups, f)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", where, err)
	case reason != "":
		return fmt.Errorf("%s: %w: %s", where, ErrIncomplete, reason)
	}
	return nil
}

// askProm asks Prometheus' API at u and decodes the answer's data into
// data; where says what is asked, for errors.
func (c *Client) askProm(ctx context.Context, u *url.URL, where string, data any) error {
	body, err := c.ask(ctx, u, where)
	if err != nil {
		return err
	}
	var answer struct {
		promEnvelope
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("%s: the answer is not Prometheus' JSON: %w; it begins %s", where, err, c.quote(body))
	}
	if err := c.check(answer.promEnvelope, body); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if len(answer.Data) == 0 {
		return fmt.Errorf("%s: the answer has no data: is this Prometheus? It begins %s", where, c.quote(body))
	}
	if err := json.Unmarshal(answer.Data, data); err != nil {
		return fmt.Errorf("%s: the answer is not Prometheus' JSON: %w; it begins %s", where, err, c.quote(body))
	}
	return nil
}

// rulesEvaluated says why Prometheus' alerts may lack alerts that fire
// that f could count, "" when they cannot: it judges by Prometheus' own
// timestamps, so the clocks of lull and Prometheus need not agree.
//
// Prometheus keeps its alerts in memory. After a start, an alert shows
// only once its rule group has been evaluated, and an alert whose for:
// state was lost (an emptyDir store; one persisted is restored a little
// later) shows pending for its for: again although it fires. Evaluation
// begins when the configuration is loaded: at the start, once the store
// has opened (a WAL replay may take minutes), and at a reload, which
// starts a renamed group afresh. From the later of the start and the
// last load (the anchor), lull waits until
//
//   - every rule group has been evaluated since (an alert may read what
//     another group's recording rules record), and
//   - every group with an alerting rule whose alerts f could count (see
//     Filter.couldCount) has been evaluated at or after the anchor + the
//     longest group interval (by then every group has been evaluated
//     once) + three of its own intervals (its first evaluation that
//     finds the alert active; the one after, when a persisted for: state
//     is restored; and the one at which for: has run out) + the longest
//     for: of those rules (none when pending alerts count: they hold as
//     soon as they show).
func rulesEvaluated(info runtimeInfo, groups []ruleGroup, f Filter) (string, error) {
	anchor, since := info.StartTime, fmt.Sprintf("Prometheus started at %s", stamp(info.StartTime))
	if info.LastConfigTime.After(anchor) {
		anchor = info.LastConfigTime
		since += fmt.Sprintf(" and loaded its configuration at %s", stamp(info.LastConfigTime))
	}
	var longest time.Duration
	for _, g := range groups {
		if g.Interval <= 0 || math.IsNaN(g.Interval) || math.IsInf(g.Interval, 0) {
			return "", fmt.Errorf("rule group %q (%s) has no evaluation interval (%v): lull cannot tell when its alerts are complete", g.Name, g.File, g.Interval)
		}
		longest = max(longest, seconds(g.Interval))
	}

	var waiting []string
	var until time.Time
	for _, g := range groups {
		interval := seconds(g.Interval)
		counts := false
		var hold time.Duration // the longest for: f could count
		for _, r := range g.Rules {
			if r.Type != "alerting" || !f.couldCount(r.Name, r.Labels) {
				continue
			}
			counts = true
			if f.FiringOnly && r.Duration > 0 {
				hold = max(hold, seconds(r.Duration))
			}
		}
		need := anchor.Add(longest + 3*interval + hold)
		switch {
		case g.LastEvaluation.Before(anchor):
			waiting = append(waiting, fmt.Sprintf("rule group %q (%s) has not been evaluated since", g.Name, g.File))
		case counts && g.LastEvaluation.Before(need):
			waiting = append(waiting, fmt.Sprintf("rule group %q (%s) last evaluated at %s", g.Name, g.File, stamp(g.LastEvaluation)))
		default:
			continue
		}
		if counts && need.After(until) {
			until = need
		}
	}
	if len(waiting) == 0 {
		return "", nil
	}
	if n := len(waiting) - maxGroupsNamed; n > 0 {
		waiting = append(waiting[:maxGroupsNamed], fmt.Sprintf("and %d more", n))
	}
	if until.IsZero() {
		return fmt.Sprintf("%s; its alerts are complete once each rule group has been evaluated since (%s)", since, strings.Join(waiting, "; ")), nil
	}
	return fmt.Sprintf("%s; its alerts are complete once its rules are evaluated at or after %s (%s)", since, stampUp(until), strings.Join(waiting, "; ")), nil
}

// alertmanagerComplete asks Alertmanager when it started, and returns an
// error wrapping ErrIncomplete while it may not have received again the
// alerts that fire (AlertmanagerResendWait), or an error when it cannot
// be asked.
func (c *Client) alertmanagerComplete(ctx context.Context, base *url.URL) error {
	u := base.JoinPath("api", "v2", "status")
	where := fmt.Sprintf("asking %s at %s when it started", Alertmanager, u.Redacted())
	body, err := c.ask(ctx, u, where)
	if err != nil {
		return err
	}
	// The answer holds Alertmanager's configuration, receivers' secrets
	// included: no error quotes it.
	var status struct {
		Uptime string `json:"uptime"`
	}
	if err := json.Unmarshal(body, &status); err != nil {
		return fmt.Errorf("%s: the answer is not Alertmanager's status JSON: %w: is this Alertmanager?", where, err)
	}
	started, err := time.Parse(time.RFC3339Nano, status.Uptime)
	if err != nil || started.IsZero() {
		return fmt.Errorf("%s: the answer does not say when Alertmanager started (uptime): is this Alertmanager?", where)
	}
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if until := started.Add(AlertmanagerResendWait); clk.Now().Before(until) {
		return fmt.Errorf("asking %s at %s which alerts fire: %w: Alertmanager started at %s and keeps no alerts across a restart; "+
			"Prometheus sends a firing alert again only every %s (its --rules.alert.resend-delay, %s by default, and the rule evaluation after it, every %s by default): complete at %s",
			Alertmanager, shown(base), ErrIncomplete, stamp(started), AlertmanagerResendWait, PrometheusResendDelay, PrometheusEvaluationInterval, stampUp(until))
	}
	return nil
}

// seconds converts a number of seconds from an answer to a duration.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// stamp formats t for a message: UTC, to the second.
func stamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// stampUp formats t for a message, rounded up to the second: the time
// to wait for.
func stampUp(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return stamp(t)
}

// shown is the base URL as messages show it: no password, no trailing
// slash.
func shown(base *url.URL) string {
	return strings.TrimRight(base.Redacted(), "/")
}
