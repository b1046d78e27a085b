package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNextAction(t *testing.T) {
	st := func(states ...ActionState) []ActionStatus {
		as := make([]ActionStatus, len(states))
		for i, s := range states {
			as[i].State = s
		}
		return as
	}
	for name, tc := range map[string]struct {
		as   []ActionStatus
		want int
	}{
		"none":                    {nil, -1},
		"first pending":           {st(ActionPending, ActionPending), 0},
		"running after a success": {st(ActionSucceeded, ActionRunning, ActionPending), 1},
		"pending after a failure": {st(ActionFailed, ActionSkipped, ActionPending), 2},
		"all done":                {st(ActionSucceeded, ActionTimedOut), -1},
	} {
		require.Equal(t, tc.want, NextAction(tc.as), name)
	}
}

func TestClassDecisionRuleRef(t *testing.T) {
	require.Equal(t, "site/kernel", (&ClassDecision{Class: "a", Policy: "site", Rule: "kernel"}).RuleRef())
	require.Equal(t, DefaultRuleName, (&ClassDecision{Class: "a", Rule: DefaultRuleName}).RuleRef(), "the built-in default")
}
