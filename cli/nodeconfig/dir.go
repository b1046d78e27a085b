package nodeconfig

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ReadDir reads a directory tree standing for "/": root/etc/chrony.conf
// is /etc/chrony.conf, with its permission bits and numeric owner ("0"
// is read as "root"). Symbolic links are links (File.Link); unit files,
// drop-ins (<unit>.d/*.conf) and *.wants/ or *.requires/ links under
// etc/systemd/system are units, a unit file linked to /dev/null a masked
// unit; root/.ssh/authorized_keys and home/<user>/.ssh/authorized_keys
// (and authorized_keys.d/*) are SSH keys; etc/kernel/cmdline is the
// kernel arguments. Directories stand for nothing. A device, socket or
// FIFO is an error: it cannot stand for configuration, and a tree that
// has one is most likely not the one meant (a live root, say).
func ReadDir(root string) (*Config, error) {
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", root)
	}
	c := newConfig(root)
	err = filepath.WalkDir(resolved, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(resolved, p)
		if err != nil {
			return err
		}
		at := filepath.Join(root, rel)
		node := "/" + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		user, group := fileOwner(info)
		f := File{Mode: fileMode(info), User: user, Group: group}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
			f.Mode = linkMode
		case t.IsRegular():
			if f.Contents, err = os.ReadFile(p); err != nil { //nolint:gosec // G304: a file of the directory tree the user named on kubectl lull's command line, read with the user's rights
				return err
			}
		default:
			return fmt.Errorf("%s: a %s: only regular files, directories and symbolic links can be compared", at, typeName(t))
		}
		if err := c.place(node, f); err != nil {
			return fmt.Errorf("%s: %w", root, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.normalize()
	return c, nil
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "block device"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	default:
		return "special file (" + t.String() + ")"
	}
}

// portableMode is fileMode from what os.FileMode says.
func portableMode(info fs.FileInfo) int32 {
	m := info.Mode()
	mode := int32(m.Perm()) //nolint:gosec // G115: Perm() is at most 0o777
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
