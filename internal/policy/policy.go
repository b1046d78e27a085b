// Package policy merges DisruptionPolicies into one ordered rule list and
// decides what a maintenance class needs done to a node. The drainer, the
// policy status controller and `kubectl lull plan` all decide with it.
package policy

import (
	"fmt"
	"path"
	"sort"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Rule is a rule in the merged order, with the policy it comes from.
type Rule struct {
	Policy string
	lullv1alpha1.DisruptionRule
}

// Match is what the rule matches: its class or its pattern, or its change
// matcher ("files: /etc/chrony.conf, /etc/chrony.d/**").
func (r *Rule) Match() string {
	switch {
	case r.ClassPattern != "":
		return r.ClassPattern
	case r.Class != "":
		return r.Class
	}
	if k, patterns := r.changeMatcher(); k != "" {
		if k == lullv1alpha1.ChangeOSImage {
			return "osImage"
		}
		return changeMatcherName[k] + ": " + strings.Join(patterns, ", ")
	}
	return ""
}

var changeMatcherName = map[lullv1alpha1.ChangeKind]string{
	lullv1alpha1.ChangeFile:           "files",
	lullv1alpha1.ChangeUnit:           "units",
	lullv1alpha1.ChangeSSHKeys:        "sshKeys",
	lullv1alpha1.ChangeKernelArgument: "kernelArguments",
}

// changeMatcher is the kind of change the rule matches and its patterns;
// "" for a class rule.
func (r *Rule) changeMatcher() (lullv1alpha1.ChangeKind, []string) {
	switch {
	case len(r.Files) > 0:
		return lullv1alpha1.ChangeFile, r.Files
	case len(r.Units) > 0:
		return lullv1alpha1.ChangeUnit, r.Units
	case len(r.SSHKeys) > 0:
		return lullv1alpha1.ChangeSSHKeys, r.SSHKeys
	case len(r.KernelArguments) > 0:
		return lullv1alpha1.ChangeKernelArgument, r.KernelArguments
	case r.OSImage != nil && *r.OSImage:
		return lullv1alpha1.ChangeOSImage, nil
	}
	return "", nil
}

// MatchesChange reports whether the rule decides change c.
func (r *Rule) MatchesChange(c lullv1alpha1.Change) bool {
	k, patterns := r.changeMatcher()
	if k != c.Kind {
		return false
	}
	if k == lullv1alpha1.ChangeOSImage {
		return true
	}
	if k == lullv1alpha1.ChangeFile && path.Clean(c.Name) != c.Name {
		// Admission refuses such a path; should one get through, no
		// rule decides it (the default does: drain and reboot), since
		// /etc/a/../b matches /etc/a/** by name and is /etc/b on disk.
		return false
	}
	for _, p := range patterns {
		if Glob(p, c.Name, k == lullv1alpha1.ChangeFile) {
			return true
		}
	}
	return false
}

// Ref names the rule as "policy/rule".
func (r *Rule) Ref() string { return r.Policy + "/" + r.Name }

// Matches reports whether the rule decides class.
func (r *Rule) Matches(class string) bool {
	if r.ClassPattern == "" {
		return r.Class != "" && r.Class == class
	}
	ok, err := path.Match(r.ClassPattern, class)
	return err == nil && ok
}

// Set is the cluster's rules in the order they are tried.
type Set struct {
	rules []Rule
	// order is each policy's place (1-based).
	order map[string]int
	// critical are the node-critical units (patterns): the admission
	// guard's criticalUnits; NodeCriticalUnits when nil.
	critical []string
}

// CriticalUnitsKey is the admission guard's parameter (a key of
// settings.AdmissionConfigMap) listing the node-critical units, comma
// separated.
const CriticalUnitsKey = "criticalUnits"

// CriticalUnitsParam reads the node-critical units from the guard's
// parameters as the guard does: a ConfigMap without the key makes every
// unit critical ("*"); no ConfigMap (found false) keeps the shipped
// default, NodeCriticalUnits (nil).
func CriticalUnitsParam(data map[string]string, found bool) []string {
	if !found {
		return nil
	}
	v, ok := data[CriticalUnitsKey]
	if !ok {
		return []string{"*"}
	}
	units := []string{}
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			units = append(units, u)
		}
	}
	return units
}

// WithCriticalUnits sets the node-critical units the plans drain for
// (the admission guard's criticalUnits, so the guard, the drainer and the
// preview judge a restart alike); nil keeps NodeCriticalUnits.
func (s *Set) WithCriticalUnits(units []string) *Set {
	s.critical = units
	return s
}

// Merge orders the policies (higher priority first, then by name) and
// concatenates their rules. Policies being deleted are left out.
func Merge(policies []lullv1alpha1.DisruptionPolicy) *Set {
	ps := make([]*lullv1alpha1.DisruptionPolicy, 0, len(policies))
	for i := range policies {
		if policies[i].DeletionTimestamp == nil {
			ps = append(ps, &policies[i])
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Spec.Priority != ps[j].Spec.Priority {
			return ps[i].Spec.Priority > ps[j].Spec.Priority
		}
		return ps[i].Name < ps[j].Name
	})
	s := &Set{order: map[string]int{}}
	for i, p := range ps {
		s.order[p.Name] = i + 1
		for _, r := range p.Spec.Rules {
			s.rules = append(s.rules, Rule{Policy: p.Name, DisruptionRule: r})
		}
	}
	return s
}

// Rules returns the merged rules in order (without the default).
func (s *Set) Rules() []Rule { return s.rules }

// Order is the policy's place among all policies (1 first); 0 if unknown.
func (s *Set) Order(policy string) int { return s.order[policy] }

// Decide returns the merged plan for a request's classes and changes
// (steps.go): each class, and each change, is decided by the first rule
// that matches it, or the built-in default. The decision records which
// rule decided each and the steps it gave. A request that carries a
// configuration (changes.config) also writes it.
func (s *Set) Decide(classes []string, changes *lullv1alpha1.Changes) lullv1alpha1.Decision {
	list := changes.List()
	ds := make([]decider, 0, len(classes)+len(list))
	var cds []lullv1alpha1.ClassDecision
	for _, c := range classes {
		r := s.match(c)
		ds = append(ds, decider{who: c, rule: r, steps: resolve(r, nil)})
		cds = append(cds, lullv1alpha1.ClassDecision{Class: c, Policy: r.Policy, Rule: r.Name, Steps: labels(r.StepList())})
	}
	var chds []lullv1alpha1.ChangeDecision
	for i := range list {
		c := &list[i]
		r := s.matchChange(*c)
		st := resolve(r, c)
		ds = append(ds, decider{who: c.String(), change: true, rule: r, steps: st})
		chds = append(chds, lullv1alpha1.ChangeDecision{Kind: c.Kind, Name: c.Name, Policy: r.Policy, Rule: r.Name, Steps: labels(st)})
	}
	config := ""
	if changes != nil {
		config = changes.Config
	}
	d := plan(ds, config, s.critical)
	d.Classes, d.Changes, d.Config = cds, chds, config
	return d
}

// matchChange is the first rule that decides change c, else the built-in
// default for changes.
func (s *Set) matchChange(c lullv1alpha1.Change) *Rule {
	for i := range s.rules {
		if s.rules[i].MatchesChange(c) {
			return &s.rules[i]
		}
	}
	return &defaultChangeRule
}

// match is the first rule that decides class, else the built-in default.
func (s *Set) match(class string) *Rule {
	for i := range s.rules {
		if s.rules[i].Matches(class) {
			return &s.rules[i]
		}
	}
	return &defaultRule
}

// defaultRule decides a class no rule matches: drain. A policy's catch-all
// rule ("*") replaces it; the shipped default policy has one that drains
// and reboots.
var defaultRule = Rule{DisruptionRule: lullv1alpha1.DisruptionRule{Name: lullv1alpha1.DefaultRuleName, ClassPattern: "*", Action: lullv1alpha1.ActionDrain}}

// defaultChangeRule decides a change no rule matches: when unsure, the
// disruptive action, drain and reboot (a change nothing accounts for
// takes effect at the latest when the node boots again).
var defaultChangeRule = Rule{DisruptionRule: lullv1alpha1.DisruptionRule{Name: lullv1alpha1.DefaultRuleName,
	Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}}}

// anyChange is what the built-in default for changes matches.
const anyChange = "any change"

// Effective lists the merged rules as statuses show them, each marked when
// an earlier rule already matches every class it matches, and ends with
// the built-in default.
func (s *Set) Effective() []lullv1alpha1.EffectiveRule {
	out := make([]lullv1alpha1.EffectiveRule, 0, len(s.rules)+1)
	catchAll := ""
	for i := range s.rules {
		r := &s.rules[i]
		e := lullv1alpha1.EffectiveRule{Policy: r.Policy, Rule: r.Name, Match: r.Match(), Action: r.Most(), Steps: labels(r.StepList())}
		for j := 0; j < i && e.ShadowedBy == ""; j++ {
			if covers(&s.rules[j], r) {
				e.ShadowedBy = s.rules[j].Ref()
			}
		}
		if catchAll == "" && isCatchAll(r.ClassPattern) {
			catchAll = r.Ref()
		}
		out = append(out, e)
	}
	out = append(out, lullv1alpha1.EffectiveRule{Rule: lullv1alpha1.DefaultRuleName, Match: "*", Action: lullv1alpha1.ActionDrain,
		Steps: labels(defaultRule.StepList()), ShadowedBy: catchAll})
	// Extensions and kernel types match no rule: this default is never
	// shadowed.
	out = append(out, lullv1alpha1.EffectiveRule{Rule: lullv1alpha1.DefaultRuleName, Match: anyChange, Action: defaultChangeRule.Most(),
		Steps: labels(defaultChangeRule.StepList())})
	return out
}

// covers reports whether rule a matches every class, or change, rule b
// matches.
func covers(a, b *Rule) bool {
	if bk, bp := b.changeMatcher(); bk != "" {
		ak, ap := a.changeMatcher()
		if ak != bk {
			return false
		}
		if ak == lullv1alpha1.ChangeOSImage {
			return true
		}
		for _, p := range bp {
			ok := false
			for _, q := range ap {
				ok = ok || q == p || catchAllGlob(q, ak == lullv1alpha1.ChangeFile)
			}
			if !ok {
				return false
			}
		}
		return true
	}
	if b.ClassPattern == "" {
		return a.Matches(b.Class)
	}
	return isCatchAll(a.ClassPattern) || (a.ClassPattern != "" && a.ClassPattern == b.ClassPattern)
}

func isCatchAll(pattern string) bool {
	return pattern != "" && strings.Trim(pattern, "*") == ""
}

// Summary is a policy's rules in one line, "match=Step+Step" in order
// ("chrony-config=RestartService:chronyd units:*=DaemonReload+RestartService:<unit>").
func Summary(p *lullv1alpha1.DisruptionPolicy) string {
	parts := make([]string, 0, len(p.Spec.Rules))
	for _, r := range p.Spec.Rules {
		rr := Rule{DisruptionRule: r}
		steps := make([]string, 0, len(rr.StepList()))
		for _, st := range rr.StepList() {
			unit := st.Unit
			if st.Type.NamesUnit() && unit == "" {
				unit = "<unit>"
			}
			steps = append(steps, strings.ReplaceAll(lullv1alpha1.StepLabel(st.Type, unit), " ", ":"))
		}
		parts = append(parts, strings.ReplaceAll(rr.Match(), " ", "")+"="+strings.Join(steps, "+"))
	}
	return strings.Join(parts, " ")
}

// Describe says in one line what a decision means for a request.
func Describe(classes []string, changes *lullv1alpha1.Changes, d lullv1alpha1.Decision) string {
	what := lullv1alpha1.What(classes, changes)
	needs := "needs"
	switch {
	case what == "":
		what = "the request"
	case len(classes) > 1 || (len(classes) > 0 && !changes.Empty()) || (len(classes) == 0 && len(changes.List()) > 1):
		needs = "need"
	}
	rule := "rule " + d.RuleRef()
	if d.Policy == "" {
		rule = "no DisruptionPolicy rule matches; the default"
	}
	if len(d.Classes)+len(d.Changes) > 1 {
		rule = "rules " + decidedBy(d)
	}
	switch d.Action {
	case lullv1alpha1.ActionNone:
		return fmt.Sprintf("%s %s no disruption (%s)", what, needs, rule)
	case lullv1alpha1.ActionCordon:
		return fmt.Sprintf("%s %s the node cordoned, not drained (%s)", what, needs, rule)
	case lullv1alpha1.ActionDrain:
		return fmt.Sprintf("%s %s the node drained (%s)", what, needs, rule)
	default:
		return fmt.Sprintf("%s %s %s (%s)", what, needs, StepsLine(d.Steps), rule)
	}
}

// decidedBy lists which rule decided each class ("a: p/r, b: (default)"),
// and how many changes each rule decided ("p/chrony: 1 change").
func decidedBy(d lullv1alpha1.Decision) string {
	parts := make([]string, 0, len(d.Classes)+2)
	for i := range d.Classes {
		parts = append(parts, d.Classes[i].Class+": "+d.Classes[i].RuleRef())
	}
	counts := map[string]int{}
	var refs []string
	for i := range d.Changes {
		ref := d.Changes[i].RuleRef()
		if counts[ref] == 0 {
			refs = append(refs, ref)
		}
		counts[ref]++
	}
	for _, ref := range refs {
		n := "1 change"
		if counts[ref] > 1 {
			n = fmt.Sprintf("%d changes", counts[ref])
		}
		parts = append(parts, ref+": "+n)
	}
	return strings.Join(parts, ", ")
}

// Glob matches name against pattern: `*` matches any run of characters
// and `?` any one, within one path segment when paths is set (`**` then
// matches across segments); a malformed pattern matches nothing.
func Glob(p, s string, paths bool) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			double := paths && len(p) > 1 && p[1] == '*'
			rest := p[1:]
			if double {
				rest = p[2:]
				if strings.HasPrefix(rest, "/") && Glob(rest[1:], s, paths) {
					// "a/**/b" also matches "a/b".
					return true
				}
			}
			for i := 0; i <= len(s); i++ {
				if Glob(rest, s[i:], paths) {
					return true
				}
				if i < len(s) && paths && !double && s[i] == '/' {
					return false
				}
			}
			return false
		case '?':
			if len(s) == 0 || (paths && s[0] == '/') {
				return false
			}
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return len(s) == 0
}

// catchAllGlob reports whether pattern matches every name: "*" (or "/**",
// "**" for paths).
func catchAllGlob(pattern string, paths bool) bool {
	if !paths {
		return isCatchAll(pattern)
	}
	return pattern == "**" || pattern == "/**"
}

// StepsLine is a plan in one line: "Cordon, Drain, Reboot".
func StepsLine(steps []lullv1alpha1.PlannedStep) string {
	if len(steps) == 0 {
		return "nothing"
	}
	parts := make([]string, len(steps))
	for i, st := range steps {
		parts[i] = lullv1alpha1.StepLabel(st.Type, st.Unit)
	}
	return strings.Join(parts, ", ")
}
