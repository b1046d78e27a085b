//go:build linux

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

	"golang.org/x/sys/unix"

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
	// lull-agent's journal (DefaultJournal).
	"/etc/lull/agent/**",
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
	// every path is taken relative to it and never leaves it: each
	// directory on it is opened by descriptor without following a
	// symbolic link, and the file is written, renamed and read back
	// relative to its directory's descriptor.
	Root string
	// Writable are the globs (Match) a path must match to be written; none
	// refuses every path.
	Writable []string
	// Protected are globs never written even when Writable matches
	// (DefaultProtected, lull's own files).
	Protected []string
	// Journal is the directory (an absolute path on the host, such as
	// DefaultJournal) where Apply records each set before changing
	// anything, so that Recover can finish a set the agent died in the
	// middle of; empty: no journal, and a set interrupted by a crash is
	// left half-written until it is applied again.
	Journal string

	// Test hooks, given the file's path (ConfigFile.Path) just before its
	// rename into place (or aside, for a removal: before the directory is
	// checked again) and just after it; an error fails the set there.
	beforeRename, afterRename func(path string) error
	// afterCheck runs once the checks passed, before anything is written;
	// afterVerify once every file was read back and the journal says so.
	afterCheck, afterVerify func() error
}

// op is one file of a set: what it should be, what it was, and what has
// been done to it.
type op struct {
	path     string // absolute, as given
	rel      string // relative to the root
	name     string // the last element of rel
	absent   bool
	contents []byte
	sha      string
	mode     fs.FileMode
	uid, gid int
	// The mode and owner the file has before (ConfigFile.PreviousMode,
	// PreviousUser, PreviousGroup); nil: the new ones.
	prevMode         *fs.FileMode
	prevUID, prevGID *int

	// dir is the file's directory, held since the check; while missing
	// directories are still to be created, the deepest that exists.
	dir     *dir
	found   *unix.Stat_t // the file, not followed; nil when it does not exist
	missing []string     // parent directories to create (relative), outermost first
	old     *fileState   // the file before; nil when it did not exist
	done    bool         // already in place: nothing to do

	// While writing.
	written *os.File // the new file, kept open for the read-back
	aside   string   // the name a removed file was renamed to, in dir, once it was

	// Names next to the file, chosen before the journal records them: the
	// temporary file, where a removed file is set aside, the temporary
	// file of a rollback.
	tmp, asideName, restoreTmp string
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
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.close()
	_, err = w.plan(s, files)
	return err
}

// session is the host root as one Check or Apply sees it: held by
// descriptor for writing, and as an os.Root for reading the user and
// group databases; and the directories opened beneath it.
type session struct {
	root   *dir
	ids    *os.Root
	opened dirs
}

func (w *Writer) open() (*session, error) {
	root, err := openRoot(w.Root)
	if err != nil {
		return nil, fmt.Errorf("opening host root: %w", err)
	}
	ids, err := os.OpenRoot(w.Root)
	if err != nil {
		root.f.Close()
		return nil, fmt.Errorf("opening host root: %w", err)
	}
	s := &session{root: root, ids: ids}
	s.opened.add(root)
	return s, nil
}

func (s *session) close() {
	s.opened.close()
	s.ids.Close()
}

// Apply writes the set, all or nothing. It runs Check's checks first and
// writes nothing when they fail. Then it writes each file atomically,
// reads every file back, and on any failure puts back every file it
// changed and returns a *WriteError. The Result lists every file, written
// or already in place, and warnings: what could not be cleaned up once
// the set was written and verified (a removed file's set-aside copy, the
// journal), which does not fail the set.
func (w *Writer) Apply(files []lullv1alpha1.ConfigFile) (Result, error) {
	s, err := w.open()
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	var recovered *Recovery
	if w.Journal != "" {
		// A set an agent died in the middle of is finished first.
		if recovered, err = s.recover(w.Journal); err != nil {
			return Result{}, fmt.Errorf("%w; nothing written", err)
		}
	}
	ops, err := w.plan(s, files)
	if err != nil {
		return Result{}, err
	}
	if w.afterCheck != nil {
		if err := w.afterCheck(); err != nil {
			return Result{}, err
		}
	}
	t := &txn{w: w, s: s, ops: ops, made: map[string]*dir{}}
	defer t.close()
	p, err := t.write()
	if err != nil {
		werr := &WriteError{Path: p, Err: err, Rollback: t.rollback()}
		if werr.Rollback == nil && t.j != nil {
			// Put back: the journal is done with. Should this fail, the
			// next Recover finds every file as it was.
			_ = t.j.finish(JournalRolledBack)
		}
		return Result{}, werr
	}
	res := Result{Files: make([]FileResult, len(ops))}
	for i, o := range ops {
		res.Files[i] = FileResult{Path: o.path, SHA256: o.sha, Removed: o.absent, Written: !o.done}
	}
	if recovered != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("an earlier set the agent left unfinished (%s) was %s first", strings.Join(recovered.Files, ", "), recovered.State))
		res.Warnings = append(res.Warnings, recovered.Warnings...)
	}
	// The set is written and verified: what is left is cleaning up, and
	// a failure there is a warning, not a failed set.
	if err := t.finish(); err != nil {
		res.Warnings = append(res.Warnings, err.Error())
	}
	if t.j != nil {
		if err := t.j.finish(JournalWritten); err != nil {
			res.Warnings = append(res.Warnings, err.Error())
		}
	}
	return res, nil
}

// write journals the set (when the Writer has a journal), writes it,
// reads it back and records it verified; p is the file a failure was at.
// It puts nothing back: Apply rolls back on its error.
func (t *txn) write() (p string, err error) {
	if t.w.Journal != "" {
		err = t.begin()
	}
	if err == nil {
		p, err = t.apply()
	}
	if err == nil {
		p, err = t.verify()
	}
	if err == nil && t.j != nil {
		t.j.rec.State = JournalVerified
		if err = t.j.save(journalRecord); err == nil && t.w.afterVerify != nil {
			err = t.w.afterVerify()
		}
	}
	return p, err
}

// plan validates the set and reads what is on disk; it writes nothing.
func (w *Writer) plan(s *session, files []lullv1alpha1.ConfigFile) ([]*op, error) {
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
		if err := s.inspect(o); err != nil {
			return nil, err
		}
	}
	ids := &owners{root: s.ids}
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
		if u := files[i].PreviousUser; u != "" {
			id, err := ids.uid(u)
			if err != nil {
				return nil, fmt.Errorf("%s: previous %w; nothing written", o.path, err)
			}
			o.prevUID = &id
		}
		if g := files[i].PreviousGroup; g != "" {
			id, err := ids.gid(g)
			if err != nil {
				return nil, fmt.Errorf("%s: previous %w; nothing written", o.path, err)
			}
			o.prevGID = &id
		}
	}
	var drifts []Drift
	for i, o := range ops {
		d, err := o.compare(files[i].Previous)
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
	if (f.PreviousMode != nil || f.PreviousUser != "" || f.PreviousGroup != "") && (f.Previous == "" || f.Absent) {
		return refuse("a previous mode or owner is given for a file that does not exist before or is removed")
	}
	mode := fs.FileMode(0o644)
	if f.Mode != nil {
		m, ok := fileModeOf(*f.Mode)
		if !ok {
			return refuse(fmt.Sprintf("mode %#o is not permission bits", *f.Mode))
		}
		mode = m
	}
	o := &op{path: p, rel: p[1:], name: path.Base(p), absent: f.Absent, mode: mode}
	o.tmp, o.asideName, o.restoreTmp = sibling(o.name, "tmp"), sibling(o.name, "old"), sibling(o.name, "tmp")
	if f.PreviousMode != nil {
		m, ok := fileModeOf(*f.PreviousMode)
		if !ok {
			return refuse(fmt.Sprintf("previous mode %#o is not permission bits", *f.PreviousMode))
		}
		o.prevMode = &m
	}
	if !f.Absent {
		o.contents = f.Contents
		o.sha = SHA256(f.Contents)
	}
	return o, nil
}

// fileModeOf is a ConfigFile's mode (chmod's bits) as an fs.FileMode.
func fileModeOf(m int32) (fs.FileMode, bool) {
	if m < 0 || m > 0o7777 {
		return 0, false
	}
	mode := fs.FileMode(m) & fs.ModePerm
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode, true
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
// which parent directories are missing and whether the file exists. It
// opens the file's directory (or the deepest that exists) and keeps it:
// everything done to the file from then on is done relative to that
// descriptor, whatever becomes of the path.
func (s *session) inspect(o *op) error {
	parts := strings.Split(o.rel, "/")
	have := "."
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		st, err := s.root.lstatPath(dir)
		if errors.Is(err, fs.ErrNotExist) {
			for j := i; j < len(parts); j++ {
				o.missing = append(o.missing, strings.Join(parts[:j], "/"))
			}
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w; nothing written", o.path, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return &RefusedError{Path: o.path, Rule: fmt.Sprintf("its parent /%s is a symbolic link%s; lull writes only through real directories", dir, s.linkTarget(dir))}
		case unix.S_IFDIR:
		default:
			return &RefusedError{Path: o.path, Rule: fmt.Sprintf("its parent /%s is not a directory", dir)}
		}
		have = dir
	}
	d, err := s.root.open(have)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing written", o.path, err)
	}
	o.dir = s.opened.add(d)
	if len(o.missing) > 0 {
		return nil
	}
	st, err := o.dir.lstat(o.name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w; nothing written", o.path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return &RefusedError{Path: o.path, Rule: fmt.Sprintf("it is a symbolic link%s; lull replaces only regular files", s.linkTarget(o.rel))}
	case unix.S_IFDIR:
		return &RefusedError{Path: o.path, Rule: "it is a directory"}
	case unix.S_IFREG:
	default:
		return &RefusedError{Path: o.path, Rule: fmt.Sprintf("it is not a regular file (%v)", typeOf(st))}
	}
	o.found = st
	return nil
}

func typeOf(st *unix.Stat_t) fs.FileMode {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}

func (s *session) linkTarget(rel string) string {
	p, err := s.root.open(path.Dir(rel))
	if err != nil {
		return ""
	}
	defer p.f.Close()
	t, err := p.readlink(path.Base(rel))
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (to %q)", t)
}

// compare reads the file as it is and decides: drift (returned), already
// in place (o.done), or to be written (its old state kept in o.old).
//
// A file is as the configuration was planned from when it has the
// previous content and its previous mode and owner: those the
// ConfigFile records (PreviousMode, PreviousUser, PreviousGroup), or
// where it records none the new ones, so that a content change is taken
// to keep them; a file whose mode or owner was changed by hand since has
// drifted like one whose content was. Two kinds of file are compared by
// content alone: a file to remove (no mode or owner is declared for it),
// and a file whose content stays (previous is its new content) and that
// records no previous mode or owner: its mode and owner are what the
// configuration changes.
func (o *op) compare(previous string) (*Drift, error) {
	want := previous
	if want == "" {
		want = absent
	}
	if o.found == nil {
		return o.compareMissing(previous, want), nil
	}
	st, err := readState(o.dir, o.name, o.found)
	if err != nil {
		return nil, err
	}
	got := SHA256(st.content)
	mode, owner := o.attrs(st, o.mode, o.uid, o.gid)
	pm, puid, pgid := o.previousAttrs()
	pmode, powner := o.attrs(st, pm, puid, pgid)
	switch {
	case !o.absent && got == o.sha && mode == nil && owner == nil:
		o.done = true
		return nil, nil
	case got == previous && (o.byContentAlone(previous) || pmode == nil && powner == nil):
		o.old = st
		return nil, nil
	case got == previous:
		// The previous content, with another mode or owner than before.
		return &Drift{Path: o.path, Want: got, Got: got, Mode: pmode, Owner: powner}, nil
	case !o.absent && got == o.sha:
		// The new content, with another mode or owner than intended.
		return &Drift{Path: o.path, Want: got, Got: got, Mode: mode, Owner: owner}, nil
	default:
		return &Drift{Path: o.path, Want: want, Got: got}, nil
	}
}

// compareMissing is compare for a file that does not exist (want: the
// previous content's sum, or absent): in place when it is to be removed,
// to be written when it did not exist before either, drift otherwise.
func (o *op) compareMissing(previous, want string) *Drift {
	if o.absent {
		o.done = true
		return nil
	}
	if previous == "" {
		return nil
	}
	return &Drift{Path: o.path, Want: want, Got: absent}
}

// byContentAlone reports whether the file is as the configuration was
// planned from (previous) by its content alone (see compare): a file to
// remove, or one whose content stays and that records no previous mode
// or owner.
func (o *op) byContentAlone(previous string) bool {
	recorded := o.prevMode != nil || o.prevUID != nil || o.prevGID != nil
	return o.absent || previous == o.sha && !recorded
}

// previousAttrs are the mode and owner the file should have before the
// change: those recorded, the new ones where none is.
func (o *op) previousAttrs() (mode fs.FileMode, uid, gid int) {
	mode, uid, gid = o.mode, o.uid, o.gid
	if o.prevMode != nil {
		mode = *o.prevMode
	}
	if o.prevUID != nil {
		uid = *o.prevUID
	}
	if o.prevGID != nil {
		gid = *o.prevGID
	}
	return mode, uid, gid
}

// attrs compares the file's mode and owner with those given: nil where
// they agree.
func (o *op) attrs(st *fileState, want fs.FileMode, uid, gid int) (mode, owner *Mismatch) {
	if o.absent {
		return nil, nil
	}
	if st.mode != want {
		mode = &Mismatch{Want: octal(want), Got: octal(st.mode)}
	}
	if st.uid != uid || st.gid != gid {
		owner = &Mismatch{Want: fmt.Sprintf("%d:%d", uid, gid), Got: fmt.Sprintf("%d:%d", st.uid, st.gid)}
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
// is still the file found by lstat.
func readState(d *dir, name string, found *unix.Stat_t) (*fileState, error) {
	// O_NONBLOCK: should a FIFO take the file's place, opening it must
	// not hang; the identity check below then refuses it.
	f, err := d.openFile(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%w (lull-agent reads as root without CAP_DAC_OVERRIDE)", err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return nil, err
	}
	if !sameFile(st, found) {
		return nil, errors.New("the file was replaced while being checked")
	}
	content, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(content) > maxFileSize {
		return nil, fmt.Errorf("larger than %d MiB, too large to keep for a rollback", maxFileSize>>20)
	}
	return &fileState{content: content, mode: fileMode(st), uid: int(st.Uid), gid: int(st.Gid)}, nil
}
