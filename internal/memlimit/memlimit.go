// Package memlimit sets the Go runtime's soft memory limit from the
// memory limit of the container a lull component runs in, so that the
// garbage collector works harder as the process nears the limit instead
// of letting the heap grow to twice what is live (GOGC=100) and the
// kernel kill the process. An explicit GOMEMLIMIT wins.
package memlimit

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// Fraction of the container's limit the Go runtime may use: the rest is
// for what the runtime does not count (the binary's mapped pages, cgo,
// the kernel's page cache charged to the cgroup). Karpenter uses the same.
const Fraction = 0.9

// Source says where the limit came from.
type Source string

const (
	// FromEnv: GOMEMLIMIT is set; the runtime applied it already.
	FromEnv Source = "GOMEMLIMIT"
	// FromCgroup: the cgroup's memory limit (v2 memory.max, v1
	// memory.limit_in_bytes), times Fraction.
	FromCgroup Source = "cgroup"
	// TooSmall: the cgroup's limit leaves less than MinSoft, or less than
	// the runtime holds already: a soft limit there would have the
	// collector run all the time, so none is set (the cgroup's own limit
	// still applies).
	TooSmall Source = "too small"
	// None: no limit found (the container has none, or it is not in a
	// cgroup lull can read); the runtime's default (none) stays.
	None Source = ""
)

// MinSoft is the smallest soft limit Apply sets.
const MinSoft = 32 << 20

// System is what Apply reads and sets: the process's environment, its
// file system (rooted at /) and the runtime's limit.
type System struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	SetLimit func(int64) int64
	// InUse is the memory the runtime holds now; nil reads it from
	// runtime/metrics.
	InUse func() int64
}

// Host is the running process's.
func Host() System {
	return System{Getenv: os.Getenv, ReadFile: os.ReadFile, SetLimit: debug.SetMemoryLimit}
}

// Apply sets the soft memory limit to Fraction of the container's
// memory limit unless GOMEMLIMIT is set, and says what it set (bytes;
// for TooSmall, the soft limit it did not set) and from where. A limit
// that cannot be read sets nothing: err says why.
func Apply(sys System) (int64, Source, error) {
	if v := sys.Getenv("GOMEMLIMIT"); v != "" {
		// The runtime applied it before main; -1 reads it back
		// (math.MaxInt64: GOMEMLIMIT=off).
		if limit := sys.SetLimit(-1); limit != math.MaxInt64 {
			return limit, FromEnv, nil
		}
		return 0, FromEnv, nil
	}
	limit, err := cgroupLimit(sys.ReadFile)
	if err != nil || limit <= 0 {
		return 0, None, err
	}
	soft := int64(float64(limit) * Fraction)
	inUse := sys.InUse
	if inUse == nil {
		inUse = runtimeInUse
	}
	if soft < MinSoft || soft <= inUse() {
		return soft, TooSmall, nil
	}
	sys.SetLimit(soft)
	return soft, FromCgroup, nil
}

// runtimeInUse is the memory the Go runtime holds from the OS now (what
// the soft limit counts).
func runtimeInUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	held := s[0].Value.Uint64() - s[1].Value.Uint64()
	if held > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(held)
}

// cgroupLimit is the memory limit of the process's cgroup in bytes; 0
// when it has none.
func cgroupLimit(read func(string) ([]byte, error)) (int64, error) {
	self, err := read("/proc/self/cgroup")
	if err != nil {
		return 0, err
	}
	v2, v1 := cgroupPaths(string(self))
	if v2 != "" || v1 == "" {
		// The unified hierarchy: in a container with its own cgroup
		// namespace the path is "/", and the files are at the mount's root.
		for _, dir := range []string{filepath.Join("/sys/fs/cgroup", v2), "/sys/fs/cgroup"} {
			b, err := read(filepath.Join(dir, "memory.max"))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			return parseLimit(string(b))
		}
		if v1 == "" {
			return 0, nil
		}
	}
	for _, dir := range []string{filepath.Join("/sys/fs/cgroup/memory", v1), "/sys/fs/cgroup/memory"} {
		b, err := read(filepath.Join(dir, "memory.limit_in_bytes"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return parseLimit(string(b))
	}
	return 0, nil
}

// cgroupPaths reads /proc/self/cgroup: the unified (v2) path and the
// memory controller's v1 path.
func cgroupPaths(self string) (v2, v1 string) {
	for _, line := range strings.Split(strings.TrimSpace(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case containsController(parts[1], "memory"):
			v1 = parts[2]
		}
	}
	return v2, v1
}

func containsController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// parseLimit reads a cgroup memory limit: "max" (v2) or a v1 value at or
// near the largest page-aligned int64 means none.
func parseLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n >= math.MaxInt64/2 {
		return 0, nil // cgroup v1's "unlimited" (9223372036854771712)
	}
	return int64(n), nil
}

// Set applies the limit to the running process (Apply on Host) and logs
// what it set, or why it set nothing.
func Set(logger klog.Logger) {
	limit, source, err := Apply(Host())
	switch {
	case err != nil:
		logger.Error(err, "Reading the container's memory limit; the Go runtime keeps its default (no soft limit)")
	case source == TooSmall:
		logger.Info("The container's memory limit is too small for a Go soft memory limit; none set", "softLimit", limit, "minimum", MinSoft)
	case source == FromEnv && limit == 0:
		logger.Info("No Go soft memory limit: GOMEMLIMIT=off")
	case source != None:
		logger.Info("Go soft memory limit set", "bytes", limit, "from", string(source))
	}
}
