package main

import "testing"

func TestWantsVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"--config=/etc/c.yaml", "--version=raw"}, true},
		{[]string{"--version=true"}, true},
		{[]string{"--version=false"}, false},
		{[]string{"--v=2"}, false},
		{[]string{"--", "--version"}, false},
		{nil, false},
	} {
		if got := wantsVersion(tc.args); got != tc.want {
			t.Errorf("wantsVersion(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
