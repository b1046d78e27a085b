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

// Match is what the rule matches: its class or its pattern.
func (r *Rule) Match() string {
	if r.ClassPattern != "" {
		return r.ClassPattern
	}
	return r.Class
}

// Ref names the rule as "policy/rule".
func (r *Rule) Ref() string { return r.Policy + "/" + r.Name }

// Matches reports whether the rule decides class.
func (r *Rule) Matches(class string) bool {
	if r.ClassPattern == "" {
		return r.Class == class
	}
	ok, err := path.Match(r.ClassPattern, class)
	return err == nil && ok
}

// Set is the cluster's rules in the order they are tried.
type Set struct {
	rules []Rule
	// order is each policy's place (1-based).
	order map[string]int
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

// Decide returns the merged plan for a request's classes (steps.go).
func (s *Set) Decide(classes []string) lullv1alpha1.Decision {
	rules := make([]*Rule, len(classes))
	for i, c := range classes {
		rules[i] = s.match(c)
	}
	return plan(classes, rules)
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
	return out
}

// covers reports whether rule a matches every class rule b matches.
func covers(a, b *Rule) bool {
	if b.ClassPattern == "" {
		return a.Matches(b.Class)
	}
	return isCatchAll(a.ClassPattern) || (a.ClassPattern != "" && a.ClassPattern == b.ClassPattern)
}

func isCatchAll(pattern string) bool {
	return pattern != "" && strings.Trim(pattern, "*") == ""
}

// Summary is a policy's rules in one line, "match=Step+Step" in order.
func Summary(p *lullv1alpha1.DisruptionPolicy) string {
	parts := make([]string, 0, len(p.Spec.Rules))
	for _, r := range p.Spec.Rules {
		rr := Rule{DisruptionRule: r}
		parts = append(parts, fmt.Sprintf("%s=%s", rr.Match(), strings.ReplaceAll(strings.Join(labels(rr.StepList()), "+"), " ", ":")))
	}
	return strings.Join(parts, " ")
}

// Describe says in one line what a decision means for a request.
func Describe(classes []string, d lullv1alpha1.Decision) string {
	what := "class " + strings.Join(classes, ", ")
	if len(classes) > 1 {
		what = "classes " + strings.Join(classes, ", ")
	}
	rule := "rule " + d.RuleRef()
	if d.Policy == "" {
		rule = "no DisruptionPolicy rule matches; the default"
	}
	if len(d.Classes) > 1 {
		rule = "rules " + classRules(d.Classes)
	}
	switch d.Action {
	case lullv1alpha1.ActionNone:
		return fmt.Sprintf("%s needs no disruption (%s)", what, rule)
	case lullv1alpha1.ActionCordon:
		return fmt.Sprintf("%s needs the node cordoned, not drained (%s)", what, rule)
	case lullv1alpha1.ActionDrain:
		return fmt.Sprintf("%s needs the node drained (%s)", what, rule)
	default:
		return fmt.Sprintf("%s needs %s (%s)", what, StepsLine(d.Steps), rule)
	}
}

// classRules lists which rule decided each class: "a: p/r, b: (default)".
func classRules(cs []lullv1alpha1.ClassDecision) string {
	parts := make([]string, len(cs))
	for i := range cs {
		parts[i] = cs[i].Class + ": " + cs[i].RuleRef()
	}
	return strings.Join(parts, ", ")
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
