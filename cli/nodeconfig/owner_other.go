//go:build !unix

package nodeconfig

import "io/fs"

// fileOwner is root: this system has no numeric owners to read.
func fileOwner(fs.FileInfo) (user, group string) { return rootOwner, rootOwner }

func fileMode(info fs.FileInfo) int32 { return portableMode(info) }
