package gate

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Every field of spec.gates has exactly one health gate, and that gate
// alone says a window setting only that field is configured: a gate kind
// half-added (a field without a gate, so a window whose only gate is the
// new one would pass with a zero verdict) fails here.
func TestEveryGatesFieldHasOneHealthGate(t *testing.T) {
	require.Empty(t, checkHealthGates(reflect.TypeFor[lullv1alpha1.Gates](), HealthGates))

	t.Run("a gate kind half-added is caught", func(t *testing.T) {
		type gatesWithMaintenanceMode struct {
			lullv1alpha1.Gates
			MaintenanceMode *bool `json:"maintenanceMode,omitempty"`
		}
		errs := checkHealthGates(reflect.TypeFor[gatesWithMaintenanceMode](), HealthGates)
		require.Contains(t, fmt.Sprint(errs), `spec.gates field "maintenanceMode" has no health gate`)
		errs = checkHealthGates(reflect.TypeFor[lullv1alpha1.Gates](), append(HealthGates[:2:2], HealthGates[0]))
		require.Contains(t, fmt.Sprint(errs), `"alerts" has 2 health gates`)
	})
}

// checkHealthGates compares the fields of a spec.gates type with the
// registered gates: one gate per field, and a window that sets only that
// field is configured for that gate alone.
func checkHealthGates(gates reflect.Type, registered []HealthGate) []error {
	var errs []error
	fields := jsonFields(gates)
	for _, f := range fields {
		n := 0
		for _, g := range registered {
			if g.Field() == f {
				n++
			}
		}
		switch {
		case n == 0:
			errs = append(errs, fmt.Errorf("spec.gates field %q has no health gate in internal/gate's HealthGates", f))
		case n > 1:
			errs = append(errs, fmt.Errorf("spec.gates field %q has %d health gates", f, n))
		}
	}
	for _, g := range registered {
		found := false
		for _, f := range fields {
			found = found || f == g.Field()
		}
		if !found {
			errs = append(errs, fmt.Errorf("health gate %q has no field in spec.gates", g.Field()))
		}
	}
	if gates != reflect.TypeFor[lullv1alpha1.Gates]() {
		return errs // a type the windows cannot carry: the fields alone
	}
	for _, f := range fields {
		w := &lullv1alpha1.MaintenanceWindow{Spec: lullv1alpha1.MaintenanceWindowSpec{Gates: onlyField(f)}}
		for _, g := range registered {
			if got := g.Configured(w); got != (g.Field() == f) {
				errs = append(errs, fmt.Errorf("a window setting only %s: gate %s says configured=%v", f, g.Field(), got))
			}
		}
		if !hasGates([]*lullv1alpha1.MaintenanceWindow{w}) {
			errs = append(errs, fmt.Errorf("a window setting only %s has no gate (hasGates)", f))
		}
	}
	return errs
}

// jsonFields are a struct's fields as their JSON names them, embedded
// structs' fields included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		out = append(out, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	return out
}

// onlyField is a Gates with the field named f set (to a non-zero value)
// and no other.
func onlyField(f string) *lullv1alpha1.Gates {
	g := &lullv1alpha1.Gates{}
	v := reflect.ValueOf(g).Elem()
	for i := range v.NumField() {
		if strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0] != f {
			continue
		}
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Pointer:
			fv.Set(reflect.New(fv.Type().Elem()))
		case reflect.Slice:
			fv.Set(reflect.MakeSlice(fv.Type(), 1, 1))
		default:
			panic("onlyField: a field of kind " + fv.Kind().String())
		}
	}
	return g
}

// Views says what each gate a window sets says of it, in HealthGates'
// order; a gate judged node by node says so.
func TestViews(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 2}, Spec: lullv1alpha1.MaintenanceWindowSpec{Gates: &lullv1alpha1.Gates{
		Alerts: &lullv1alpha1.AlertsGate{URL: "http://prom:9090"}, BlockingPods: []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "db"}}},
		Recovery: &lullv1alpha1.RecoveryGate{}}}}
	got := Views(w, now)
	require.Len(t, got, 3)
	require.Equal(t, View{Gate: "alerts", Holds: true, Reason: ReasonAlertsUnknown, Message: "window wave's alerts gate: http://prom:9090 has not been asked yet"}, got[0])
	require.Equal(t, View{Gate: "blockingPods", PerNode: true, Message: "a node does not start while pods matching app=db run on it"}, got[1])
	require.Equal(t, View{Gate: "recovery", Holds: true, Reason: ReasonUnknown, Message: "lull-drainer has not judged it yet"}, got[2])
	require.Empty(t, Views(&lullv1alpha1.MaintenanceWindow{}, now))

	// A window's only gate, whichever it is, holds a node it has not
	// judged: never the zero verdict.
	for _, g := range HealthGates {
		only := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: lullv1alpha1.MaintenanceWindowSpec{Gates: onlyField(g.Field())}}
		if g.Field() == "blockingPods" {
			only.Spec.Gates.BlockingPods[0] = metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
		}
		v, err := CheckHealth(context.Background(), HealthSource{Reader: fake.NewClientBuilder().WithScheme(lullscheme.New()).Build(), Pods: podsOf()}, []*lullv1alpha1.MaintenanceWindow{only}, "n1", now)
		require.NoError(t, err, g.Field())
		require.NotEmpty(t, v.Reason, "%s alone gave the zero verdict", g.Field())
	}
}
