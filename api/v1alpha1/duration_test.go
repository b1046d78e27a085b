package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDurationDecodesEveryValue(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		invalid string
		out     string
	}{
		{`"1h30m"`, 90 * time.Minute, "", `"1h30m0s"`},
		{`"0"`, 0, "", `"0s"`},
		{`"soon"`, 0, `"soon"`, `"soon"`},
		{`"four hours"`, 0, `"four hours"`, `"four hours"`},
		{`""`, 0, `""`, `""`},
		{`1800`, 0, `1800`, `1800`},
		{`"9999999999h"`, 0, `"9999999999h"`, `"9999999999h"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var w struct {
				D *Duration `json:"d"`
			}
			require.NoError(t, json.Unmarshal([]byte(`{"d":`+tc.in+`}`), &w))
			assert.Equal(t, tc.want, w.D.Duration)
			assert.Equal(t, tc.invalid, w.D.Invalid)
			assert.Equal(t, tc.invalid != "", w.D.Err() != nil)
			out, err := json.Marshal(w)
			require.NoError(t, err)
			assert.Equal(t, `{"d":`+tc.out+`}`, string(out))
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&w)
			require.NoError(t, err)
			var back struct {
				D *Duration `json:"d"`
			}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u, &back))
			assert.Equal(t, w.D, back.D)
		})
	}
	assert.EqualError(t, (&Duration{Invalid: `"soon"`}).Err(), `"soon" is not a Go duration; write one such as 30m or 1h30m`)
}

// A window the API server stores with an unreadable duration decodes, so
// the typed informer that lists it keeps working.
func TestWindowWithUnreadableDurationDecodes(t *testing.T) {
	var w MaintenanceWindow
	require.NoError(t, json.Unmarshal([]byte(`{"spec":{"minTimeRemaining":"soon","schedule":{"startTime":"02:00","duration":"four hours"}}}`), &w))
	assert.Equal(t, `"soon"`, w.Spec.MinTimeRemaining.Invalid)
	assert.Equal(t, `"four hours"`, w.Spec.Schedule.Duration.Invalid)
}

// DurationFormat is the format in the CRDs, and it accepts exactly what
// time.ParseDuration does for values of up to 20 characters.
func TestDurationFormatMatchesCRDs(t *testing.T) {
	crd, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crds", "lull.dev_maintenancewindows.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(crd), strings.ReplaceAll(DurationFormat, `'`, `''`))
	re := regexp.MustCompile(DurationFormat)
	for _, s := range []string{"0", "30m", "1h30m", "1.5h", ".5s", "1h1m1s1ms1us1ns", "1µs", "-5m", "+5m", "744h", "999999h999999h"} {
		_, err := time.ParseDuration(s)
		assert.NoError(t, err, s)
		assert.True(t, re.MatchString(s) && len(s) <= 20, s)
	}
	for _, s := range []string{"soon", "four hours", "", "5", "1d", "h", ".s", "1 h", "1h 30m", "9999999h"} {
		assert.False(t, re.MatchString(s), s)
	}
}
