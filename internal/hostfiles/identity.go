package hostfiles

import (
	"encoding/json"
	"slices"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// ConfigSHA256 is the hex SHA-256 of a NodeConfig's files in a canonical
// form: sorted by path, as JSON (each file's fields in their declared
// order, contents in base64, unset fields left out). The order the files
// are listed in does not count; anything else in them does. lull-drainer
// records it when a request starts (Decision.ConfigSHA256) and lull-agent
// compares it before writing.
func ConfigSHA256(files []lullv1alpha1.ConfigFile) string {
	sorted := slices.Clone(files)
	slices.SortStableFunc(sorted, func(a, b lullv1alpha1.ConfigFile) int { return strings.Compare(a.Path, b.Path) })
	// Marshalling strings, bytes, a bool and an *int32 cannot fail.
	b, _ := json.Marshal(sorted)
	return SHA256(b)
}
