//go:build linux

package hostfiles

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Issue 41, finding 1: whoever may rename an entry on a file's path (a
// service user owning /etc/app, a DaemonSet with a hostPath of
// /etc/cni/net.d) swaps a checked parent directory for a symbolic link
// to a protected directory while the set is being written. lull-agent
// must not follow it: the set fails, or lands in the real directory;
// nothing appears in, or changes under, the link's target.
func TestParentSwappedForSymlinkMidWrite(t *testing.T) {
	forEachResolver(t, testParentSwappedForSymlinkMidWrite)
}

func testParentSwappedForSymlinkMidWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		// when: "check" (after the checks, before anything is written),
		// "before rename", "after rename" (before the read-back).
		when   string
		target string // the link, relative to /etc
		real   bool   // a directory moved in its place, not a link
	}{
		{name: "after the checks, to a protected sibling", when: "check", target: "kubernetes"},
		{name: "after the checks, through an absolute link", when: "check", target: "/etc/kubernetes"},
		{name: "just before the rename", when: "before rename", target: "kubernetes"},
		{name: "after the last rename, before the read-back", when: "after rename", target: "kubernetes"},
		{name: "for another real directory", when: "before rename", target: "kubernetes", real: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newWriter(t)
			w.Writable = []string{"/etc/app/**"}
			put(t, root, "/etc/app/app.conf", "app old\n", 0o644)
			put(t, root, "/etc/app/gone.conf", "gone\n", 0o644)
			put(t, root, "/etc/kubernetes/kubelet.conf", "credentials\n", 0o600)
			put(t, root, "/etc/kubernetes/app.conf", "not yours\n", 0o600)
			put(t, root, "/etc/kubernetes/gone.conf", "keep me\n", 0o600)
			target := snapshot(t, filepath.Join(root, "etc/kubernetes"))
			targetDir := "etc/kubernetes"
			if tc.real {
				targetDir = "etc/app" // where the protected directory was moved to
			}
			files := []lullv1alpha1.ConfigFile{
				write("/etc/app/app.conf", sha("app old\n"), "app new\n", 0o644),
				write("/etc/app/added.conf", "", "added\n", 0o644),
				remove("/etc/app/gone.conf", sha("gone\n")),
			}
			swapped := false
			swap := func() {
				if swapped {
					return
				}
				swapped = true
				require.NoError(t, os.Rename(filepath.Join(root, "etc/app"), filepath.Join(root, "etc/app.real")))
				if tc.real {
					require.NoError(t, os.Mkdir(filepath.Join(root, "etc/kubernetes.real"), 0o755))
					require.NoError(t, os.Rename(filepath.Join(root, "etc/kubernetes"), filepath.Join(root, "etc/app")))
					require.NoError(t, os.Rename(filepath.Join(root, "etc/kubernetes.real"), filepath.Join(root, "etc/kubernetes")))
					return
				}
				require.NoError(t, os.Symlink(tc.target, filepath.Join(root, "etc/app")))
			}
			switch tc.when {
			case "check":
				w.afterCheck = func() error { swap(); return nil }
			case "before rename":
				w.beforeRename = func(string) error { swap(); return nil }
			case "after rename":
				w.afterRename = func(p string) error {
					if p == "/etc/app/gone.conf" { // the last: the read-back is next
						swap()
					}
					return nil
				}
			}
			// On the real host, an absolute link names the host's /, not
			// the test's: make it resolve the same way, to the test's
			// tree, had the writer followed it.
			if filepath.IsAbs(tc.target) {
				tc.target = filepath.Join(root, tc.target)
			}

			res, err := w.Apply(files)
			require.True(t, swapped, "the hook ran")
			require.Equal(t, target, snapshot(t, filepath.Join(root, targetDir)),
				"nothing written, renamed or removed under the link's target")
			if err == nil {
				// Landed in the real directory.
				require.Len(t, res.Files, 3)
				requireFile(t, root, "/etc/app.real/app.conf", "app new\n", 0o644)
				requireFile(t, root, "/etc/app.real/added.conf", "added\n", 0o644)
				requireAbsent(t, root, "/etc/app.real/gone.conf")
				return
			}
			t.Logf("refused: %v", err)
			require.ErrorIs(t, err, ErrMoved)
			var werr *WriteError
			require.ErrorAs(t, err, &werr)
			require.True(t, werr.rolledBack(), "rollback: %v", werr.Rollback)
			requireFile(t, root, "/etc/app.real/app.conf", "app old\n", 0o644)
			requireFile(t, root, "/etc/app.real/gone.conf", "gone\n", 0o644)
			requireAbsent(t, root, "/etc/app.real/added.conf")
			requireNoLeftovers(t, root)
		})
	}
}

// forEachResolver runs a test with openat2 and with its fallback, one
// openat with O_NOFOLLOW per name, as on a kernel without openat2.
func forEachResolver(t *testing.T, run func(t *testing.T)) {
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "openat per name"
		}
		t.Run(name, func(t *testing.T) {
			saved := openat2Unsupported.Load()
			openat2Unsupported.Store(fallback)
			t.Cleanup(func() { openat2Unsupported.Store(saved) })
			run(t)
		})
	}
}
