package capi

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func machine(mutate func(*unstructured.Unstructured)) *unstructured.Unstructured {
	m := &unstructured.Unstructured{Object: map[string]any{}}
	m.SetGroupVersionKind(MachineKind)
	m.SetName("md-0-abc")
	m.SetNamespace("ns")
	m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: Group + "/v1beta2", Kind: "MachineSet", Name: "md-0-old", Controller: ptr.To(true)}})
	if mutate != nil {
		mutate(m)
	}
	return m
}

func set(name, revision string, replicas int64) *unstructured.Unstructured {
	s := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": replicas}}}
	s.SetGroupVersionKind(MachineSetKind)
	s.SetName(name)
	s.SetAnnotations(map[string]string{RevisionAnnotation: revision})
	return s
}

func deployment(revision string) *unstructured.Unstructured {
	d := &unstructured.Unstructured{Object: map[string]any{}}
	d.SetGroupVersionKind(MachineDeploymentKind)
	d.SetName("md-0")
	d.SetAnnotations(map[string]string{RevisionAnnotation: revision})
	return d
}

func TestCauseOf(t *testing.T) {
	unhealthy := func(m *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(m.Object, []any{map[string]any{"type": OwnerRemediatedCondition, "status": "False"}}, "status", "conditions")
	}
	for _, tc := range []struct {
		name   string
		m      *unstructured.Unstructured
		set    *unstructured.Unstructured
		active int
		md     *unstructured.Unstructured
		want   Cause
	}{
		{"a health check's remediation, even during a rollout", machine(unhealthy), set("md-0-old", "1", 0), 2, deployment("2"), CauseRemediation},
		{"an admin's remediate-machine", machine(func(m *unstructured.Unstructured) {
			m.SetAnnotations(map[string]string{RemediateMachineAnnotation: ""})
		}), nil, 0, nil, CauseRemediation},
		{"an older MachineSet: a rollout", machine(nil), set("md-0-old", "1", 0), 0, deployment("2"), CauseRollout},
		{"the current MachineSet wants fewer: a scale-down", machine(nil), set("md-0-old", "2", 3), 3, deployment("2"), CauseScaleDown},
		{"the current MachineSet wants it back: a user's delete", machine(nil), set("md-0-old", "2", 3), 2, deployment("2"), CauseDelete},
		{"no MachineSet: a user's delete", machine(func(m *unstructured.Unstructured) { m.SetOwnerReferences(nil) }), nil, 0, nil, CauseDelete},
		{"a MachineSet without a deployment that scales down", machine(nil), set("md-0-old", "", 1), 1, nil, CauseScaleDown},
		{"unreadable revisions are not a rollout", machine(nil), set("md-0-old", "x", 3), 2, deployment("2"), CauseDelete},
		{"a condition that is True is not unhealthy", machine(func(m *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(m.Object, []any{map[string]any{"type": OwnerRemediatedCondition, "status": "True"}}, "status", "conditions")
		}), set("md-0-old", "2", 3), 2, deployment("2"), CauseDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := CauseOf(tc.m, tc.set, tc.active, tc.md)
			require.Equal(t, tc.want, got, why)
			require.NotEmpty(t, why)
		})
	}
}

func TestMachineFields(t *testing.T) {
	m := machine(func(m *unstructured.Unstructured) {
		m.SetLabels(map[string]string{GovernedLabel: "true"})
		m.SetAnnotations(map[string]string{PreDrainHook: HookOwner, PreDrainHookPrefix + "/other": "x"})
		_ = unstructured.SetNestedField(m.Object, "node-1", "status", "nodeRef", "name")
	})
	require.True(t, Governed(m))
	require.True(t, HasHook(m))
	require.Equal(t, "node-1", NodeName(m))
	require.Equal(t, "md-0-old", OwnerMachineSet(m))
	require.False(t, Deleting(m))

	other := machine(func(m *unstructured.Unstructured) {
		m.SetLabels(map[string]string{GovernedLabel: "yes"}) // only "true" governs
		m.SetAnnotations(map[string]string{PreDrainHookPrefix + "/other": "x"})
		m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "MachineSet", Name: "x", Controller: ptr.To(true)}})
	})
	require.False(t, Governed(other))
	require.False(t, HasHook(other), "another tool's pre-drain hook is not lull's")
	require.Empty(t, OwnerMachineSet(other), "a MachineSet of another group is not Cluster API's")
	require.Empty(t, NodeName(other))
}
