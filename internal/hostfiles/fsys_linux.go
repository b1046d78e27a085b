package hostfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A dir is a directory of the host held open by descriptor. Every name
// in it is resolved relative to the descriptor, one name at a time,
// without following a symbolic link: once a directory has been checked,
// renaming it, or swapping its path for a link to another directory,
// cannot redirect what is written in it (issue 41, finding 1). os.Root
// is not enough: it resolves a path again on every call and follows the
// links that stay inside the root, and lull-agent's root is the host's /.
type dir struct {
	f        *os.File
	fd       int
	rel      string // the path it was opened by, relative to the root ("." for the root)
	dev, ino uint64
}

// dirs are the directories a Check or an Apply opened, closed together.
type dirs []*dir

func (ds *dirs) add(d *dir) *dir {
	*ds = append(*ds, d)
	return d
}

func (ds *dirs) close() {
	for _, d := range *ds {
		d.f.Close()
	}
	*ds = nil
}

// openat2Unsupported is set once openat2 answers ENOSYS (Linux before
// 5.6, or a seccomp profile that does not know it): names are then
// opened one at a time with openat and O_NOFOLLOW. Tests set it to run
// the fallback.
var openat2Unsupported atomic.Bool

// dirFlags open a directory for reading (fsync needs a readable
// descriptor, which O_PATH is not), never a link to one.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openRoot opens the host root itself, by the path the agent was given.
func openRoot(p string) (*dir, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return newDir(fd, ".")
}

func newDir(fd int, rel string) (*dir, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: "/" + rel, Err: err}
	}
	return &dir{f: os.NewFile(uintptr(fd), "/"+rel), fd: fd, rel: rel, dev: st.Dev, ino: st.Ino}, nil
}

// open opens the directory rel (clean, relative, "." for the root itself)
// beneath d, following no symbolic link on the way: a link anywhere on
// the path is ELOOP, a non-directory ENOTDIR.
func (d *dir) open(rel string) (*dir, error) {
	fd, err := openBeneath(d.fd, rel)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/" + rel, Err: err}
	}
	return newDir(fd, rel)
}

func openBeneath(rootfd int, rel string) (int, error) {
	if !openat2Unsupported.Load() {
		how := &unix.OpenHow{Flags: dirFlags, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		for range 8 {
			fd, err := unix.Openat2(rootfd, rel, how)
			switch err {
			case unix.EINTR, unix.EAGAIN:
				// EAGAIN: a rename or mount raced the lookup; look again.
				continue
			case unix.ENOSYS:
				openat2Unsupported.Store(true)
			default:
				return fd, err
			}
			break
		}
		if !openat2Unsupported.Load() {
			return -1, unix.EAGAIN
		}
	}
	// One name at a time, each opened with O_NOFOLLOW|O_DIRECTORY from the
	// descriptor of the one before.
	cur, err := unix.Openat(rootfd, ".", dirFlags, 0)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return cur, nil
	}
	for _, name := range strings.Split(rel, "/") {
		if name == "" || name == "." || name == ".." {
			unix.Close(cur)
			return -1, unix.EINVAL
		}
		next, err := openatRetry(cur, name, dirFlags, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func openatRetry(fd int, name string, flags int, mode uint32) (int, error) {
	for {
		n, err := unix.Openat(fd, name, flags, mode)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// sub opens the directory name in d, not following a link.
func (d *dir) sub(name string) (*dir, error) {
	fd, err := openatRetry(d.fd, name, dirFlags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	return newDir(fd, d.join(name))
}

func (d *dir) join(name string) string {
	if d.rel == "." {
		return name
	}
	return d.rel + "/" + name
}

// path is name's absolute path on the host, for messages.
func (d *dir) path(name string) string { return "/" + d.join(name) }

// lstat is name in d, not followed if it is a link.
func (d *dir) lstat(name string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.path(name), Err: err}
	}
	return &st, nil
}

// lstatPath is rel beneath d: its parent opened without following links,
// rel itself not followed.
func (d *dir) lstatPath(rel string) (*unix.Stat_t, error) {
	p, err := d.open(path.Dir(rel))
	if err != nil {
		return nil, err
	}
	defer p.f.Close()
	return p.lstat(path.Base(rel))
}

// openFile opens name in d, never through a link.
func (d *dir) openFile(name string, flags int, perm uint32) (*os.File, error) {
	fd, err := openatRetry(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.path(name)), nil
}

func (d *dir) rename(from, to string) error {
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return &os.LinkError{Op: "rename", Old: d.path(from), New: d.path(to), Err: err}
	}
	return nil
}

func (d *dir) remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &fs.PathError{Op: "unlink", Path: d.path(name), Err: err}
	}
	return nil
}

func (d *dir) rmdir(name string) error {
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil {
		return &fs.PathError{Op: "rmdir", Path: d.path(name), Err: err}
	}
	return nil
}

func (d *dir) mkdir(name string, perm uint32) error {
	if err := unix.Mkdirat(d.fd, name, perm); err != nil {
		return &fs.PathError{Op: "mkdir", Path: d.path(name), Err: err}
	}
	return nil
}

func (d *dir) readlink(name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(d.fd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// sync makes the directory's entries (a rename, a new or removed file)
// durable.
func (d *dir) sync() error {
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("syncing directory /%s: %w", d.rel, err)
	}
	return nil
}

// ErrMoved is wrapped by the error of a set whose directory was moved,
// replaced or swapped for a link while it was being written.
var ErrMoved = errors.New("a directory on the path was moved or replaced while the set was being written")

// recheck makes sure w's path, resolved again from d (the root) through
// real directories only, still names w: the last check before a rename, and
// before a read-back.
func (d *dir) recheck(w *dir) error {
	cur, err := d.open(w.rel)
	if err != nil {
		var why string
		switch {
		case d.isLink(w.rel):
			why = "is now a symbolic link"
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			why = "now reaches through a symbolic link"
		case errors.Is(err, unix.ENOTDIR):
			why = "no longer names a directory"
		case errors.Is(err, fs.ErrNotExist):
			why = "no longer exists"
		default:
			return fmt.Errorf("checking /%s again: %w", w.rel, err)
		}
		return fmt.Errorf("%w: /%s %s (%v)", ErrMoved, w.rel, why, err) //nolint:errorlint // only ErrMoved is wrapped: with the system call's ENOENT wrapped too, a directory swapped away would match fs.ErrNotExist ("nothing there") for errors.Is
	}
	defer cur.f.Close()
	if cur.dev != w.dev || cur.ino != w.ino {
		return fmt.Errorf("%w: /%s is another directory than the one checked", ErrMoved, w.rel)
	}
	return nil
}

func (d *dir) isLink(rel string) bool {
	st, err := d.lstatPath(rel)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// fileMode is a stat's permission and special bits as an fs.FileMode.
func fileMode(st *unix.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func fstat(f *os.File) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return &st, nil
}

func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }
