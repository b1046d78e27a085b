//go:build linux

package hostfiles

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// errDied stands for the agent's death: a failpoint panics with it, out
// of Apply, so that nothing of Apply's own rollback runs.
var errDied = errors.New("the agent died here")

// diesAfter is an afterRename hook: the agent dies right after it renamed
// path into place.
func diesAfter(path string) func(string) error {
	return func(p string) error {
		if p == path {
			panic(errDied)
		}
		return nil
	}
}

// applyUntilDeath runs Apply and reports whether it died at a failpoint.
func applyUntilDeath(t *testing.T, w *Writer, files []lullv1alpha1.ConfigFile) (died bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			require.Equal(t, errDied, r)
			died = true
		}
	}()
	_, err := w.Apply(files)
	require.NoError(t, err)
	return false
}

func journalPath(root string, name string) string {
	return filepath.Join(root, DefaultJournal, name)
}

// Issue 41, finding 2: the agent dies between two renames. When it starts
// again, Recover puts every file back as it was, and the journal says
// so; the same set then goes through.
func TestDeathBetweenRenamesRolledBackAtStart(t *testing.T) {
	for _, at := range []string{"/etc/a.conf", "/etc/new/sub/b.conf", "/etc/c.conf"} {
		t.Run("after "+at, func(t *testing.T) {
			w, root := newWriter(t)
			files := failingSet(t, root)
			before := snapshot(t, root)
			w.afterRename = diesAfter(at)
			require.True(t, applyUntilDeath(t, w, files))
			require.NotEqual(t, before, snapshot(t, root), "half written")
			require.FileExists(t, journalPath(root, journalRecord))

			// The agent starts again.
			again := &Writer{Root: root, Journal: DefaultJournal}
			rec, err := again.Recover()
			require.NoError(t, err)
			require.Equal(t, JournalRolledBack, rec.State)
			require.Equal(t, []string{"/etc/a.conf", "/etc/new/sub/b.conf", "/etc/c.conf", "/etc/d.conf"}, rec.Files)
			require.Empty(t, rec.Warnings)
			// All old: contents, modes, owners; b and its directories
			// gone; c back; no temporary or set-aside file.
			require.Equal(t, before, snapshot(t, root))
			last, err := again.LastJournal()
			require.NoError(t, err)
			require.Equal(t, JournalRolledBack, last.State)
			require.Equal(t, rec.ID, last.ID)
			require.NoFileExists(t, journalPath(root, journalRecord))
			entries, err := os.ReadDir(filepath.Join(root, DefaultJournal))
			require.NoError(t, err)
			require.Len(t, entries, 1, "only last.json: the copies of the old files are deleted")

			// Nothing left to recover; the set goes through.
			rec, err = again.Recover()
			require.NoError(t, err)
			require.Nil(t, rec)
			w.afterRename = nil
			_, err = w.Apply(files)
			require.NoError(t, err)
			requireAllNew(t, root)
			last, err = w.LastJournal()
			require.NoError(t, err)
			require.Equal(t, JournalWritten, last.State)
		})
	}
}

// Dead once the set was read back and the journal says so: Recover rolls
// it forward (deletes what was set aside), every file new.
func TestDeathAfterVerifyRolledForwardAtStart(t *testing.T) {
	w, root := newWriter(t)
	files := failingSet(t, root)
	w.afterVerify = func() error { panic(errDied) }
	require.True(t, applyUntilDeath(t, w, files))
	matches, _ := filepath.Glob(filepath.Join(root, "etc/.c.conf.lull-old-*"))
	require.Len(t, matches, 1, "the removed file, set aside")

	rec, err := (&Writer{Root: root, Journal: DefaultJournal}).Recover()
	require.NoError(t, err)
	require.Equal(t, JournalRolledForward, rec.State)
	requireAllNew(t, root)
	requireNoLeftovers(t, root)
	last, err := w.LastJournal()
	require.NoError(t, err)
	require.Equal(t, JournalRolledForward, last.State)
}

// Apply finishes an unfinished set before it writes another, and says so.
func TestApplyRecoversFirst(t *testing.T) {
	w, root := newWriter(t)
	files := failingSet(t, root)
	w.afterRename = diesAfter("/etc/new/sub/b.conf")
	require.True(t, applyUntilDeath(t, w, files))
	w.afterRename = nil
	require.NoError(t, w.Check(files), "a is new, c still there: as planned or as it will be")
	res, err := w.Apply(files)
	require.NoError(t, err)
	require.Contains(t, res.Summary(), "; warning: an earlier set the agent left unfinished (/etc/a.conf, /etc/new/sub/b.conf, /etc/c.conf, /etc/d.conf) was rolled back first")
	requireAllNew(t, root)
}

// A file someone else changed after the agent died is not overwritten:
// Recover fails, keeps the journal, and no set is written meanwhile.
func TestRecoverLeavesAFileChangedSince(t *testing.T) {
	w, root := newWriter(t)
	files := failingSet(t, root)
	w.afterRename = diesAfter("/etc/new/sub/b.conf")
	require.True(t, applyUntilDeath(t, w, files))
	put(t, root, "/etc/a.conf", "someone else's\n", 0o640)

	_, err := (&Writer{Root: root, Journal: DefaultJournal}).Recover()
	require.ErrorContains(t, err, "restoring /etc/a.conf: it is neither as it was nor as the set wrote it")
	require.ErrorContains(t, err, "kept")
	require.FileExists(t, journalPath(root, journalRecord))
	requireFile(t, root, "/etc/a.conf", "someone else's\n", 0o640)

	w.afterRename = nil
	_, err = w.Apply(files)
	require.ErrorContains(t, err, "nothing written")
}

func requireAllNew(t *testing.T, root string) {
	t.Helper()
	requireFile(t, root, "/etc/a.conf", "a new\n", 0o640)
	requireFile(t, root, "/etc/new/sub/b.conf", "b new\n", 0o644)
	requireAbsent(t, root, "/etc/c.conf")
	requireFile(t, root, "/etc/d.conf", "d\n", 0o600)
	requireNoLeftovers(t, root)
}

// Once the set is written and verified, failing to clean up (here: the
// removed file's set-aside copy cannot be deleted) is a warning, not a
// failed set.
func TestCleanupErrorAfterVerifyIsAWarning(t *testing.T) {
	w, root := newWriter(t)
	files := failingSet(t, root)
	w.afterVerify = func() error {
		matches, _ := filepath.Glob(filepath.Join(root, "etc/.c.conf.lull-old-*"))
		require.Len(t, matches, 1)
		// Something takes the copy's name: a directory, not empty.
		require.NoError(t, os.Remove(matches[0]))
		require.NoError(t, os.MkdirAll(filepath.Join(matches[0], "x"), 0o755))
		return nil
	}
	res, err := w.Apply(files)
	require.NoError(t, err)
	require.Len(t, res.Warnings, 1)
	require.Contains(t, res.Warnings[0], "deleting /etc/.c.conf.lull-old-")
	require.Contains(t, res.Summary(), "4 files written and verified: ")
	require.Contains(t, res.Summary(), "; warning: deleting /etc/.c.conf.lull-old-")
	requireFile(t, root, "/etc/a.conf", "a new\n", 0o640)
	requireAbsent(t, root, "/etc/c.conf")
	last, err := w.LastJournal()
	require.NoError(t, err)
	require.Equal(t, JournalWritten, last.State)
}

// Without a journal on the host, Recover has nothing to do and creates
// nothing.
func TestRecoverWithoutJournal(t *testing.T) {
	_, root := newWriter(t)
	rec, err := (&Writer{Root: root, Journal: DefaultJournal}).Recover()
	require.NoError(t, err)
	require.Nil(t, rec)
	require.NoDirExists(t, filepath.Join(root, "etc/lull"))
}

// lull-agent cannot read back by path a file it gave mode 0000 (it has no
// CAP_DAC_OVERRIDE). Recover takes such a file, with the mode and owner
// the set gave it, for the set's own, and removes it.
func TestRecoverFileTheAgentMayNotRead(t *testing.T) {
	w, root := newWriter(t)
	put(t, root, "/etc/a.conf", "a old\n", 0o644)
	files := []lullv1alpha1.ConfigFile{
		write("/etc/gshadow", "", "root:::\n", 0),
		write("/etc/a.conf", sha("a old\n"), "a new\n", 0o644),
	}
	before := snapshot(t, root)
	w.afterRename = func(p string) error {
		if p == "/etc/gshadow" {
			if _, err := os.ReadFile(filepath.Join(root, "etc/gshadow")); err == nil {
				t.Skip("this process may read any file (CAP_DAC_OVERRIDE); lull-agent may not")
			}
			panic(errDied)
		}
		return nil
	}
	require.True(t, applyUntilDeath(t, w, files))
	rec, err := (&Writer{Root: root, Journal: DefaultJournal}).Recover()
	require.NoError(t, err)
	require.Equal(t, JournalRolledBack, rec.State)
	require.Equal(t, before, snapshot(t, root))
}
