package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChangesSummaryAndWhat(t *testing.T) {
	c := &Changes{Files: []string{"/a", "/b"}, Units: []string{"x.service"}, SSHKeys: []string{"core", "ops"}, KernelArguments: []string{"quiet"}, OSImage: "img"}
	require.Equal(t, "2 files, 1 unit, 2 users' SSH keys, 1 kernel argument, the OS image", c.Summary())
	require.Equal(t, "no change", (*Changes)(nil).Summary())
	require.Equal(t, "class a", What([]string{"a"}, nil))
	require.Equal(t, "classes a, b and changes (1 user's SSH keys)", What([]string{"a", "b"}, &Changes{SSHKeys: []string{"core"}}))
	require.Equal(t, "", What(nil, &Changes{}))
}

func TestUnitOfFile(t *testing.T) {
	for path, want := range map[string]string{
		"/etc/systemd/system/chronyd.service":                "chronyd.service",
		"/etc/systemd/system/chronyd.service.d/10-lull.conf": "chronyd.service",
		"/etc/systemd/system/chronyd.service.d/a/b.conf":     "",
		"/etc/systemd/system/multi-user.target.wants/x":      "",
		"/etc/systemd/system/":                               "",
		"/etc/chrony.conf":                                   "",
		"/etc/systemd/system/.d/x.conf":                      "",
	} {
		got, ok := UnitOfFile(path)
		require.Equal(t, want, got, path)
		require.Equal(t, want != "", ok, path)
	}
}
