package hostfiles

import (
	"crypto/sha256"
	"encoding/hex"

	"lull.dev/lull/internal/policy"
)

// SHA256 is the hex SHA-256 of b, as ConfigFile.Previous spells it.
func SHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Match reports whether the absolute path matches pattern: `*` matches
// any run of characters and `?` any one within a path segment, `**` any
// run across segments ("/etc/**" matches "/etc/a/b";
// "/etc/containerd/certs.d/*" matches "/etc/containerd/certs.d/x" but not
// "/etc/containerd/certs.d/x/hosts.toml"). These are the globs of a
// DisruptionRule's files, so one pattern means the same in a policy and
// in an allowlist.
func Match(pattern, path string) bool { return policy.Glob(pattern, path, true) }
