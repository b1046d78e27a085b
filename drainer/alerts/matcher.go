package alerts

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MatchType is a label matcher's operator, as in PromQL.
type MatchType string

const (
	// MatchEqual (name="v") matches a label whose value is v.
	MatchEqual MatchType = "="
	// MatchNotEqual (name!="v") matches a label whose value is not v.
	MatchNotEqual MatchType = "!="
	// MatchRegexp (name=~"re") matches a label whose whole value matches re.
	MatchRegexp MatchType = "=~"
	// MatchNotRegexp (name!~"re") matches a label whose whole value does
	// not match re.
	MatchNotRegexp MatchType = "!~"
)

// labelName is what a label name must look like, as in Prometheus.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Matcher is one label matcher in PromQL's syntax: name="v", name!="v",
// name=~"re" or name!~"re". Regular expressions are RE2, as in Go's regexp
// package, and fully anchored as in PromQL: =~"crit" matches "crit" but
// not "critical". A label an alert does not have counts as the empty
// string, as in PromQL: severity!="critical" matches an alert without a
// severity label, and team=~".*" matches every alert.
//
// Build a Matcher with ParseMatcher; one of type =~ or !~ built by hand
// has its regular expression compiled on every use.
type Matcher struct {
	// Name of the label.
	Name string
	// Type is the operator.
	Type MatchType
	// Value to compare with, or the regular expression (without the
	// anchors) for =~ and !~.
	Value string

	// re is Value compiled and anchored, for =~ and !~.
	re *regexp.Regexp
}

// anchor anchors a matcher's regular expression the way Prometheus does:
// it must match the whole value, and "." matches a newline too.
func anchor(re string) string {
	return "^(?s:" + re + ")$"
}

// compile compiles a matcher's regular expression, anchored. Its error
// names the expression as the admin wrote it, not the anchored one.
func compile(re string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(re); err != nil {
		return nil, err
	}
	return regexp.Compile(anchor(re))
}

// ParseMatcher parses one label matcher in PromQL's syntax, such as
// severity="critical", severity!="info", alertname=~"Node.*" or
// namespace!~"dev-.*". Spaces around the operator are allowed. The value
// is in double quotes and takes the escapes of a PromQL (and Go) string:
// \" for a double quote and \\ for a backslash, so the regular expression
// a\.b is written "a\\.b". The error says what to fix.
func ParseMatcher(s string) (Matcher, error) {
	text := strings.TrimSpace(s)
	if text == "" {
		return Matcher{}, fmt.Errorf(`empty alert matcher: write one like severity="critical"`)
	}
	m, err := parseMatcher(text)
	if err != nil {
		return Matcher{}, fmt.Errorf("matcher %q: %w", s, err)
	}
	return m, nil
}

// parseMatcher parses a matcher that is not empty, trimmed; the error says
// what to fix, without naming the matcher.
func parseMatcher(text string) (Matcher, error) {
	if strings.HasPrefix(text, "{") {
		return Matcher{}, errors.New(`give one matcher per entry, without braces, e.g. severity="critical"`)
	}
	name, rest, err := splitName(text)
	if err != nil {
		return Matcher{}, err
	}
	op, rest, err := splitOperator(name, rest)
	if err != nil {
		return Matcher{}, err
	}
	value, err := parseValue(name, op, rest)
	if err != nil {
		return Matcher{}, err
	}
	m := Matcher{Name: name, Type: op, Value: value}
	if op == MatchRegexp || op == MatchNotRegexp {
		re, err := compile(value)
		if err != nil {
			return Matcher{}, fmt.Errorf("invalid regular expression %q: %w", value, err)
		}
		m.re = re
	}
	return m, nil
}

// splitName splits a matcher into its label name and the rest, from the
// operator on.
func splitName(text string) (name, rest string, err error) {
	i := strings.IndexAny(text, "=!~")
	if i < 0 {
		return "", "", errors.New(`no operator: write name="value" (or !=, =~, !~), e.g. severity="critical"`)
	}
	name = strings.TrimSpace(text[:i])
	switch {
	case name == "":
		return "", "", errors.New(`the label name is missing before the operator, e.g. severity="critical"`)
	case !labelName.MatchString(name):
		return "", "", fmt.Errorf("label name %q is not valid: it must start with a letter or an underscore and hold only letters, digits and underscores", name)
	}
	return name, text[i:], nil
}

// splitOperator splits what follows the label name into the operator and
// the rest, trimmed.
func splitOperator(name, rest string) (MatchType, string, error) {
	var op MatchType
	switch {
	case strings.HasPrefix(rest, "=~"):
		op = MatchRegexp
	case strings.HasPrefix(rest, "!~"):
		op = MatchNotRegexp
	case strings.HasPrefix(rest, "!="):
		op = MatchNotEqual
	case strings.HasPrefix(rest, "=="):
		return "", "", fmt.Errorf(`use = rather than ==: %s="..."`, name)
	case strings.HasPrefix(rest, "="):
		op = MatchEqual
	default:
		return "", "", fmt.Errorf("unknown operator after %q: use =, !=, =~ or !~", name)
	}
	return op, strings.TrimSpace(rest[len(op):]), nil
}

// parseValue parses the double-quoted value that follows the operator,
// and nothing after it.
func parseValue(name string, op MatchType, rest string) (string, error) {
	switch {
	case rest == "":
		return "", fmt.Errorf(`the value is missing: write %s%s"..." (use "" for an empty value)`, name, op)
	case rest[0] == '\'' || rest[0] == '`':
		inner := rest[1:]
		if n := len(inner); n > 0 && inner[n-1] == rest[0] {
			inner = inner[:n-1]
		}
		return "", fmt.Errorf("use double quotes around the value: %s%s%s", name, op, strconv.Quote(inner))
	case rest[0] != '"':
		return "", fmt.Errorf("quote the value: %s%s%s", name, op, strconv.Quote(rest))
	}
	end := closingQuote(rest)
	if end < 0 {
		return "", errors.New(`the value's closing double quote is missing (write \" for a double quote inside the value)`)
	}
	if extra := strings.TrimSpace(rest[end+1:]); extra != "" {
		return "", fmt.Errorf("unexpected %q after the value: give one matcher per entry", extra)
	}
	value, err := strconv.Unquote(rest[:end+1])
	if err != nil {
		return "", fmt.Errorf(`the value %s has an invalid escape: write a backslash as \\ and a double quote as \" (the regular expression a\.b is "a\\.b")`, rest[:end+1])
	}
	return value, nil
}

// closingQuote returns the index of the double quote that closes the
// string s opens, skipping escaped characters, or -1 when there is none.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// validate reports what is wrong with a matcher built by hand.
func (m Matcher) validate() error {
	if !labelName.MatchString(m.Name) {
		return fmt.Errorf("matcher %s: label name %q is not valid", m, m.Name)
	}
	switch m.Type {
	case MatchEqual, MatchNotEqual:
		return nil
	case MatchRegexp, MatchNotRegexp:
		if m.re != nil {
			return nil
		}
		if _, err := compile(m.Value); err != nil {
			return fmt.Errorf("matcher %s: invalid regular expression %q: %w", m, m.Value, err)
		}
		return nil
	default:
		return fmt.Errorf("matcher %s: unknown operator %q: use =, !=, =~ or !~", m, string(m.Type))
	}
}

// Matches reports whether labels satisfy the matcher. A missing label is
// the empty string, as in PromQL. A matcher with an unknown operator or an
// invalid regular expression matches nothing (Client.Firing refuses such
// a matcher).
func (m Matcher) Matches(labels map[string]string) bool {
	v := labels[m.Name]
	switch m.Type {
	case MatchEqual:
		return v == m.Value
	case MatchNotEqual:
		return v != m.Value
	case MatchRegexp, MatchNotRegexp:
		re := m.re
		if re == nil {
			var err error
			if re, err = compile(m.Value); err != nil {
				return false
			}
		}
		return re.MatchString(v) == (m.Type == MatchRegexp)
	default:
		return false
	}
}

// String returns the matcher in PromQL's syntax, e.g. severity="critical".
// ParseMatcher parses it back.
func (m Matcher) String() string {
	return m.Name + string(m.Type) + strconv.Quote(m.Value)
}
