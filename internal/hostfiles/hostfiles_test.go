//go:build linux

package hostfiles

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Files are owned by the test's own user and group: chown to them works
// without root.
var (
	myUID = os.Getuid()
	myGID = os.Getgid()
)

func newWriter(t *testing.T) (*Writer, string) {
	t.Helper()
	root := t.TempDir()
	put(t, root, "/etc/hostname", "node-1\n", 0o644)
	return &Writer{Root: root, Writable: []string{"/etc/**"}, Protected: DefaultProtected, Journal: DefaultJournal}, root
}

// write is a file with new content, owned by the test's user.
func write(p, previous, content string, mode int32) lullv1alpha1.ConfigFile {
	return lullv1alpha1.ConfigFile{
		Path: p, Previous: previous, Contents: []byte(content), Mode: &mode,
		User: strconv.Itoa(myUID), Group: strconv.Itoa(myGID),
	}
}

// previousMode0644 is f as its NodeConfig records a file whose mode was
// 0644 before: a table case's file.
func previousMode0644(f lullv1alpha1.ConfigFile) func() lullv1alpha1.ConfigFile {
	return func() lullv1alpha1.ConfigFile {
		f.PreviousMode = ptr(0o644)
		return f
	}
}

func remove(p, previous string) lullv1alpha1.ConfigFile {
	return lullv1alpha1.ConfigFile{Path: p, Previous: previous, Absent: true}
}

func sha(s string) string { return SHA256([]byte(s)) }

// put writes a file on the host as it is before the set.
func put(t *testing.T, root, p, content string, mode fs.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(t, os.WriteFile(full, []byte(content), mode))
	require.NoError(t, os.Chmod(full, mode))
}

// entry is one thing in the host tree.
type entry struct {
	Kind     string
	Mode     fs.FileMode
	UID, GID int
	Content  string
}

// snapshot is everything under root: a set that failed must leave it
// exactly as it was, with no temporary or set-aside file and no
// directory created.
func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		if p == filepath.Join(root, "etc/lull") {
			return filepath.SkipDir // the journal: TestJournal looks at it
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{Mode: fi.Mode(), UID: int(st.Uid), GID: int(st.Gid)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Kind = "symlink"
			e.Content, err = os.Readlink(p)
		case fi.IsDir():
			e.Kind = "dir"
		default:
			e.Kind = "file"
			var b []byte
			b, err = os.ReadFile(p)
			e.Content = string(b)
			if errors.Is(err, fs.ErrPermission) {
				e.Content, err = "(unreadable)", nil
			}
		}
		out[strings.TrimPrefix(p, root)] = e
		return err
	})
	require.NoError(t, err)
	return out
}

func requireFile(t *testing.T, root, p, content string, mode fs.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	b, err := os.ReadFile(full)
	require.NoError(t, err)
	require.Equal(t, content, string(b), p)
	fi, err := os.Lstat(full)
	require.NoError(t, err)
	require.Equal(t, mode, fi.Mode()&modeBits, p)
	st := fi.Sys().(*syscall.Stat_t)
	require.Equal(t, []int{myUID, myGID}, []int{int(st.Uid), int(st.Gid)}, p)
}

func requireAbsent(t *testing.T, root, p string) {
	t.Helper()
	_, err := os.Lstat(filepath.Join(root, p))
	require.ErrorIs(t, err, fs.ErrNotExist, p)
}

// requireNoLeftovers checks that no temporary or set-aside file remains.
func requireNoLeftovers(t *testing.T, root string) {
	t.Helper()
	for p := range snapshot(t, root) {
		require.NotContains(t, p, ".lull-", "left behind")
	}
}

func TestDriftFoundBeforeAnyWrite(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/a.conf", "edited by hand\n", 0o644)
	put(t, root, "/etc/b.conf", "appeared\n", 0o644)
	put(t, root, "/etc/c.conf", "c old\n", 0o644)
	before := snapshot(t, root)
	files := []lullv1alpha1.ConfigFile{
		write("/etc/c.conf", sha("c old\n"), "c new\n", 0o644), // fine, first: still not written
		write("/etc/a.conf", sha("a old\n"), "a new\n", 0o644),
		write("/etc/b.conf", "", "b new\n", 0o644),
		write("/etc/d.conf", sha("d old\n"), "d new\n", 0o644),
		remove("/etc/e.conf", ""), // absent and must be: nothing to do
	}

	for name, run := range map[string]func() error{
		"Check": func() error { return w.Check(files) },
		"Apply": func() error { _, err := w.Apply(files); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := run()
			var drift *DriftError
			require.ErrorAs(t, err, &drift)
			require.Equal(t, []Drift{
				{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("edited by hand\n")},
				{Path: "/etc/b.conf", Want: "absent", Got: sha("appeared\n")},
				{Path: "/etc/d.conf", Want: sha("d old\n"), Got: "absent"},
			}, drift.Drifts)
			msg := err.Error()
			for _, h := range []string{sha("a old\n"), sha("edited by hand\n"), sha("appeared\n"), sha("d old\n")} {
				require.Contains(t, msg, h)
			}
			require.Contains(t, msg, "/etc/b.conf: content differs (expected absent, found sha256 ")
			require.Contains(t, msg, "nothing written")
			require.Equal(t, before, snapshot(t, root))
		})
	}
}

func TestAlreadyWrittenFilesResume(t *testing.T) {
	w, root := newWriter(t)
	// An agent stopped after writing a and removing c: a has its new
	// content, c is gone, b is still old.
	put(t, root, "/etc/a.conf", "a new\n", 0o640)
	put(t, root, "/etc/b.conf", "b old\n", 0o644)
	files := []lullv1alpha1.ConfigFile{
		write("/etc/a.conf", sha("a old\n"), "a new\n", 0o640),
		write("/etc/b.conf", sha("b old\n"), "b new\n", 0o644),
		remove("/etc/c.conf", sha("c old\n")),
	}
	require.NoError(t, w.Check(files))
	res, err := w.Apply(files)
	require.NoError(t, err)
	require.Equal(t, []FileResult{
		{Path: "/etc/a.conf", SHA256: sha("a new\n"), Written: false},
		{Path: "/etc/b.conf", SHA256: sha("b new\n"), Written: true},
		{Path: "/etc/c.conf", Removed: true, Written: false},
	}, res.Files)
	require.Equal(t, "1 file written and verified, 2 already in place: /etc/a.conf (sha256 "+sha("a new\n")[:8]+
		"…, already in place), /etc/b.conf (sha256 "+sha("b new\n")[:8]+"…), /etc/c.conf (already absent)", res.Summary())
	requireFile(t, root, "/etc/a.conf", "a new\n", 0o640)
	requireFile(t, root, "/etc/b.conf", "b new\n", 0o644)
	requireAbsent(t, root, "/etc/c.conf")

	// Applied again, everything is in place.
	res, err = w.Apply(files)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(res.Summary(), "3 files already in place: "), res.Summary())
}

func TestNewFileInMissingDirectories(t *testing.T) {
	w, root := newWriter(t)
	w.Writable = []string{"/etc/containerd/certs.d/**"}
	const p = "/etc/containerd/certs.d/registry.example/hosts.toml"
	res, err := w.Apply([]lullv1alpha1.ConfigFile{write(p, "", "server = \"https://registry.example\"\n", 0o600)})
	require.NoError(t, err)
	require.Equal(t, []FileResult{{Path: p, SHA256: sha("server = \"https://registry.example\"\n"), Written: true}}, res.Files)
	requireFile(t, root, p, "server = \"https://registry.example\"\n", 0o600)
	for _, d := range []string{"/etc/containerd", "/etc/containerd/certs.d", "/etc/containerd/certs.d/registry.example"} {
		fi, err := os.Lstat(filepath.Join(root, d))
		require.NoError(t, err)
		require.Equal(t, fs.ModeDir|0o755, fi.Mode(), d)
	}
	requireNoLeftovers(t, root)
}

func TestSpecialModeBitsKept(t *testing.T) {
	w, root := newWriter(t)
	_, err := w.Apply([]lullv1alpha1.ConfigFile{write("/etc/tool", "", "#!/bin/sh\n", 0o2750)})
	require.NoError(t, err)
	requireFile(t, root, "/etc/tool", "#!/bin/sh\n", fs.ModeSetgid|0o750)
}

func TestDefaultModeIs0644(t *testing.T) {
	w, root := newWriter(t)
	f := write("/etc/a.conf", "", "a\n", 0)
	f.Mode = nil
	_, err := w.Apply([]lullv1alpha1.ConfigFile{f})
	require.NoError(t, err)
	requireFile(t, root, "/etc/a.conf", "a\n", 0o644)
}

func TestRemoval(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/sysctl.d/90-old.conf", "vm.swappiness = 1\n", 0o644)
	res, err := w.Apply([]lullv1alpha1.ConfigFile{remove("/etc/sysctl.d/90-old.conf", sha("vm.swappiness = 1\n"))})
	require.NoError(t, err)
	require.Equal(t, "1 file written and verified: /etc/sysctl.d/90-old.conf (removed)", res.Summary())
	requireAbsent(t, root, "/etc/sysctl.d/90-old.conf")
	requireNoLeftovers(t, root)
}

// A file whose content is still the previous one but whose mode or owner
// someone changed by hand (an admin tightening a key to 0600) has
// drifted: the NodeConfig declares no previous mode or owner, so the file
// must have the ones it gives the file, and nothing is written. So has a
// file that already has the new content with another mode or owner.
func TestModeOrOwnerChangedByHandIsDrift(t *testing.T) {
	other := myUID + 1
	owner := func(uid, gid int) string { return strconv.Itoa(uid) + ":" + strconv.Itoa(gid) }
	for _, tc := range []struct {
		name    string
		content string // of /etc/a.conf on disk
		mode    fs.FileMode
		user    int // the owner the NodeConfig gives /etc/a.conf
		want    Drift
		wantMsg string
	}{{
		name: "mode tightened", content: "a old\n", mode: 0o600, user: myUID,
		want:    Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"), Mode: &Mismatch{Want: "0644", Got: "0600"}},
		wantMsg: "/etc/a.conf: mode differs (expected 0644, found 0600)",
	}, {
		name: "owner changed", content: "a old\n", mode: 0o644, user: other,
		want:    Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"), Owner: &Mismatch{Want: owner(other, myGID), Got: owner(myUID, myGID)}},
		wantMsg: "/etc/a.conf: owner differs (expected " + owner(other, myGID) + ", found " + owner(myUID, myGID) + ")",
	}, {
		name: "mode and owner changed", content: "a old\n", mode: 0o640, user: other,
		want: Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"),
			Mode: &Mismatch{Want: "0644", Got: "0640"}, Owner: &Mismatch{Want: owner(other, myGID), Got: owner(myUID, myGID)}},
		wantMsg: "/etc/a.conf: mode differs (expected 0644, found 0640), owner differs (expected " + owner(other, myGID),
	}, {
		name: "new content, another mode", content: "a new\n", mode: 0o600, user: myUID,
		want:    Drift{Path: "/etc/a.conf", Want: sha("a new\n"), Got: sha("a new\n"), Mode: &Mismatch{Want: "0644", Got: "0600"}},
		wantMsg: "/etc/a.conf: mode differs (expected 0644, found 0600)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newWriter(t)
			put(t, root, "/etc/a.conf", tc.content, tc.mode)
			put(t, root, "/etc/c.conf", "c old\n", 0o644)
			before := snapshot(t, root)
			a := write("/etc/a.conf", sha("a old\n"), "a new\n", 0o644)
			a.User = strconv.Itoa(tc.user)
			files := []lullv1alpha1.ConfigFile{
				write("/etc/c.conf", sha("c old\n"), "c new\n", 0o644), // fine, first: still not written
				a,
			}
			for name, run := range map[string]func() error{
				"Check": func() error { return w.Check(files) },
				"Apply": func() error { _, err := w.Apply(files); return err },
			} {
				err := run()
				var drift *DriftError
				require.ErrorAs(t, err, &drift, name)
				require.Equal(t, []Drift{tc.want}, drift.Drifts, name)
				require.ErrorContains(t, err, tc.wantMsg, name)
				require.ErrorContains(t, err, "nothing written", name)
				require.Equal(t, before, snapshot(t, root), name)
			}
		})
	}
}

// What a NodeConfig declares no mode or owner for is compared by content
// alone: a file to remove, and a file whose mode or owner is all that
// changes.
func TestModeAndOwnerComparedOnlyWhereDeclared(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/gone.conf", "x\n", 0o600)
	put(t, root, "/etc/key", "k\n", 0o640)
	_, err := w.Apply([]lullv1alpha1.ConfigFile{
		remove("/etc/gone.conf", sha("x\n")),
		write("/etc/key", sha("k\n"), "k\n", 0o600),
	})
	require.NoError(t, err)
	requireAbsent(t, root, "/etc/gone.conf")
	requireFile(t, root, "/etc/key", "k\n", 0o600)
}

func TestModeChange(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/secret.conf", "token\n", 0o644)
	files := []lullv1alpha1.ConfigFile{write("/etc/secret.conf", sha("token\n"), "token\n", 0o600)}
	res, err := w.Apply(files)
	require.NoError(t, err)
	require.Equal(t, []FileResult{{Path: "/etc/secret.conf", SHA256: sha("token\n"), Written: true}}, res.Files)
	requireFile(t, root, "/etc/secret.conf", "token\n", 0o600)
	requireNoLeftovers(t, root)
}

func TestRefusals(t *testing.T) {
	forEachResolver(t, testRefusals)
}

func testRefusals(t *testing.T) {
	ok := write("/etc/ok.conf", "", "ok\n", 0o644)
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, w *Writer, root string)
		file     lullv1alpha1.ConfigFile
		wantPath string
		wantRule string
	}{{
		name:     "not in the allowlist",
		file:     write("/usr/local/bin/tool", "", "x", 0o755),
		wantRule: `no writable path matches it (/etc/**)`,
	}, {
		name:     "empty allowlist",
		setup:    func(t *testing.T, w *Writer, root string) { w.Writable = nil },
		file:     write("/etc/x.conf", "", "x", 0o644),
		wantPath: "/etc/ok.conf",
		wantRule: "no path is writable (the allowlist is empty)",
	}, {
		name:     "protected kubelet credentials",
		file:     write("/etc/kubernetes/kubelet.conf", "", "x", 0o600),
		wantRule: `it is protected ("/etc/kubernetes/*.conf")`,
	}, {
		name:     "protected pod volumes",
		setup:    func(t *testing.T, w *Writer, root string) { w.Writable = []string{"/**"} },
		file:     write("/var/lib/kubelet/pods/uid/volumes/kubernetes.io~projected/token/token", "", "x", 0o600),
		wantRule: `it is protected ("/var/lib/kubelet/pods/**")`,
	}, {
		name: "symlinked parent out of the root",
		setup: func(t *testing.T, w *Writer, root string) {
			require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(root, "etc/outside")))
		},
		file:     write("/etc/outside/evil.conf", "", "x", 0o644),
		wantRule: "its parent /etc/outside is a symbolic link",
	}, {
		name: "symlinked parent within the root",
		setup: func(t *testing.T, w *Writer, root string) {
			require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/etc"), 0o755))
			require.NoError(t, os.Symlink("../usr/etc", filepath.Join(root, "etc/inside")))
		},
		file:     write("/etc/inside/sub/x.conf", "", "x", 0o644),
		wantRule: "its parent /etc/inside is a symbolic link (to \"../usr/etc\")",
	}, {
		name: "symlinked file",
		setup: func(t *testing.T, w *Writer, root string) {
			require.NoError(t, os.Symlink("/run/resolv.conf", filepath.Join(root, "etc/resolv.conf")))
		},
		file:     write("/etc/resolv.conf", "", "nameserver 10.0.0.1\n", 0o644),
		wantRule: "it is a symbolic link (to \"/run/resolv.conf\")",
	}, {
		name: "a directory",
		setup: func(t *testing.T, w *Writer, root string) {
			require.NoError(t, os.Mkdir(filepath.Join(root, "etc/d"), 0o755))
		},
		file:     write("/etc/d", "", "x", 0o644),
		wantRule: "it is a directory",
	}, {
		name:     "parent is a file",
		file:     write("/etc/hostname/x", "", "x", 0o644),
		wantRule: "its parent /etc/hostname is not a directory",
	}, {
		name:     "not clean",
		file:     write("/etc/../root/.ssh/authorized_keys", "", "x", 0o600),
		wantRule: "the path is not absolute and clean",
	}, {
		name:     "listed twice",
		file:     ok,
		wantRule: "the path is listed twice",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newWriter(t)
			if tc.setup != nil {
				tc.setup(t, w, root)
			}
			before := snapshot(t, root)
			// A good file first: it is not written either.
			res, err := w.Apply([]lullv1alpha1.ConfigFile{ok, tc.file})
			var refused *RefusedError
			require.ErrorAs(t, err, &refused)
			want := tc.wantPath
			if want == "" {
				want = tc.file.Path
			}
			require.Equal(t, want, refused.Path)
			require.Contains(t, refused.Rule, tc.wantRule)
			require.Contains(t, err.Error(), "nothing written")
			require.Empty(t, res.Files)
			require.Equal(t, before, snapshot(t, root))
		})
	}
}

func TestUnreadableFileIsAnErrorBeforeWriting(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/shadow", "root:*:1::::::\n", 0)
	if _, err := os.ReadFile(filepath.Join(root, "etc/shadow")); err == nil {
		t.Skip("this process may read any file (CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH); lull-agent may not")
	}
	before := snapshot(t, root)
	_, err := w.Apply([]lullv1alpha1.ConfigFile{
		write("/etc/a.conf", "", "a\n", 0o644),
		write("/etc/shadow", sha("root:*:1::::::\n"), "root:!:1::::::\n", 0),
	})
	require.ErrorIs(t, err, fs.ErrPermission)
	require.ErrorContains(t, err, "/etc/shadow")
	require.Equal(t, before, snapshot(t, root))
}

// failingSet is four files, each of another kind: one replaced (content),
// one new in directories that do not exist, one removed, one given
// another mode (content unchanged).
func failingSet(t *testing.T, root string) []lullv1alpha1.ConfigFile {
	put(t, root, "/etc/a.conf", "a old\n", 0o640)
	put(t, root, "/etc/c.conf", "c old\n", 0o644)
	put(t, root, "/etc/d.conf", "d\n", 0o644)
	return []lullv1alpha1.ConfigFile{
		write("/etc/a.conf", sha("a old\n"), "a new\n", 0o640),
		write("/etc/new/sub/b.conf", "", "b new\n", 0o644),
		remove("/etc/c.conf", sha("c old\n")),
		write("/etc/d.conf", sha("d\n"), "d\n", 0o600),
	}
}

func TestFailureMidSetRollsBackEverything(t *testing.T) {
	injected := errors.New("injected")
	for _, tc := range []struct {
		name         string
		before       string // fail just before this path's rename
		after        string // or just after it
		wantPath     string
		wantReadBack bool
	}{
		{name: "before the third rename", before: "/etc/c.conf", wantPath: "/etc/c.conf"},
		{name: "after the second rename", after: "/etc/new/sub/b.conf", wantPath: "/etc/new/sub/b.conf"},
		{name: "after the third rename", after: "/etc/c.conf", wantPath: "/etc/c.conf"},
		{name: "before the first rename", before: "/etc/a.conf", wantPath: "/etc/a.conf"},
		{name: "after the fourth rename", after: "/etc/d.conf", wantPath: "/etc/d.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newWriter(t)
			files := failingSet(t, root)
			before := snapshot(t, root)
			var seen []string
			w.beforeRename = func(p string) error {
				seen = append(seen, p)
				if p == tc.before {
					// The new file is written and synced next to the
					// old one, just not in place.
					if p != "/etc/c.conf" {
						matches, _ := filepath.Glob(filepath.Join(root, filepath.Dir(p), ".*.lull-tmp-*"))
						require.Len(t, matches, 1)
					}
					return injected
				}
				return nil
			}
			w.afterRename = func(p string) error {
				if p == tc.after {
					return injected
				}
				return nil
			}
			res, err := w.Apply(files)
			require.ErrorIs(t, err, injected)
			var werr *WriteError
			require.ErrorAs(t, err, &werr)
			require.Equal(t, tc.wantPath, werr.Path)
			require.True(t, werr.rolledBack(), "rollback: %v", werr.Rollback)
			require.Contains(t, err.Error(), "writing "+tc.wantPath+": injected; rolled back, every file is as it was")
			require.Empty(t, res.Files)
			require.NotEmpty(t, seen)
			// Contents, modes, owners as before; b and its directories
			// gone again; c back; d's mode back; no temporary file left.
			require.Equal(t, before, snapshot(t, root))

			// With the failure gone, the same set goes through.
			w.beforeRename, w.afterRename = nil, nil
			_, err = w.Apply(files)
			require.NoError(t, err)
			requireFile(t, root, "/etc/a.conf", "a new\n", 0o640)
			requireFile(t, root, "/etc/new/sub/b.conf", "b new\n", 0o644)
			requireAbsent(t, root, "/etc/c.conf")
			requireFile(t, root, "/etc/d.conf", "d\n", 0o600)
			requireNoLeftovers(t, root)
		})
	}
}

func TestReadBackMismatchRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tamper  func(t *testing.T, full string)
		wantErr string
	}{{
		name:    "content changed in place",
		tamper:  func(t *testing.T, full string) { require.NoError(t, os.WriteFile(full, []byte("tampered\n"), 0)) },
		wantErr: "read back differs: content sha256 " + sha("tampered\n") + ", want " + sha("b new\n"),
	}, {
		name:    "mode changed",
		tamper:  func(t *testing.T, full string) { require.NoError(t, os.Chmod(full, 0o666)) },
		wantErr: "read back differs: mode -rw-rw-rw-, want -rw-r--r--",
	}, {
		name: "replaced by another file",
		tamper: func(t *testing.T, full string) {
			require.NoError(t, os.WriteFile(full+".other", []byte("b new\n"), 0o644))
			require.NoError(t, os.Rename(full+".other", full))
		},
		wantErr: "read back differs: another file took its place",
	}, {
		name:    "removed",
		tamper:  func(t *testing.T, full string) { require.NoError(t, os.Remove(full)) },
		wantErr: "read back: ",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newWriter(t)
			files := failingSet(t, root)
			before := snapshot(t, root)
			// Something else writes b between its rename and the read-back.
			w.afterRename = func(p string) error {
				if p == "/etc/new/sub/b.conf" {
					tc.tamper(t, filepath.Join(root, p))
				}
				return nil
			}
			_, err := w.Apply(files)
			var werr *WriteError
			require.ErrorAs(t, err, &werr)
			require.Equal(t, "/etc/new/sub/b.conf", werr.Path)
			require.ErrorContains(t, err, tc.wantErr)
			require.True(t, werr.rolledBack(), "rollback: %v", werr.Rollback)
			require.Equal(t, before, snapshot(t, root))
		})
	}
}

func TestRemovalReadBackRollsBack(t *testing.T) {
	w, root := newWriter(t)
	files := failingSet(t, root)
	before := snapshot(t, root)
	// Something puts c back between its removal and the read-back; the
	// rollback restores the original over it.
	w.afterRename = func(p string) error {
		if p == "/etc/c.conf" {
			put(t, root, p, "recreated\n", 0o644)
		}
		return nil
	}
	_, err := w.Apply(files)
	require.ErrorIs(t, err, ErrReadBack)
	require.ErrorContains(t, err, "writing /etc/c.conf: read back differs: the file is still there; rolled back")
	require.Equal(t, before, snapshot(t, root))
}

func TestOwnerChangeFailureRollsBack(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may give files to root")
	}
	w, root := newWriter(t)
	files := failingSet(t, root)
	before := snapshot(t, root)
	// The default owner is root, which this user may not give a file to:
	// a real error, after a was written.
	files[1].User, files[1].Group = "", ""
	_, err := w.Apply(files)
	var werr *WriteError
	require.ErrorAs(t, err, &werr)
	require.Equal(t, "/etc/new/sub/b.conf", werr.Path)
	require.ErrorIs(t, err, fs.ErrPermission)
	require.True(t, werr.rolledBack(), "rollback: %v", werr.Rollback)
	require.Equal(t, before, snapshot(t, root))
}

func TestOwnerNamesFromTheNode(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n# comment\n+nis\nnode-svc:x:"+strconv.Itoa(myUID)+":100::/:/sbin/nologin\n", 0o644)
	put(t, root, "/etc/group", "root:x:0:\nnode-grp:x:"+strconv.Itoa(myGID)+":node-svc\n", 0o644)
	// A system user only in the image's read-only database (Fedora CoreOS).
	put(t, root, "/usr/lib/passwd", "node-svc:x:4242:4242::/:/sbin/nologin\nchrony:x:"+strconv.Itoa(myUID)+":992::/:/sbin/nologin\n", 0o644)
	f := write("/etc/svc.conf", "", "svc\n", 0o640)
	f.User, f.Group = "node-svc", "node-grp"
	g := write("/etc/chrony.keys", "", "1 SHA1 HEX:00\n", 0o640)
	g.User, g.Group = "chrony", "node-grp"
	_, err := w.Apply([]lullv1alpha1.ConfigFile{f, g})
	require.NoError(t, err)
	requireFile(t, root, "/etc/svc.conf", "svc\n", 0o640)
	requireFile(t, root, "/etc/chrony.keys", "1 SHA1 HEX:00\n", 0o640)
}

func TestOwnersAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to other users needs root")
	}
	w, root := newWriter(t)
	put(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nsvc:x:1234:1234::/:/sbin/nologin\n", 0o644)
	put(t, root, "/etc/group", "root:x:0:\nsvc:x:5678:\n", 0o644)
	put(t, root, "/etc/a.conf", "a old\n", 0o644)
	require.NoError(t, os.Chown(filepath.Join(root, "etc/a.conf"), 1234, 5678))
	files := []lullv1alpha1.ConfigFile{
		{Path: "/etc/a.conf", Previous: sha("a old\n"), Contents: []byte("a old\n")}, // back to root:root, content unchanged
		{Path: "/etc/b.conf", Contents: []byte("b\n"), User: "svc", Group: "svc"},
		{Path: "/etc/c.conf", Contents: []byte("c\n"), User: "77", Group: "88"},
	}
	before := snapshot(t, root)
	w.beforeRename = func(p string) error {
		if p == "/etc/c.conf" {
			return errors.New("injected")
		}
		return nil
	}
	_, err := w.Apply(files)
	require.ErrorContains(t, err, "rolled back")
	require.Equal(t, before, snapshot(t, root), "owners restored")

	w.beforeRename = nil
	_, err = w.Apply(files)
	require.NoError(t, err)
	for p, want := range map[string][]int{"etc/a.conf": {0, 0}, "etc/b.conf": {1234, 5678}, "etc/c.conf": {77, 88}} {
		fi, err := os.Lstat(filepath.Join(root, p))
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, want, []int{int(st.Uid), int(st.Gid)}, p)
	}
}

func TestUnknownOwnerBeforeWriting(t *testing.T) {
	for _, tc := range []struct {
		name        string
		user, group string
		wantErr     string
	}{
		{name: "user", user: "nobody-here", group: "0", wantErr: `unknown user "nobody-here": not in the node's /etc/passwd, /usr/lib/passwd, /usr/share/baselayout/passwd`},
		{name: "group", user: "0", group: "wheel", wantErr: `unknown group "wheel"`},
		{name: "no such ID spelling", user: "-1", group: "0", wantErr: `unknown user "-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newWriter(t)
			put(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644)
			put(t, root, "/etc/group", "root:x:0:\n", 0o644)
			before := snapshot(t, root)
			f := write("/etc/b.conf", "", "b\n", 0o644)
			f.User, f.Group = tc.user, tc.group
			files := []lullv1alpha1.ConfigFile{write("/etc/a.conf", "", "a\n", 0o644), f}
			require.ErrorContains(t, w.Check(files), tc.wantErr)
			_, err := w.Apply(files)
			require.ErrorContains(t, err, "/etc/b.conf: "+tc.wantErr)
			require.ErrorContains(t, err, "nothing written")
			require.Equal(t, before, snapshot(t, root))
		})
	}
}

func TestCheckWritesNothing(t *testing.T) {
	w, root := newWriter(t)
	files := failingSet(t, root)
	before := snapshot(t, root)
	require.NoError(t, w.Check(files))
	require.Equal(t, before, snapshot(t, root))
}

func TestFileTheAgentMayNotReopenIsVerified(t *testing.T) {
	w, root := newWriter(t)
	// Mode 0000: without CAP_DAC_OVERRIDE not even its owner may open it
	// again; the read-back goes through the descriptor it was written with.
	res, err := w.Apply([]lullv1alpha1.ConfigFile{write("/etc/gshadow", "", "root:::\n", 0)})
	require.NoError(t, err)
	require.Equal(t, []FileResult{{Path: "/etc/gshadow", SHA256: sha("root:::\n"), Written: true}}, res.Files)
	fi, err := os.Lstat(filepath.Join(root, "etc/gshadow"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0), fi.Mode())
}

// A ConfigFile that changes content and mode or owner at once records the
// previous mode and owner (PreviousMode, PreviousUser, PreviousGroup):
// the file is as planned from when it has the previous content with
// those, and drifted when it has another mode or owner than both.
func TestPreviousModeAndOwnerRecorded(t *testing.T) {
	other := myUID + 1
	for _, tc := range []struct {
		name      string
		content   string // of /etc/a.conf on disk
		mode      fs.FileMode
		uid       int
		file      func() lullv1alpha1.ConfigFile
		root      bool   // needs to give a file to another user
		wantDrift *Drift // nil: written (or already in place)
		wantMode  fs.FileMode
	}{{
		name: "content and mode change at once", content: "a old\n", mode: 0o644,
		file:     previousMode0644(write("/etc/a.conf", sha("a old\n"), "a new\n", 0o600)),
		wantMode: 0o600,
	}, {
		name: "content and mode change, already done (an agent that stopped)", content: "a new\n", mode: 0o600,
		file:     previousMode0644(write("/etc/a.conf", sha("a old\n"), "a new\n", 0o600)),
		wantMode: 0o600,
	}, {
		name: "mode neither the previous nor the new one", content: "a old\n", mode: 0o640,
		file:      previousMode0644(write("/etc/a.conf", sha("a old\n"), "a new\n", 0o600)),
		wantDrift: &Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"), Mode: &Mismatch{Want: "0644", Got: "0640"}},
	}, {
		name: "previous content with the new mode already", content: "a old\n", mode: 0o600,
		file:      previousMode0644(write("/etc/a.conf", sha("a old\n"), "a new\n", 0o600)),
		wantDrift: &Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"), Mode: &Mismatch{Want: "0644", Got: "0600"}},
	}, {
		name: "mode only, recorded: another mode by hand is drift", content: "a old\n", mode: 0o640,
		file:      previousMode0644(write("/etc/a.conf", sha("a old\n"), "a old\n", 0o600)),
		wantDrift: &Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"), Mode: &Mismatch{Want: "0644", Got: "0640"}},
	}, {
		name: "content and owner change at once", content: "a old\n", mode: 0o644, uid: other, root: true,
		file: func() lullv1alpha1.ConfigFile {
			f := write("/etc/a.conf", sha("a old\n"), "a new\n", 0o644)
			f.PreviousUser = strconv.Itoa(other)
			return f
		},
		wantMode: 0o644,
	}, {
		name: "owner neither the previous nor the new one", content: "a old\n", mode: 0o644, uid: other + 1, root: true,
		file: func() lullv1alpha1.ConfigFile {
			f := write("/etc/a.conf", sha("a old\n"), "a new\n", 0o644)
			f.PreviousUser = strconv.Itoa(other)
			return f
		},
		wantDrift: &Drift{Path: "/etc/a.conf", Want: sha("a old\n"), Got: sha("a old\n"),
			Owner: &Mismatch{Want: strconv.Itoa(other) + ":" + strconv.Itoa(myGID), Got: strconv.Itoa(other+1) + ":" + strconv.Itoa(myGID)}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("giving files to other users needs root")
			}
			w, root := newWriter(t)
			put(t, root, "/etc/a.conf", tc.content, tc.mode)
			if tc.uid != 0 {
				require.NoError(t, os.Chown(filepath.Join(root, "etc/a.conf"), tc.uid, myGID))
			}
			before := snapshot(t, root)
			files := []lullv1alpha1.ConfigFile{tc.file()}
			_, err := w.Apply(files)
			if tc.wantDrift != nil {
				var drift *DriftError
				require.ErrorAs(t, err, &drift)
				require.Equal(t, []Drift{*tc.wantDrift}, drift.Drifts)
				require.Equal(t, before, snapshot(t, root))
				return
			}
			require.NoError(t, err)
			requireFile(t, root, "/etc/a.conf", "a new\n", tc.wantMode)
			requireNoLeftovers(t, root)
		})
	}
}

func TestPreviousModeOnlyForAFileThatStays(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/a.conf", "a\n", 0o644)
	gone := remove("/etc/a.conf", sha("a\n"))
	gone.PreviousMode = ptr(0o644)
	added := write("/etc/b.conf", "", "b\n", 0o644)
	added.PreviousUser = "root"
	for _, f := range []lullv1alpha1.ConfigFile{gone, added} {
		_, err := w.Apply([]lullv1alpha1.ConfigFile{f})
		var refused *RefusedError
		require.ErrorAs(t, err, &refused, f.Path)
		require.Contains(t, refused.Rule, "a previous mode or owner is given for a file that does not exist before or is removed")
	}
}

func ptr(m int32) *int32 { return &m }
