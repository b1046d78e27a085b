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
)

// txn is one Apply's writing: what it changed, so that it can put it back.
type txn struct {
	w    *Writer
	root *os.Root
	ops  []*op
	// made and dirs are the directories created (in order); changed the
	// files renamed into place or aside, in order.
	made    map[string]bool
	dirs    []string
	changed []*op
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
		if err := t.mkdir(d); err != nil {
			return err
		}
	}
	before := func() error {
		if t.w.beforeRename == nil {
			return nil
		}
		return t.w.beforeRename(o.path)
	}
	if o.absent {
		aside := sibling(o.rel, "old")
		if err := before(); err != nil {
			return err
		}
		if err := t.root.Rename(o.rel, aside); err != nil {
			return fmt.Errorf("renaming aside: %w", err)
		}
		o.aside = aside
		t.changed = append(t.changed, o)
		return syncDir(t.root, path.Dir(o.rel))
	}
	f, renamed, err := replace(t.root, o.rel, o.contents, o.mode, o.uid, o.gid, before)
	if renamed {
		t.changed = append(t.changed, o)
	}
	o.written = f
	return err
}

// mkdir creates a missing parent directory, 0755 and owned by the agent
// (root); one that appeared meanwhile is used if it is a real directory,
// and not removed by a rollback.
func (t *txn) mkdir(d string) error {
	if t.made[d] {
		return nil
	}
	if err := t.root.Mkdir(d, 0o755); err != nil {
		if fi, lerr := t.root.Lstat(d); errors.Is(err, fs.ErrExist) && lerr == nil && fi.IsDir() {
			return nil
		}
		return fmt.Errorf("creating directory /%s: %w", d, err)
	}
	t.made[d] = true
	t.dirs = append(t.dirs, d)
	// Mkdir's mode is masked by the umask.
	if err := t.root.Chmod(d, 0o755); err != nil {
		return fmt.Errorf("creating directory /%s: %w", d, err)
	}
	return syncDir(t.root, path.Dir(d))
}

// verify reads back every file written: the path must still name the
// file written, with the content, mode and owner intended; a file removed
// must be gone.
func (t *txn) verify() (string, error) {
	for _, o := range t.ops {
		if o.done {
			continue
		}
		if err := o.verify(t.root); err != nil {
			return o.path, err
		}
	}
	return "", nil
}

func (o *op) verify(root *os.Root) error {
	fi, err := root.Lstat(o.rel)
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
	ofi, err := o.written.Stat()
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if !os.SameFile(fi, ofi) {
		return fmt.Errorf("%w: another file took its place", ErrReadBack)
	}
	content, err := io.ReadAll(io.NewSectionReader(o.written, 0, maxFileSize))
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if got := SHA256(content); got != o.sha {
		return fmt.Errorf("%w: content sha256 %s, want %s", ErrReadBack, got, o.sha)
	}
	if got := fi.Mode() & modeBits; got != o.mode {
		return fmt.Errorf("%w: mode %v, want %v", ErrReadBack, got, o.mode)
	}
	if uid, gid := owner(fi); uid != o.uid || gid != o.gid {
		return fmt.Errorf("%w: owner %d:%d, want %d:%d", ErrReadBack, uid, gid, o.uid, o.gid)
	}
	return nil
}

// rollback puts back every file changed, newest first, then removes the
// directories created; it carries on past errors and returns them all.
func (t *txn) rollback() error {
	var errs []error
	for i := len(t.changed) - 1; i >= 0; i-- {
		o := t.changed[i]
		var err error
		switch {
		case o.absent:
			err = t.root.Rename(o.aside, o.rel)
			if err == nil {
				o.aside = ""
			}
		case o.old == nil:
			err = t.root.Remove(o.rel)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		default:
			var f *os.File
			f, _, err = replace(t.root, o.rel, o.old.content, o.old.mode, o.old.uid, o.old.gid, nil)
			if f != nil {
				f.Close()
			}
		}
		if err == nil {
			err = syncDir(t.root, path.Dir(o.rel))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", o.path, err))
		}
	}
	for i := len(t.dirs) - 1; i >= 0; i-- {
		d := t.dirs[i]
		err := t.root.Remove(d)
		if err == nil {
			err = syncDir(t.root, path.Dir(d))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing directory /%s: %w", d, err))
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
		err := t.root.Remove(o.aside)
		if err == nil {
			err = syncDir(t.root, path.Dir(o.aside))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting /%s, the old copy of %s: %w", o.aside, o.path, err))
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

// replace writes content to a temporary file next to rel, gives it its
// owner and mode, syncs it, calls before, renames it over rel and syncs
// the directory. It returns the new file, still open, when everything
// succeeded, and whether the rename happened (rel changed) either way.
func replace(root *os.Root, rel string, content []byte, mode fs.FileMode, uid, gid int, before func() error) (_ *os.File, renamed bool, err error) {
	tmp := sibling(rel, "tmp")
	f, err := root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("creating temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			if !renamed {
				_ = root.Remove(tmp) // best effort: the write already failed, and that error is returned
			}
		}
	}()
	if _, err := f.Write(content); err != nil {
		return nil, false, fmt.Errorf("writing /%s: %w", tmp, err)
	}
	// Owner before mode: a chown clears the setuid and setgid bits.
	if err := f.Chown(uid, gid); err != nil {
		return nil, false, fmt.Errorf("owner of /%s: %w", tmp, err)
	}
	if err := f.Chmod(mode); err != nil {
		return nil, false, fmt.Errorf("mode of /%s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return nil, false, fmt.Errorf("syncing /%s: %w", tmp, err)
	}
	if before != nil {
		if err := before(); err != nil {
			return nil, false, err
		}
	}
	if err := root.Rename(tmp, rel); err != nil {
		return nil, false, fmt.Errorf("renaming /%s into place: %w", tmp, err)
	}
	if err := syncDir(root, path.Dir(rel)); err != nil {
		return nil, true, err
	}
	return f, true, nil
}

// sibling is a new hidden name next to rel: ".<base>.lull-<what>-<random>".
func sibling(rel, what string) string {
	dir, base := path.Split(rel)
	// Room for the suffix within NAME_MAX (255).
	if len(base) > 200 {
		base = base[:200]
	}
	var b [6]byte
	rand.Read(b[:])
	return dir + "." + base + ".lull-" + what + "-" + hex.EncodeToString(b[:])
}

// syncDir makes the directory's entries (a rename, a new or removed file)
// durable.
func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory /%s: %w", dir, err)
	}
	return nil
}
