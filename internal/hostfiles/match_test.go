package hostfiles

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"/etc/**", "/etc/a", true},
		{"/etc/**", "/etc/a/b", true},
		{"/etc/**", "/etcetera/a", false},
		{"/etc/**", "/etc", false},
		{"/etc/containerd/certs.d/*", "/etc/containerd/certs.d/x", true},
		{"/etc/containerd/certs.d/*", "/etc/containerd/certs.d/x/hosts.toml", false},
		{"/etc/containerd/certs.d/**", "/etc/containerd/certs.d/x/hosts.toml", true},
		{"/etc/*.conf", "/etc/chrony.conf", true},
		{"/etc/*.conf", "/etc/sub/chrony.conf", false},
		{"/etc/sysctl.d/9?-*.conf", "/etc/sysctl.d/90-lull.conf", true},
		{"/etc/sysctl.d/9?-*.conf", "/etc/sysctl.d/9/-x.conf", false},
		{"/etc/**/hosts.toml", "/etc/hosts.toml", true},
		{"/etc/**/hosts.toml", "/etc/a/b/hosts.toml", true},
		{"/etc/chrony.conf", "/etc/chrony.conf", true},
		{"/etc/chrony.conf", "/etc/chrony.conf.d", false},
		{"/**", "/anything/at/all", true},
	} {
		require.Equal(t, tc.want, Match(tc.pattern, tc.path), "%s ~ %s", tc.pattern, tc.path)
	}
}

func TestSHA256(t *testing.T) {
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", SHA256(nil))
}

func TestSummary(t *testing.T) {
	h := SHA256([]byte("x"))
	for _, tc := range []struct {
		name string
		res  Result
		want string
	}{
		{name: "none", want: "no files"},
		{
			name: "written",
			res: Result{Files: []FileResult{
				{Path: "/etc/a", SHA256: h, Written: true},
				{Path: "/etc/b", Removed: true, Written: true},
				{Path: "/etc/c", SHA256: h, Written: true},
			}},
			want: "3 files written and verified: /etc/a (sha256 2d711642…), /etc/b (removed), /etc/c (sha256 2d711642…)",
		},
		{
			name: "in place",
			res:  Result{Files: []FileResult{{Path: "/etc/a", SHA256: h}}},
			want: "1 file already in place: /etc/a (sha256 2d711642…, already in place)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.res.Summary())
		})
	}
}

func TestSummaryCapped(t *testing.T) {
	var res Result
	for i := range 100 {
		res.Files = append(res.Files, FileResult{Path: "/etc/containerd/certs.d/registry-" + strings.Repeat("x", i%7) + "/hosts.toml", SHA256: SHA256([]byte{byte(i)}), Written: true})
	}
	s := res.Summary()
	require.LessOrEqual(t, len(s), maxSummary)
	require.True(t, strings.HasPrefix(s, "100 files written and verified: /etc/containerd/certs.d/registry-/hosts.toml (sha256 "), s)
	require.Regexp(t, `\), /etc/\S+ \(sha256 [0-9a-f]{8}…\) … and \d+ more$`, s)

	// One path longer than the cap is cut short, still listed.
	long := Result{Files: []FileResult{
		{Path: "/etc/" + strings.Repeat("é", 600), SHA256: SHA256(nil), Written: true},
		{Path: "/etc/b", SHA256: SHA256(nil), Written: true},
	}}
	s = long.Summary()
	require.LessOrEqual(t, len(s), maxSummary)
	require.True(t, strings.HasPrefix(s, "2 files written and verified: /etc/éé"), s)
	require.True(t, strings.HasSuffix(s, "é… … and 1 more"), s)
	require.True(t, strings.ToValidUTF8(s, "?") == s, "cut on a rune boundary")
}
