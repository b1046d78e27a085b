package integration

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The API server accepts RFC 3339 with a lower-case t and z as a date-time,
// but Go (metav1.Time) cannot read it: stored, such an object would stop
// the drainer's typed informer. Admission refuses it; the upper-case form
// passes.
func TestTimestampAdmission(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name, kind, path, value string
		ok                      bool
	}{
		{"override until lower case", "MaintenanceWindow", "spec.override.until", "2026-11-25t18:00:00z", false},
		{"exclusion start lower case", "MaintenanceWindow", "spec.schedule.exclude.start", "2026-11-25t18:00:00z", false},
		{"deadline lower case", "NodeMaintenance", "spec.deadline", "2026-11-25t18:00:00z", false},
		{"deadline with offset", "NodeMaintenance", "spec.deadline", "2026-11-25T18:00:00.5+01:00", true},
		{"override until upper case", "MaintenanceWindow", "spec.override.until", "2026-11-25T18:00:00Z", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "lull.dev/v1alpha1", "kind": tc.kind,
				"metadata": map[string]any{"name": "ts-node"}}}
			switch tc.path {
			case "spec.override.until":
				u.Object["spec"] = map[string]any{"strategy": "Restrictive", "schedule": map[string]any{"rrule": "FREQ=DAILY", "startTime": "02:00", "duration": "1h"},
					"override": map[string]any{"strategy": "Permissive", "until": tc.value}}
			case "spec.schedule.exclude.start":
				u.Object["spec"] = map[string]any{"strategy": "Restrictive", "schedule": map[string]any{"rrule": "FREQ=DAILY", "startTime": "02:00", "duration": "1h",
					"exclude": []any{map[string]any{"start": tc.value, "end": "2026-11-26T00:00:00Z"}}}}
			case "spec.deadline":
				u.Object["spec"] = map[string]any{"nodeName": "ts-node", "classes": []any{"kernel-update"}, "deadline": tc.value}
			}
			err := cp.Client.Create(ctx, u)
			if tc.ok {
				require.NoError(t, err)
				_ = cp.Client.Delete(ctx, u)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "should match")
		})
	}
}
