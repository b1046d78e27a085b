package hostfiles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"syscall"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// DefaultProtected are paths no NodeConfig should write whatever an
// allowlist says: the kubelet's credentials and kubeconfigs, the cluster's
// PKI, and the volumes of the node's pods (their ServiceAccount tokens and
// secrets, lull-agent's own among them).
var DefaultProtected = []string{
	"/etc/kubernetes/*.conf",
	"/etc/kubernetes/pki/**",
	"/var/lib/kubelet/kubeconfig",
	"/var/lib/kubelet/pki/**",
	"/var/lib/kubelet/pods/**",
}

// maxFileSize bounds a file already on disk that a set replaces or
// removes: its old content is kept in memory for the rollback.
const maxFileSize = 16 << 20

// Writer writes sets of files under a host root. It takes one set at a
// time: lull-agent writes under the node's lease, and nothing else is
// meant to write the same paths meanwhile (the read-back catches one
// that does).
type Writer struct {
	// Root is where the host's root file system is mounted ("/host");
	// every path is taken relative to it and never leaves it.
	Root string
	// Writable are the globs (Match) a path must match to be written; none
	// refuses every path.
	Writable []string
	// Protected are globs never written even when Writable matches
	// (DefaultProtected, lull's own files).
	Protected []string

	// Test hooks, given the file's path (ConfigFile.Path) just before its
	// rename into place (or aside, for a removal) and just after it; an
	// error fails the set there.
	beforeRename, afterRename func(path string) error
}

// op is one file of a set: what it should be, what it was, and what has
// been done to it.
type op struct {
	path     string // absolute, as given
	rel      string // relative to the root
	absent   bool
	contents []byte
	sha      string
	mode     fs.FileMode
	uid, gid int

	found   fs.FileInfo // Lstat of the file; nil when it does not exist
	missing []string    // parent directories to create (relative), outermost first
	old     *fileState  // the file before; nil when it did not exist
	done    bool        // already in place: nothing to do

	// While writing.
	written *os.File // the new file, kept open for the read-back
	aside   string   // where a removed file was renamed to (relative)
}

// fileState is a file's content and attributes.
type fileState struct {
	content  []byte
	mode     fs.FileMode
	uid, gid int
}

// modeBits are the bits ConfigFile.Mode sets.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Check runs every check Apply runs before writing, and writes nothing:
// it returns a *RefusedError for a file the Writer will not write, an
// error for an owner it cannot resolve or a file it cannot read, and a
// *DriftError listing every file that drifted. Files already in place
// pass.
func (w *Writer) Check(files []lullv1alpha1.ConfigFile) error {
	root, err := os.OpenRoot(w.Root)
	if err != nil {
		return fmt.Errorf("opening host root: %w", err)
	}
	defer root.Close()
	_, err = w.plan(root, files)
	return err
}

// Apply writes the set, all or nothing. It runs Check's checks first and
// writes nothing when they fail. Then it writes each file atomically,
// reads every file back, and on any failure puts back every file it
// changed and returns a *WriteError. The Result lists every file, written
// or already in place. A non-nil error with a non-empty Result means the
// set is written and verified but a removed file's set-aside copy could
// not be deleted.
func (w *Writer) Apply(files []lullv1alpha1.ConfigFile) (Result, error) {
	root, err := os.OpenRoot(w.Root)
	if err != nil {
		return Result{}, fmt.Errorf("opening host root: %w", err)
	}
	defer root.Close()
	ops, err := w.plan(root, files)
	if err != nil {
		return Result{}, err
	}
	t := &txn{w: w, root: root, ops: ops, made: map[string]bool{}}
	defer t.close()
	p, err := t.apply()
	if err == nil {
		p, err = t.verify()
	}
	if err != nil {
		return Result{}, &WriteError{Path: p, Err: err, Rollback: t.rollback()}
	}
	res := Result{Files: make([]FileResult, len(ops))}
	for i, o := range ops {
		res.Files[i] = FileResult{Path: o.path, SHA256: o.sha, Removed: o.absent, Written: !o.done}
	}
	if err := t.finish(); err != nil {
		return res, fmt.Errorf("files written and verified, but %w", err)
	}
	return res, nil
}

// plan validates the set and reads what is on disk; it writes nothing.
func (w *Writer) plan(root *os.Root, files []lullv1alpha1.ConfigFile) ([]*op, error) {
	ops := make([]*op, 0, len(files))
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		o, err := newOp(f)
		if err != nil {
			return nil, err
		}
		if seen[o.path] {
			return nil, &RefusedError{Path: o.path, Rule: "the path is listed twice"}
		}
		seen[o.path] = true
		if err := w.allowed(o.path); err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	for _, o := range ops {
		if err := inspect(root, o); err != nil {
			return nil, err
		}
	}
	ids := &owners{root: root}
	for i, o := range ops {
		if o.absent {
			continue
		}
		var err error
		if o.uid, err = ids.uid(files[i].User); err != nil {
			return nil, fmt.Errorf("%s: %w; nothing written", o.path, err)
		}
		if o.gid, err = ids.gid(files[i].Group); err != nil {
			return nil, fmt.Errorf("%s: %w; nothing written", o.path, err)
		}
	}
	var drifts []Drift
	for i, o := range ops {
		d, err := o.compare(root, files[i].Previous)
		if err != nil {
			return nil, fmt.Errorf("%s: %w; nothing written", o.path, err)
		}
		if d != nil {
			drifts = append(drifts, *d)
		}
	}
	if len(drifts) > 0 {
		return nil, &DriftError{Drifts: drifts}
	}
	return ops, nil
}

func newOp(f lullv1alpha1.ConfigFile) (*op, error) {
	refuse := func(rule string) (*op, error) { return nil, &RefusedError{Path: f.Path, Rule: rule} }
	p := f.Path
	if !strings.HasPrefix(p, "/") || p == "/" || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return refuse("the path is not absolute and clean")
	}
	if f.Previous != "" && !hexSHA256.MatchString(f.Previous) {
		return refuse(fmt.Sprintf("previous %q is not a lowercase hex SHA-256", f.Previous))
	}
	if f.Absent && len(f.Contents) > 0 {
		return refuse("a file to remove has contents")
	}
	mode := fs.FileMode(0o644)
	if f.Mode != nil {
		m := *f.Mode
		if m < 0 || m > 0o7777 {
			return refuse(fmt.Sprintf("mode %#o is not permission bits", m))
		}
		mode = fs.FileMode(m) & fs.ModePerm
		if m&0o4000 != 0 {
			mode |= fs.ModeSetuid
		}
		if m&0o2000 != 0 {
			mode |= fs.ModeSetgid
		}
		if m&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
	}
	o := &op{path: p, rel: p[1:], absent: f.Absent, mode: mode}
	if !f.Absent {
		o.contents = f.Contents
		o.sha = SHA256(f.Contents)
	}
	return o, nil
}

// allowed refuses a path outside Writable or inside Protected.
func (w *Writer) allowed(p string) error {
	for _, g := range w.Protected {
		if Match(g, p) {
			return &RefusedError{Path: p, Rule: fmt.Sprintf("it is protected (%q)", g)}
		}
	}
	for _, g := range w.Writable {
		if Match(g, p) {
			return nil
		}
	}
	if len(w.Writable) == 0 {
		return &RefusedError{Path: p, Rule: "no path is writable (the allowlist is empty)"}
	}
	return &RefusedError{Path: p, Rule: fmt.Sprintf("no writable path matches it (%s)", strings.Join(w.Writable, ", "))}
}

// inspect refuses a path that reaches through a symbolic link or a
// non-directory, or names something other than a regular file, and notes
// which parent directories are missing and whether the file exists.
func inspect(root *os.Root, o *op) error {
	parts := strings.Split(o.rel, "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		fi, err := root.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			for j := i; j < len(parts); j++ {
				o.missing = append(o.missing, strings.Join(parts[:j], "/"))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w; nothing written", o.path, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return &RefusedError{Path: o.path, Rule: fmt.Sprintf("its parent /%s is a symbolic link%s; lull writes only through real directories", dir, linkTarget(root, dir))}
		case !fi.IsDir():
			return &RefusedError{Path: o.path, Rule: fmt.Sprintf("its parent /%s is not a directory", dir)}
		}
	}
	fi, err := root.Lstat(o.rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w; nothing written", o.path, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &RefusedError{Path: o.path, Rule: fmt.Sprintf("it is a symbolic link%s; lull replaces only regular files", linkTarget(root, o.rel))}
	case fi.IsDir():
		return &RefusedError{Path: o.path, Rule: "it is a directory"}
	case !fi.Mode().IsRegular():
		return &RefusedError{Path: o.path, Rule: fmt.Sprintf("it is not a regular file (%v)", fi.Mode().Type())}
	}
	o.found = fi
	return nil
}

func linkTarget(root *os.Root, rel string) string {
	t, err := root.Readlink(rel)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (to %q)", t)
}

// compare reads the file as it is and decides: drift (returned), already
// in place (o.done), or to be written (its old state kept in o.old).
//
// A file is as the configuration was planned from when it has the
// previous content and the mode and owner the configuration gives it: a
// ConfigFile declares no previous mode or owner, so a content change is
// taken to keep them, and a file whose mode or owner was changed by hand
// since has drifted like one whose content was. Two kinds of file are
// compared by content alone: a file to remove (no mode or owner is
// declared for it), and a file whose content stays (previous is its new
// content): its mode and owner are what the configuration changes.
func (o *op) compare(root *os.Root, previous string) (*Drift, error) {
	want := previous
	if want == "" {
		want = absent
	}
	if o.found == nil {
		if o.absent {
			o.done = true
			return nil, nil
		}
		if previous == "" {
			return nil, nil
		}
		return &Drift{Path: o.path, Want: want, Got: absent}, nil
	}
	st, err := readState(root, o.rel, o.found)
	if err != nil {
		return nil, err
	}
	got := SHA256(st.content)
	mode, owner := o.attrs(st)
	switch {
	case !o.absent && got == o.sha && mode == nil && owner == nil:
		o.done = true
		return nil, nil
	case got == previous && (o.absent || previous == o.sha || (mode == nil && owner == nil)):
		o.old = st
		return nil, nil
	case got == previous || !o.absent && got == o.sha:
		// The previous or the new content, with another mode or owner.
		return &Drift{Path: o.path, Want: got, Got: got, Mode: mode, Owner: owner}, nil
	default:
		return &Drift{Path: o.path, Want: want, Got: got}, nil
	}
}

// attrs compares the file's mode and owner with those it is given: nil
// where they agree.
func (o *op) attrs(st *fileState) (mode, owner *Mismatch) {
	if o.absent {
		return nil, nil
	}
	if st.mode != o.mode {
		mode = &Mismatch{Want: octal(o.mode), Got: octal(st.mode)}
	}
	if st.uid != o.uid || st.gid != o.gid {
		owner = &Mismatch{Want: fmt.Sprintf("%d:%d", o.uid, o.gid), Got: fmt.Sprintf("%d:%d", st.uid, st.gid)}
	}
	return mode, owner
}

// octal spells a mode as chmod takes it: "0644", "2750".
func octal(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}

// readState reads a regular file and its mode and owner, making sure it
// is still the file found by Lstat.
func readState(root *os.Root, rel string, found fs.FileInfo) (*fileState, error) {
	// O_NONBLOCK: should a FIFO take the file's place, opening it must
	// not hang; the identity check below then refuses it.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%w (lull-agent reads as root without CAP_DAC_OVERRIDE)", err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !os.SameFile(fi, found) {
		return nil, errors.New("the file was replaced while being checked")
	}
	content, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(content) > maxFileSize {
		return nil, fmt.Errorf("larger than %d MiB, too large to keep for a rollback", maxFileSize>>20)
	}
	uid, gid := owner(fi)
	return &fileState{content: content, mode: fi.Mode() & modeBits, uid: uid, gid: gid}, nil
}

func owner(fi fs.FileInfo) (uid, gid int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
