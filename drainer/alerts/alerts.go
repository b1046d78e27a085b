// Package alerts asks Prometheus or Alertmanager which alerts fire, so
// that lull-drainer can hold a maintenance wave while matching alerts fire
// (like kured's --prometheus-url, --alert-filter-regexp,
// --alert-firing-only and --alert-filter-match-only).
//
// A Filter says which alerts count: PromQL label matchers that must all
// match, alert names to ignore, and whether pending alerts count. A
// Client asks one server and returns the alerts that count; any failure
// to get a complete answer is an error, on which the caller fails closed
// (holds the wave) rather than proceeding blind. An answer that may lack
// alerts that fire is not complete (ErrIncomplete): one the server flags
// as partial, a Prometheus whose rules have not been evaluated for long
// enough since it started, an Alertmanager that Prometheus may not have
// sent its alerts again since it started.
package alerts

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// API says which server answers.
type API string

const (
	// Prometheus serves GET <url>/api/v1/alerts: every alerting rule's
	// alerts, pending (for not yet their rule's "for" duration) or firing.
	Prometheus API = "Prometheus"
	// Alertmanager serves GET <url>/api/v2/alerts: the alerts it received,
	// asked for the active ones only (neither silenced nor inhibited).
	Alertmanager API = "Alertmanager"
)

// Filter selects the alerts that count.
type Filter struct {
	// Matchers must all match an alert's labels for it to count; none:
	// every alert counts.
	Matchers []Matcher
	// Ignore lists the alert names (the label alertname) that never
	// count, as fully anchored regular expressions (ParseFilter anchors
	// them).
	Ignore []*regexp.Regexp
	// FiringOnly: for Prometheus, pending alerts do not count, only
	// firing ones. For Alertmanager, which has no pending alerts, only
	// alerts in state "active" count either way (the query already leaves
	// out silenced and inhibited ones).
	FiringOnly bool
}

// ParseFilter builds a Filter from matchers in PromQL's syntax (see
// ParseMatcher) and regular expressions of alert names to ignore, which
// it anchors as ^(?:re)$ so that "Watchdog" ignores Watchdog but not
// WatchdogFailed. Its errors name the bad entry.
func ParseFilter(matchers, ignore []string, firingOnly bool) (Filter, error) {
	f := Filter{FiringOnly: firingOnly}
	for _, s := range matchers {
		m, err := ParseMatcher(s)
		if err != nil {
			return Filter{}, fmt.Errorf("alert filter: %w", err)
		}
		f.Matchers = append(f.Matchers, m)
	}
	for _, s := range ignore {
		if strings.TrimSpace(s) == "" {
			return Filter{}, fmt.Errorf("alert names to ignore: an entry is empty; give an alert name or a regular expression such as Watchdog or Info.*")
		}
		if _, err := regexp.Compile(s); err != nil {
			return Filter{}, fmt.Errorf("alert names to ignore: %q is not a valid regular expression: %w", s, err)
		}
		re, err := regexp.Compile("^(?:" + s + ")$")
		if err != nil {
			return Filter{}, fmt.Errorf("alert names to ignore: %q is not a valid regular expression: %w", s, err)
		}
		f.Ignore = append(f.Ignore, re)
	}
	return f, nil
}

// validate reports what is wrong with a Filter built by hand.
func (f Filter) validate() error {
	for _, m := range f.Matchers {
		if err := m.validate(); err != nil {
			return fmt.Errorf("alert filter: %w", err)
		}
	}
	for i, re := range f.Ignore {
		if re == nil {
			return fmt.Errorf("alert filter: alert name to ignore #%d is nil", i+1)
		}
	}
	return nil
}

// counts reports whether an alert with these labels counts under f,
// whatever its state.
func (f Filter) counts(labels map[string]string) bool {
	name := labels["alertname"]
	for _, re := range f.Ignore {
		if re.MatchString(name) {
			return false
		}
	}
	for _, m := range f.Matchers {
		if !m.Matches(labels) {
			return false
		}
	}
	return true
}

// couldCount reports whether an alert of the alerting rule name, whose
// rule sets labels, could count under f, whatever labels its series bring:
// the rule's name is the alert's alertname, and a label the rule sets
// replaces the series' (as Prometheus does), unless its value is a
// template ({{ ... }}), which could expand to anything. A matcher on any
// other label could match.
func (f Filter) couldCount(name string, labels map[string]string) bool {
	for _, re := range f.Ignore {
		if re.MatchString(name) {
			return false
		}
	}
	for _, m := range f.Matchers {
		value, known := labels[m.Name]
		switch {
		case m.Name == "alertname":
			value, known = name, true
		case known && strings.Contains(value, "{{"):
			known = false
		}
		if known && !m.Matches(map[string]string{m.Name: value}) {
			return false
		}
	}
	return true
}

// Alert is one alert that counts.
type Alert struct {
	// Name is the alert's name, its label alertname.
	Name string
	// Labels are all the alert's labels, alertname included.
	Labels map[string]string
	// State is "firing" or "pending" for Prometheus; an alert Alertmanager
	// reports active is "firing".
	State string
	// Since is when the alert became active: Prometheus' activeAt,
	// Alertmanager's startsAt. Zero when the server did not say.
	Since time.Time
}

// String returns the alert in one line, e.g.
// NodeDown{instance="n1",severity="critical"} firing since 2026-11-25T10:00:00Z,
// its labels sorted and alertname not repeated inside the braces.
func (a Alert) String() string {
	var b strings.Builder
	b.WriteString(a.Name)
	if s := labelString(a.Labels); s != "" || a.Name == "" {
		b.WriteString("{" + s + "}")
	}
	if a.State != "" {
		b.WriteString(" " + a.State)
	}
	if !a.Since.IsZero() {
		b.WriteString(" since " + a.Since.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// labelString returns labels but alertname as name="value" pairs, sorted
// by name and separated by commas.
func labelString(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k == "alertname" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + strconv.Quote(labels[k]))
	}
	return b.String()
}

// compareAlerts orders alerts by name, then labels, then state and time.
func compareAlerts(a, b Alert) int {
	return cmp.Or(
		strings.Compare(a.Name, b.Name),
		compareLabels(a.Labels, b.Labels),
		strings.Compare(a.State, b.State),
		a.Since.Compare(b.Since),
	)
}

// compareLabels orders label sets by their sorted name="value" pairs.
func compareLabels(a, b map[string]string) int {
	ak, bk := slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b))
	for i := 0; i < len(ak) && i < len(bk); i++ {
		if c := cmp.Or(strings.Compare(ak[i], bk[i]), strings.Compare(a[ak[i]], b[bk[i]])); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(ak), len(bk))
}

// Summary says in one line which alerts fire, e.g.
// "2 alerts fire: A{...} firing since ..., B{...} firing since ...", or
// "no matching alert fires" when none. It lists at most limit alerts,
// followed by "and N more"; limit 0 gives the count alone, a negative limit
// lists every alert.
func Summary(alerts []Alert, limit int) string {
	n := len(alerts)
	switch {
	case n == 0:
		return "no matching alert fires"
	case limit == 0:
		return countPhrase(n)
	case limit < 0 || limit > n:
		limit = n
	}
	parts := make([]string, 0, limit+1)
	for _, a := range alerts[:limit] {
		parts = append(parts, a.String())
	}
	if n > limit {
		parts = append(parts, fmt.Sprintf("and %d more", n-limit))
	}
	return countPhrase(n) + ": " + strings.Join(parts, ", ")
}

// countPhrase says how many alerts fire.
func countPhrase(n int) string {
	if n == 1 {
		return "1 alert fires"
	}
	return fmt.Sprintf("%d alerts fire", n)
}
