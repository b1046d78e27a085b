//go:build unix

package nodeconfig

import (
	"io/fs"
	"strconv"
	"syscall"
)

// fileOwner is a file's numeric owner and group, "root" for ID 0.
func fileOwner(info fs.FileInfo) (user, group string) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return rootOwner, rootOwner
	}
	return owner(strconv.FormatUint(uint64(st.Uid), 10)), owner(strconv.FormatUint(uint64(st.Gid), 10))
}

// fileMode is a file's permission bits with setuid, setgid and sticky.
func fileMode(info fs.FileInfo) int32 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int32(st.Mode & 0o7777)
	}
	return portableMode(info)
}
