//go:build linux

package hostfiles

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultJournal is where lull-agent keeps the journal of the set it is
// writing, on the host (under /etc, the only part of the host it may
// write): the record of what each file was and will be, and a copy of
// every file it replaces, so that a set interrupted by the agent's death
// is rolled back, or forward, when the agent starts again.
const DefaultJournal = "/etc/lull/agent/journal"

// Journal record names, in the journal directory.
const (
	journalRecord = "set.json"  // the set being written; absent: none
	journalLast   = "last.json" // what became of the last set
)

// Journal states: a record is written "writing" before the first change
// and "verified" once every file was read back; a finished record
// (last.json) says what became of the set.
const (
	JournalWriting       = "writing"
	JournalVerified      = "verified"
	JournalWritten       = "written"        // the agent finished it
	JournalRolledBack    = "rolled back"    // by the agent, after a failure, or by Recover
	JournalRolledForward = "rolled forward" // by Recover: it was verified
)

// JournalRecord is the journal of one set.
type JournalRecord struct {
	ID    string        `json:"id"`
	State string        `json:"state"`
	Files []JournalFile `json:"files"`
	// Dirs are the directories the set creates, outermost first.
	Dirs []string `json:"dirs,omitempty"`
	// Warnings are what a recovery could not clean up (a leftover file,
	// a directory not empty), for a person to look at.
	Warnings []string `json:"warnings,omitempty"`
}

// JournalFile is one file of a set: what it was (Old names its copy in
// the journal directory; New: it did not exist) and what it will be.
type JournalFile struct {
	Path   string `json:"path"`
	Absent bool   `json:"absent,omitempty"` // the set removes it
	New    bool   `json:"new,omitempty"`    // it did not exist before
	Old    string `json:"old,omitempty"`    // its content before, in the journal directory
	// The file before: content hash, mode, owner.
	OldSHA256 string `json:"oldSHA256,omitempty"`
	OldMode   uint32 `json:"oldMode,omitempty"`
	OldUID    int    `json:"oldUID,omitempty"`
	OldGID    int    `json:"oldGID,omitempty"`
	// The file after (not for a removal).
	SHA256 string `json:"sha256,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	UID    int    `json:"uid,omitempty"`
	GID    int    `json:"gid,omitempty"`
	// The names the set uses next to the file: its temporary file, where
	// a removed file is set aside, the temporary file of a restore.
	Tmp        string `json:"tmp,omitempty"`
	Aside      string `json:"aside,omitempty"`
	RestoreTmp string `json:"restoreTmp,omitempty"`
}

// journal is the open journal directory of one Apply.
type journal struct {
	d   *dir
	rec *JournalRecord
}

// openJournal opens the journal directory beneath the root, following
// no link; create: creating what is missing of it (0700: it holds copies
// of the files replaced), else a missing one is fs.ErrNotExist.
func (s *session) openJournal(p string, create bool) (*dir, error) {
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if !path.IsAbs(p) || rel == "" {
		return nil, fmt.Errorf("journal %q is not an absolute path", p)
	}
	cur := s.root
	for _, name := range strings.Split(rel, "/") {
		if create {
			if err := cur.mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("journal: %w", err)
			}
		}
		next, err := cur.sub(name)
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		cur = s.opened.add(next)
	}
	return cur, nil
}

// begin writes the journal of the set before anything is changed: a copy
// of every file replaced or removed, synced, then the record.
func (t *txn) begin() error {
	d, err := t.s.openJournal(t.w.Journal, true)
	if err != nil {
		return err
	}
	var id [8]byte
	rand.Read(id[:])
	rec := &JournalRecord{ID: hex.EncodeToString(id[:]), State: JournalWriting}
	seen := map[string]bool{}
	for i, o := range t.ops {
		if o.done {
			continue
		}
		for _, m := range o.missing {
			if !seen[m] {
				seen[m] = true
				rec.Dirs = append(rec.Dirs, m)
			}
		}
		jf := JournalFile{Path: o.path, Absent: o.absent, New: o.old == nil && !o.absent,
			Tmp: o.tmp, Aside: o.asideName, RestoreTmp: o.restoreTmp}
		if !o.absent {
			jf.SHA256, jf.Mode, jf.UID, jf.GID = o.sha, unixMode(o.mode), o.uid, o.gid
		}
		if o.old != nil {
			jf.Old = "old-" + strconv.Itoa(i)
			jf.OldSHA256, jf.OldMode, jf.OldUID, jf.OldGID = SHA256(o.old.content), unixMode(o.old.mode), o.old.uid, o.old.gid
			if err := writeSynced(d, jf.Old, o.old.content); err != nil {
				return fmt.Errorf("journal: %w", err)
			}
		}
		rec.Files = append(rec.Files, jf)
	}
	t.j = &journal{d: d, rec: rec}
	return t.j.save(journalRecord)
}

// save writes the record as name atomically and durably.
func (j *journal) save(name string) error {
	b, err := json.MarshalIndent(j.rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := sibling(name, "tmp")
	if err := writeSynced(j.d, tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := j.d.rename(tmp, name); err != nil {
		_ = j.d.remove(tmp)
		return fmt.Errorf("journal: %w", err)
	}
	return j.d.sync()
}

// finish records what became of the set (last.json) and deletes its
// journal.
func (j *journal) finish(state string) error {
	j.rec.State = state
	if err := j.save(journalLast); err != nil {
		return err
	}
	var errs []error
	for _, f := range j.rec.Files {
		if f.Old != "" {
			if err := j.d.remove(f.Old); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := j.d.remove(journalRecord); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return j.d.sync()
}

// writeSynced creates name in d (0600: a copy of a secret stays one) with
// content, and syncs it.
func writeSynced(d *dir, name string, content []byte) error {
	f, err := d.openFile(name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func unixMode(m fs.FileMode) uint32 {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		n |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		n |= unix.S_ISVTX
	}
	return n
}

// Recovery is what Recover did with a set an agent left unfinished.
type Recovery struct {
	ID string
	// State is JournalRolledBack or JournalRolledForward.
	State string
	Files []string
	// Warnings are leftovers it could not clean up; the files themselves
	// are all old or all new.
	Warnings []string
}

// Recover finishes a set an agent died in the middle of, from the
// journal: a set that was verified is rolled forward (the set-aside
// copies of removed files and leftover temporary files deleted), any
// other rolled back (every file put back as it was, files the set
// created and directories it made removed). It returns nil, nil when no
// set was left. lull-agent calls it when it starts, before anything else,
// and Apply before every set. An error (a file changed by someone else
// since, a directory swapped for a link) leaves the journal in place:
// nothing more is written until a person has looked.
func (w *Writer) Recover() (*Recovery, error) {
	if w.Journal == "" {
		return nil, nil
	}
	s, err := w.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	return s.recover(w.Journal)
}

func (s *session) recover(journalPath string) (*Recovery, error) {
	d, err := s.openJournal(journalPath, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := d.openFile(journalRecord, unix.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	rec := &JournalRecord{}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("journal %s: %w", d.path(journalRecord), err)
	}
	j := &journal{d: d, rec: rec}
	r := &Recovery{ID: rec.ID}
	for _, jf := range rec.Files {
		r.Files = append(r.Files, jf.Path)
	}
	var errs []error
	if rec.State == JournalVerified {
		r.State = JournalRolledForward
		for _, jf := range rec.Files {
			r.Warnings = append(r.Warnings, s.cleanup(jf, true)...)
		}
	} else {
		r.State = JournalRolledBack
		for i := len(rec.Files) - 1; i >= 0; i-- {
			jf := rec.Files[i]
			if err := s.rollBack(j, jf); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s: %w", jf.Path, err))
				continue
			}
			r.Warnings = append(r.Warnings, s.cleanup(jf, false)...)
		}
		for i := len(rec.Dirs) - 1; i >= 0; i-- {
			r.Warnings = append(r.Warnings, s.removeDir(rec.Dirs[i])...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("recovering the set an agent left unfinished (journal %s, kept): %w", d.path(journalRecord), err)
	}
	rec.Warnings = r.Warnings
	if err := j.finish(r.State); err != nil {
		return r, fmt.Errorf("the set an agent left unfinished is %s, but %w", r.State, err)
	}
	return r, nil
}

// rollBack puts one file back as the journal says it was.
func (s *session) rollBack(j *journal, jf JournalFile) error {
	rel := strings.TrimPrefix(jf.Path, "/")
	name := path.Base(rel)
	p, err := s.root.open(path.Dir(rel))
	if errors.Is(err, fs.ErrNotExist) && jf.New {
		return nil // its directory was never made, or is gone
	}
	if err != nil {
		return err
	}
	defer p.f.Close()
	st, err := p.lstat(name)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if exists && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("it is not a regular file now (%v)", typeOf(st))
	}
	switch {
	case jf.New:
		return rollBackNew(p, name, st, exists, jf)
	case jf.Absent:
		return rollBackAbsent(p, name, exists, jf)
	}
	return rollBackReplaced(j, p, name, st, exists, jf)
}

// rollBackNew removes a file the set made, if it is still the one the set
// wrote.
func rollBackNew(p *dir, name string, st *unix.Stat_t, exists bool, jf JournalFile) error {
	if !exists {
		return nil
	}
	if sum, err := jf.hashOf(p, name, st); err != nil || sum != jf.SHA256 {
		return fmt.Errorf("it exists and is not the file the set wrote (sha256 %s, %v): changed by someone else since", sum, err) //nolint:errorlint // err is nil when only the sum differs: %w would print %!w(<nil>)
	}
	if err := p.remove(name); err != nil {
		return err
	}
	return p.sync()
}

// rollBackAbsent puts back a file the set removed, from its set-aside copy.
func rollBackAbsent(p *dir, name string, exists bool, jf JournalFile) error {
	if _, err := p.lstat(jf.Aside); errors.Is(err, fs.ErrNotExist) {
		if exists {
			return nil // never removed
		}
		return errors.New("neither it nor its set-aside copy exists")
	}
	if exists {
		return fmt.Errorf("it was removed and set aside as %s, and a file was made in its place since", jf.Aside)
	}
	if err := p.rename(jf.Aside, name); err != nil {
		return err
	}
	return p.sync()
}

// rollBackReplaced puts back the content, mode and owner a file the set
// replaced had, from its copy in the journal.
func rollBackReplaced(j *journal, p *dir, name string, st *unix.Stat_t, exists bool, jf JournalFile) error {
	// Replaced: put the copy back unless the file is already as it was.
	if exists {
		sum, err := jf.hashOf(p, name, st)
		if err != nil {
			return err
		}
		if sum == jf.OldSHA256 && st.Mode&0o7777 == jf.OldMode && int(st.Uid) == jf.OldUID && int(st.Gid) == jf.OldGID {
			return nil
		}
		if sum != jf.OldSHA256 && sum != jf.SHA256 {
			return fmt.Errorf("it is neither as it was nor as the set wrote it (sha256 %s): changed by someone else since", sum)
		}
	}
	old, err := j.d.openFile(jf.Old, unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("its copy in the journal: %w", err)
	}
	content, err := io.ReadAll(io.LimitReader(old, maxFileSize+1))
	old.Close()
	if err != nil {
		return fmt.Errorf("its copy in the journal: %w", err)
	}
	if SHA256(content) != jf.OldSHA256 {
		return fmt.Errorf("its copy in the journal, %s, is not the content it had", j.d.path(jf.Old))
	}
	mode := fileMode(&unix.Stat_t{Mode: jf.OldMode})
	_ = p.remove(jf.RestoreTmp) // a restore interrupted before
	f, _, err := replace(p, name, jf.RestoreTmp, content, mode, jf.OldUID, jf.OldGID, nil)
	if f != nil {
		f.Close()
	}
	return err
}

// cleanup deletes what a set may have left next to a file: its temporary
// files and, rolled forward, the set-aside copy of a removed file.
// Nothing left behind is a failure: the warnings say what remains.
func (s *session) cleanup(jf JournalFile, forward bool) []string {
	rel := strings.TrimPrefix(jf.Path, "/")
	p, err := s.root.open(path.Dir(rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return []string{fmt.Sprintf("cleaning up next to %s: %v", jf.Path, err)}
	}
	defer p.f.Close()
	names := []string{jf.Tmp, jf.RestoreTmp}
	if forward && jf.Absent {
		names = append(names, jf.Aside)
	}
	var warnings []string
	for _, n := range names {
		if n == "" {
			continue
		}
		if err := p.remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			warnings = append(warnings, fmt.Sprintf("deleting %s: %v", p.path(n), err))
		}
	}
	if err := p.sync(); err != nil {
		warnings = append(warnings, err.Error())
	}
	return warnings
}

// removeDir removes a directory the set made, if it is still there and
// empty.
func (s *session) removeDir(rel string) []string {
	p, err := s.root.open(path.Dir(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		defer p.f.Close()
		err = p.rmdir(path.Base(rel))
		if err == nil {
			err = p.sync()
		}
	}
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return []string{fmt.Sprintf("removing directory /%s, which the set made: %v", rel, err)}
}

// hashOf is the SHA-256 of the file name in d (st). A file the agent may
// not read (lull-agent has no CAP_DAC_OVERRIDE) with the mode and owner
// the set gave it is taken to be the one the set wrote: a mode such as
// 0000 is one the set gave it.
func (jf JournalFile) hashOf(d *dir, name string, st *unix.Stat_t) (string, error) {
	f, err := d.openFile(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrPermission) && !jf.Absent && st.Mode&0o7777 == jf.Mode && int(st.Uid) == jf.UID && int(st.Gid) == jf.GID {
		return jf.SHA256, nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return "", err
	}
	return SHA256(b), nil
}

// LastJournal reads what became of the last set (last.json); nil when
// there is none.
func (w *Writer) LastJournal() (*JournalRecord, error) {
	s, err := w.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	d, err := s.openJournal(w.Journal, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := d.openFile(journalLast, unix.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rec := &JournalRecord{}
	if err := json.NewDecoder(f).Decode(rec); err != nil {
		return nil, fmt.Errorf("journal %s: %w", d.path(journalLast), err)
	}
	return rec, nil
}
