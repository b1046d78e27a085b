package hostfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// The node's user and group databases, first definition of a name wins.
// Besides /etc, the read-only databases of image-based distributions that
// list system users through nss-altfiles: Fedora CoreOS and RHCOS keep
// them in /usr/lib, Flatcar in /usr/share/baselayout.
var (
	passwdFiles = []string{"etc/passwd", "usr/lib/passwd", "usr/share/baselayout/passwd"}
	groupFiles  = []string{"etc/group", "usr/lib/group", "usr/share/baselayout/group"}
)

// owners resolves user and group names against the node's databases, read
// once, when a name (not a number) first needs them.
type owners struct {
	root   *os.Root
	users  map[string]int
	groups map[string]int
}

func (o *owners) uid(name string) (int, error) {
	return o.resolve("user", name, &o.users, passwdFiles)
}

func (o *owners) gid(name string) (int, error) {
	return o.resolve("group", name, &o.groups, groupFiles)
}

func (o *owners) resolve(kind, name string, db *map[string]int, files []string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if id, ok := numericID(name); ok {
		return id, nil
	}
	if *db == nil {
		m, err := readIDs(o.root, files)
		if err != nil {
			return 0, fmt.Errorf("%s %q: %w", kind, name, err)
		}
		*db = m
	}
	id, ok := (*db)[name]
	if !ok {
		return 0, fmt.Errorf("unknown %s %q: not in the node's %s (give a numeric ID for one from another source)",
			kind, name, strings.Join(withSlash(files), ", "))
	}
	return id, nil
}

// numericID parses a decimal user or group ID; 4294967295 is chown's "no
// change", not an ID.
func numericID(s string) (int, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, false
	}
	return int(n), true
}

// readIDs reads name → ID (the third field) from colon-separated
// databases; missing files are skipped, other errors are returned.
func readIDs(root *os.Root, files []string) (map[string]int, error) {
	ids := map[string]int{}
	for _, f := range files {
		b, err := root.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading /%s: %w", f, err)
		}
		parseIDs(b, ids)
	}
	return ids, nil
}

// parseIDs adds the entries of a passwd(5) or group(5) file that ids does
// not have yet. Comments, NIS compat entries ("+", "-") and malformed
// lines are skipped.
func parseIDs(b []byte, ids map[string]int) {
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) < 3 || fields[0] == "" {
			continue
		}
		id, ok := numericID(fields[2])
		if !ok {
			continue
		}
		if _, dup := ids[fields[0]]; !dup {
			ids[fields[0]] = id
		}
	}
}

func withSlash(files []string) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = "/" + f
	}
	return out
}
