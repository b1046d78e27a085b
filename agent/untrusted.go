package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// Files on the host that anyone who can write the host's /run may have put
// there (a DaemonSet with a hostPath, a package script): lull-agent reads
// them as root, and what it reads may reach objects every reader of
// NodeMaintenances sees. So a name is resolved in the host's root as a
// chroot would, its last component is never followed, and only a regular
// file owned by root, writable by root alone and with no other name is
// read.

// maxPackageList is how much of a package list is read; the rest is left
// out and said to be.
const maxPackageList = 4096

// untrustedError says what is at a name instead of a file lull-agent
// trusts.
type untrustedError struct{ why string }

func (e *untrustedError) Error() string { return e.why }

// hostFile is what was read of a trusted file.
type hostFile struct {
	// written is the file's modification time, by the node's clock.
	written time.Time
	data    []byte
	// more: the file is longer than what was read.
	more bool
}

// openHostDir opens the directory dir (a path as the host sees it) in the
// host's root file system at hostRoot, resolving symbolic links as a chroot
// into hostRoot would: an absolute target starts again at hostRoot and ".."
// stops there (the host's /var/run is often a link to /run). os.Root keeps
// every step beneath hostRoot, also when a link changes meanwhile.
func openHostDir(hostRoot, dir string) (*os.Root, error) {
	root, err := os.OpenRoot(hostRoot)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	todo := strings.Split(dir, "/")
	var done []string
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		p := path.Join(append(done, c)...)
		fi, err := root.Lstat(p)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if links++; links > 40 {
			return nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.ELOOP}
		}
		target, err := root.Readlink(p)
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(target, "/") {
			done = nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return root.OpenRoot(path.Join(append([]string{"."}, done...)...))
}

// readHostFile opens name in dir without following it and without waiting
// (O_NOFOLLOW|O_NONBLOCK: a FIFO opens at once, then is refused), judges
// the file it opened (fstat of the open file, not of the name before) and
// reads at most limit bytes of it. Something at name that is not a trusted
// file is an *untrustedError; nothing there is fs.ErrNotExist.
func readHostFile(dir *os.Root, name string, limit int) (hostFile, error) {
	// Refused before it is opened: opening a device may act on it.
	fi, err := dir.Lstat(name)
	if err != nil {
		return hostFile{}, err
	}
	if why := distrust(fi); why != "" {
		return hostFile{}, &untrustedError{why}
	}
	d, err := dir.Open(".")
	if err != nil {
		return hostFile{}, err
	}
	defer d.Close()
	rc, err := d.SyscallConn()
	if err != nil {
		return hostFile{}, err
	}
	var fd int
	var oerr error
	if err := rc.Control(func(dfd uintptr) {
		for {
			fd, oerr = syscall.Openat(int(dfd), name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
			if oerr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return hostFile{}, err
	}
	switch {
	case oerr == syscall.ELOOP:
		return hostFile{}, &untrustedError{"a symbolic link"} // swapped in since the look
	case oerr != nil:
		return hostFile{}, &fs.PathError{Op: "open", Path: name, Err: oerr}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return hostFile{}, err
	}
	if why := distrust(fi); why != "" {
		return hostFile{}, &untrustedError{why}
	}
	h := hostFile{written: fi.ModTime()}
	if limit > 0 {
		if h.data, err = io.ReadAll(io.LimitReader(f, int64(limit)+1)); err != nil {
			return hostFile{}, err
		}
		if len(h.data) > limit {
			h.data, h.more = h.data[:limit], true
		}
	}
	return h, nil
}

// distrust says why the file fi describes is not to be trusted, or "".
func distrust(fi fs.FileInfo) string {
	m := fi.Mode()
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case !m.IsRegular():
		return "not a regular file (" + kind(m) + ")"
	}
	// Root's, or lull-agent's own (which is root's on a node; a test run
	// by a user trusts what that user wrote).
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return "of unknown owner"
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Sprintf("owned by uid %d, not root", st.Uid)
	case m.Perm()&0o002 != 0 || (m.Perm()&0o020 != 0 && st.Gid != 0 && int(st.Gid) != os.Getegid()):
		// Group-writable is root's alone only with root's group (a umask
		// of 002).
		return "writable by others than root"
	case st.Nlink != 1:
		// Another name of a root file elsewhere in the same file system.
		return fmt.Sprintf("a hard link (%d names)", st.Nlink)
	}
	return ""
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// packageList is the package list data read (more: the file went on) as
// it goes into a request's reason: "packages: a b c", "" for an empty
// list. A list that is not package names separated by white space is left
// out whole, with the reason why (never a part of it: a file that is not
// a package list may hold anything); of a list longer than what was read,
// the names read whole are kept.
func packageList(data []byte, more bool) string {
	if more {
		i := strings.LastIndexAny(string(data), " \t\r\n")
		if i < 0 {
			return fmt.Sprintf("unreadable package list: an entry longer than %d bytes", maxPackageList)
		}
		data = data[:i]
	}
	for _, b := range data {
		if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b >= 0x7f {
			return "unreadable package list: not text"
		}
	}
	names := strings.Fields(string(data))
	for i, n := range names {
		if !packageName(n) {
			return fmt.Sprintf("unreadable package list: entry %d is not a package name", i+1)
		}
	}
	switch {
	case len(names) == 0 && !more:
		return ""
	case !more:
		return "packages: " + strings.Join(names, " ")
	}
	return "packages: " + strings.Join(names, " ") + fmt.Sprintf(" and more (the list is longer than %d bytes)", maxPackageList)
}

// packageName: a letter or digit, then letters, digits and .+-:~_ (a
// Debian or RPM package name, with an architecture after a colon).
func packageName(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && strings.ContainsRune(".+-:~_", r):
		default:
			return false
		}
	}
	return s != ""
}

// untrustedWhy is why err says a file is not trusted, or "".
func untrustedWhy(err error) string {
	var u *untrustedError
	if errors.As(err, &u) {
		return u.why
	}
	return ""
}
