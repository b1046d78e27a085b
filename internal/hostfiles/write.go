//go:build linux

package hostfiles

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// txn is one Apply's writing: what it changed, so that it can put it back.
type txn struct {
	w   *Writer
	s   *session
	ops []*op
	// made are the directories created or found created meanwhile, by
	// path; dirs those created, in order; changed the files renamed into
	// place or aside, in order.
	made    map[string]*dir
	dirs    []madeDir
	changed []*op
	// j is the set's journal; nil without one.
	j *journal
}

// madeDir is a directory the set created: name in parent.
type madeDir struct {
	parent *dir
	name   string
}

// apply writes every file not in place yet; on error it returns the path
// that failed.
func (t *txn) apply() (string, error) {
	for _, o := range t.ops {
		if o.done {
			continue
		}
		if err := t.apply1(o); err != nil {
			return o.path, err
		}
		if t.w.afterRename != nil {
			if err := t.w.afterRename(o.path); err != nil {
				return o.path, err
			}
		}
	}
	return "", nil
}

func (t *txn) apply1(o *op) error {
	for _, d := range o.missing {
		nd, err := t.mkdir(o.dir, d)
		if err != nil {
			return err
		}
		o.dir = nd
	}
	o.missing = nil
	// Just before the rename, the directory's path must still name the
	// directory held: had it been swapped for a link, the file would
	// still go where it was checked, not where the link points, but the
	// path the configuration names would not get it.
	before := func() error {
		if t.w.beforeRename != nil {
			if err := t.w.beforeRename(o.path); err != nil {
				return err
			}
		}
		return t.s.root.recheck(o.dir)
	}
	if o.absent {
		aside := o.asideName
		if err := before(); err != nil {
			return err
		}
		if err := o.dir.rename(o.name, aside); err != nil {
			return fmt.Errorf("renaming aside: %w", err)
		}
		o.aside = aside
		t.changed = append(t.changed, o)
		return o.dir.sync()
	}
	f, renamed, err := replace(o.dir, o.name, o.tmp, o.contents, o.mode, o.uid, o.gid, before)
	if renamed {
		t.changed = append(t.changed, o)
	}
	o.written = f
	return err
}

// mkdir creates the missing directory rel in parent, 0755 and owned by
// the agent (root), and opens it; one that appeared meanwhile is used if
// it is a real directory, and not removed by a rollback.
func (t *txn) mkdir(parent *dir, rel string) (*dir, error) {
	if d, ok := t.made[rel]; ok {
		return d, nil
	}
	name := path.Base(rel)
	if err := parent.mkdir(name, 0o755); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating directory /%s: %w", rel, err)
		}
		d, err := parent.sub(name)
		if err != nil {
			return nil, fmt.Errorf("creating directory /%s: %w", rel, err)
		}
		t.made[rel] = t.s.opened.add(d)
		return d, nil
	}
	t.dirs = append(t.dirs, madeDir{parent: parent, name: name})
	d, err := parent.sub(name)
	if err != nil {
		return nil, fmt.Errorf("creating directory /%s: %w", rel, err)
	}
	t.made[rel] = t.s.opened.add(d)
	// Mkdir's mode is masked by the umask.
	if err := d.f.Chmod(0o755); err != nil {
		return nil, fmt.Errorf("creating directory /%s: %w", rel, err)
	}
	return d, parent.sync()
}

// verify reads back every file written: the path must still name the
// file written, through the directories checked, with the content, mode
// and owner intended; a file removed must be gone.
func (t *txn) verify() (string, error) {
	for _, o := range t.ops {
		if o.done {
			continue
		}
		if err := t.s.root.recheck(o.dir); err != nil {
			return o.path, fmt.Errorf("read back: %w", err)
		}
		if err := o.verify(); err != nil {
			return o.path, err
		}
	}
	return "", nil
}

func (o *op) verify() error {
	st, err := o.dir.lstat(o.name)
	if o.absent {
		switch {
		case err == nil:
			return fmt.Errorf("%w: the file is still there", ErrReadBack)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("read back: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	// The descriptor the file was written with: the path is checked to
	// still name it, and it reads whatever mode the file has now.
	ost, err := fstat(o.written)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if !sameFile(st, ost) {
		return fmt.Errorf("%w: another file took its place", ErrReadBack)
	}
	content, err := io.ReadAll(io.NewSectionReader(o.written, 0, maxFileSize))
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if got := SHA256(content); got != o.sha {
		return fmt.Errorf("%w: content sha256 %s, want %s", ErrReadBack, got, o.sha)
	}
	if got := fileMode(st); got != o.mode {
		return fmt.Errorf("%w: mode %v, want %v", ErrReadBack, got, o.mode)
	}
	if uid, gid := int(st.Uid), int(st.Gid); uid != o.uid || gid != o.gid {
		return fmt.Errorf("%w: owner %d:%d, want %d:%d", ErrReadBack, uid, gid, o.uid, o.gid)
	}
	return nil
}

// rollback puts back every file changed, newest first, then removes the
// directories created; it carries on past errors and returns them all.
// It works in the directories held, wherever their paths lead now: what
// was changed there is put back there.
func (t *txn) rollback() error {
	var errs []error
	for i := len(t.changed) - 1; i >= 0; i-- {
		o := t.changed[i]
		var err error
		switch {
		case o.absent:
			err = o.dir.rename(o.aside, o.name)
			if err == nil {
				o.aside = ""
			}
		case o.old == nil:
			err = o.dir.remove(o.name)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		default:
			var f *os.File
			f, _, err = replace(o.dir, o.name, o.restoreTmp, o.old.content, o.old.mode, o.old.uid, o.old.gid, nil)
			if f != nil {
				f.Close()
			}
		}
		if err == nil {
			err = o.dir.sync()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", o.path, err))
		}
	}
	for i := len(t.dirs) - 1; i >= 0; i-- {
		d := t.dirs[i]
		err := d.parent.rmdir(d.name)
		if err == nil {
			err = d.parent.sync()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing directory %s: %w", d.parent.path(d.name), err))
		}
	}
	return errors.Join(errs...)
}

// finish deletes the set-aside copies of the files removed, once the set
// is in place.
func (t *txn) finish() error {
	var errs []error
	for _, o := range t.changed {
		if o.aside == "" {
			continue
		}
		err := o.dir.remove(o.aside)
		if err == nil {
			err = o.dir.sync()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %s, the old copy of %s: %w", o.dir.path(o.aside), o.path, err))
		}
	}
	return errors.Join(errs...)
}

func (t *txn) close() {
	for _, o := range t.ops {
		if o.written != nil {
			o.written.Close()
			o.written = nil
		}
	}
}

// replace writes content to the temporary file tmp next to name in d,
// gives it its owner and mode, syncs it, calls before, renames it over
// name and syncs the directory. It returns the new file, still open, when
// everything succeeded, and whether the rename happened (name changed)
// either way.
func replace(d *dir, name, tmp string, content []byte, mode fs.FileMode, uid, gid int, before func() error) (_ *os.File, renamed bool, err error) {
	f, err := d.openFile(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("creating temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			if !renamed {
				_ = d.remove(tmp) // best effort: the write already failed, and that error is returned
			}
		}
	}()
	if _, err := f.Write(content); err != nil {
		return nil, false, fmt.Errorf("writing %s: %w", d.path(tmp), err)
	}
	// Owner before mode: a chown clears the setuid and setgid bits.
	if err := f.Chown(uid, gid); err != nil {
		return nil, false, fmt.Errorf("owner of %s: %w", d.path(tmp), err)
	}
	if err := f.Chmod(mode); err != nil {
		return nil, false, fmt.Errorf("mode of %s: %w", d.path(tmp), err)
	}
	if err := f.Sync(); err != nil {
		return nil, false, fmt.Errorf("syncing %s: %w", d.path(tmp), err)
	}
	if before != nil {
		if err := before(); err != nil {
			return nil, false, err
		}
	}
	if err := d.rename(tmp, name); err != nil {
		return nil, false, fmt.Errorf("renaming %s into place: %w", d.path(tmp), err)
	}
	if err := d.sync(); err != nil {
		return nil, true, err
	}
	return f, true, nil
}

// sibling is a new hidden name next to name: ".<name>.lull-<what>-<random>".
func sibling(name, what string) string {
	// Room for the suffix within NAME_MAX (255).
	if len(name) > 200 {
		name = name[:200]
	}
	var b [6]byte
	rand.Read(b[:])
	return "." + name + ".lull-" + what + "-" + hex.EncodeToString(b[:])
}
