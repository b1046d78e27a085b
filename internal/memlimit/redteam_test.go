package memlimit

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

// rtSys is a process with env and files; files mapped to an error return
// it; it records every limit set (and refuses none).
type rtSys struct {
	env     map[string]string
	files   map[string]string
	errs    map[string]error
	current int64 // the runtime's limit, math.MaxInt64 when none
	sets    []int64
	reads   []string
}

func (f *rtSys) sys() System {
	if f.current == 0 {
		f.current = math.MaxInt64
	}
	return System{
		Getenv: func(k string) string { return f.env[k] },
		ReadFile: func(p string) ([]byte, error) {
			f.reads = append(f.reads, p)
			if err, ok := f.errs[p]; ok {
				return nil, err
			}
			if b, ok := f.files[p]; ok {
				return []byte(b), nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
		SetLimit: func(n int64) int64 {
			old := f.current
			if n >= 0 {
				f.current = n
				f.sets = append(f.sets, n)
			}
			return old
		},
	}
}

// rtSane is the promise on a limit that is set: not 0, not tiny (a few
// MiB would make the GC run continuously in any lull component, each of
// which has a live heap of tens of MiB), not more than the container has.
func rtSane(t *testing.T, f *rtSys, name string) {
	t.Helper()
	for _, s := range f.sets {
		require.Greater(t, s, int64(16<<20), "%s: soft limit set to %d bytes (absurd: the GC would spin)", name, s)
	}
}

func rtV2(limit string) map[string]string {
	return map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": limit}
}

func rtV1(limit string) map[string]string {
	return map[string]string{"/proc/self/cgroup": "12:memory:/\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": limit}
}

// Held: odd but harmless cgroup values set nothing or a sane limit, and
// never panic.
func TestRedteamOddValuesNoPanic(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"v2 max":                              rtV2("max"),
		"v2 max no newline":                   rtV2("max"),
		"v2 MAX upper":                        rtV2("MAX\n"),
		"v2 empty":                            rtV2(""),
		"v2 whitespace":                       rtV2("  \n\t"),
		"v2 spaces around":                    rtV2("  268435456  \n"),
		"v2 zero":                             rtV2("0\n"),
		"v2 negative":                         rtV2("-1\n"),
		"v2 huge int64":                       rtV2("9223372036854775807\n"),
		"v2 uint64 max":                       rtV2("18446744073709551615\n"),
		"v2 above uint64":                     rtV2("99999999999999999999999\n"),
		"v2 just below half":                  rtV2("4611686018427387902\n"),
		"v2 with unit":                        rtV2("256M\n"),
		"v2 float":                            rtV2("2.5e8\n"),
		"v2 two lines":                        rtV2("268435456\nmax\n"),
		"v2 nul bytes":                        rtV2("\x00\x00"),
		"v1 unlimited":                        rtV1("9223372036854771712\n"),
		"v1 -1":                               rtV1("-1\n"),
		"v1 256Mi":                            rtV1("268435456"),
		"cgroup file empty":                   {"/proc/self/cgroup": ""},
		"cgroup file garbage":                 {"/proc/self/cgroup": "garbage\n::::\n:\n"},
		"cgroup file only colons":             {"/proc/self/cgroup": "::\n"},
		"cgroup v2 path ..":                   {"/proc/self/cgroup": "0::/../../..\n", "/sys/fs/cgroup/memory.max": "268435456\n"},
		"cgroup v2 path with spaces and CRLF": {"/proc/self/cgroup": "0::/kubepods/pod 1/c1\r\n", "/sys/fs/cgroup/memory.max": "268435456\n"},
		"hybrid: v2 empty, memory v1": {
			"/proc/self/cgroup":                           "12:memory:/kubepods/pod1/c1\n1:name=systemd:/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n"},
		"hybrid: unified root has memory.max max, v1 limited": {
			"/proc/self/cgroup":                           "12:memory:/\n0::/\n",
			"/sys/fs/cgroup/memory.max":                   "max\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n"},
		"nested v1 path exists": {
			"/proc/self/cgroup": "4:cpu,memory:/a/b/c\n",
			"/sys/fs/cgroup/memory/a/b/c/memory.limit_in_bytes": "536870912\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes":       "9223372036854771712\n"},
		"v1 memsw only":           {"/proc/self/cgroup": "3:memory:/\n", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "1000"},
		"v1 controller 'memoryx'": {"/proc/self/cgroup": "3:memoryx:/\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456"},
	} {
		t.Run(name, func(t *testing.T) {
			f := &rtSys{files: files}
			var got int64
			var src Source
			require.NotPanics(t, func() { got, src, _ = Apply(f.sys()) })
			rtSane(t, f, name)
			if src == FromCgroup {
				require.Equal(t, []int64{got}, f.sets)
			} else {
				require.Empty(t, f.sets, "nothing set when the source is %q", src)
			}
		})
	}
}

// Held: the hybrid layout reads the v1 memory controller's limit when the
// unified hierarchy has no memory.max; a nested v1 path wins over the
// root; the unified path wins in v2.
func TestRedteamLayouts(t *testing.T) {
	f := &rtSys{files: map[string]string{
		"/proc/self/cgroup":                           "12:memory:/kubepods/pod1/c1\n1:name=systemd:/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n",
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n"}}
	got, src, err := Apply(f.sys())
	require.NoError(t, err)
	require.Equal(t, FromCgroup, src)
	require.Equal(t, int64(241591910), got)

	f = &rtSys{files: map[string]string{
		"/proc/self/cgroup": "4:cpu,memory:/a/b/c\n",
		"/sys/fs/cgroup/memory/a/b/c/memory.limit_in_bytes": "536870912\n",
		"/sys/fs/cgroup/memory/memory.limit_in_bytes":       "9223372036854771712\n"}}
	got, src, err = Apply(f.sys())
	require.NoError(t, err)
	require.Equal(t, FromCgroup, src)
	require.Equal(t, int64(483183820), got)
}

// Broken promise: a cgroup limit of a few bytes (a misconfigured
// resources.limits.memory, e.g. "1" or "4k"; a test rig; a corrupt file)
// sets the Go soft limit to 0 or a few KiB: the GC then runs continuously
// (up to its 50 % CPU cap) for the whole life of the process. The promise
// is that no odd cgroup value sets an absurd limit (0 or tiny).
//
// Fixed: a soft limit below MinSoft (32 MiB) or at or below what the
// runtime holds already is not set (Source TooSmall, logged); the
// cgroup's own limit still applies.
func TestRedteamTinyLimitSetsAbsurdSoftLimit(t *testing.T) {
	for _, v := range []string{"1", "2", "4096", "65536", "1048576"} {
		for layout, files := range map[string]map[string]string{"v2": rtV2(v + "\n"), "v1": rtV1(v + "\n")} {
			t.Run(layout+" "+v, func(t *testing.T) {
				f := &rtSys{files: files}
				got, src, err := Apply(f.sys())
				require.NoError(t, err)
				t.Logf("memory limit %s: Apply returned %d from %q, runtime limits set: %v", v, got, src, f.sets)
				rtSane(t, f, "cgroup limit "+v)
			})
		}
	}
}

// Broken promise (same root cause, stated in the brief's words): a
// container limit smaller than what the process already uses sets a soft
// limit below the memory the Go runtime already holds, so the GC collects
// continuously from the first instant.
//
// Fixed: a soft limit below MinSoft (32 MiB) or at or below what the
// runtime holds already is not set (Source TooSmall, logged); the
// cgroup's own limit still applies.
func TestRedteamLimitBelowCurrentUse(t *testing.T) {
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(sample)
	inUse := int64(sample[0].Value.Uint64())
	limit := inUse / 2
	f := &rtSys{files: rtV2(strconv.FormatInt(limit, 10) + "\n")}
	got, src, err := Apply(f.sys())
	require.NoError(t, err)
	t.Logf("runtime holds %d bytes; cgroup limit %d; soft limit set %d (%s)", inUse, limit, got, src)
	for _, s := range f.sets {
		require.GreaterOrEqual(t, s, inUse, "soft limit %d set below the %d bytes the runtime already holds", s, inUse)
	}
}

// Held: errors reading the files are reported, nothing set, no panic; a
// missing /proc/self/cgroup (not Linux) is an error, not a crash.
func TestRedteamReadErrors(t *testing.T) {
	perm := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrPermission}
	for name, f := range map[string]*rtSys{
		"no /proc/self/cgroup": {files: map[string]string{}},
		"permission on memory.max": {files: map[string]string{"/proc/self/cgroup": "0::/\n"},
			errs: map[string]error{"/sys/fs/cgroup/memory.max": perm}},
		"EIO on cgroup": {errs: map[string]error{"/proc/self/cgroup": errors.New("input/output error")}},
	} {
		t.Run(name, func(t *testing.T) {
			var src Source
			require.NotPanics(t, func() { _, src, _ = Apply(f.sys()) })
			require.Equal(t, None, src)
			require.Empty(t, f.sets)
		})
	}
}

// Held: GOMEMLIMIT set in any form wins and nothing is set from the
// cgroup; Apply only reads the runtime's limit (-1).
func TestRedteamGOMEMLIMITWins(t *testing.T) {
	for _, v := range []string{"off", "150MiB", "0", "garbage", " "} {
		f := &rtSys{env: map[string]string{"GOMEMLIMIT": v}, files: rtV2("268435456\n")}
		got, src, err := Apply(f.sys())
		require.NoError(t, err, v)
		require.Equal(t, FromEnv, src, v)
		// The fake runtime holds no limit (MaxInt64), as after
		// GOMEMLIMIT=off: Apply reports none (0), not MaxInt64 (the
		// cosmetic finding, fixed).
		require.Equal(t, int64(0), got, v)
		require.Empty(t, f.sets, "GOMEMLIMIT=%q: nothing set from the cgroup", v)
		require.Empty(t, f.reads, "GOMEMLIMIT=%q: cgroup not read", v)
	}
}

// Held: Set on the real host does not panic and, if it set a limit, the
// limit is sane; the test restores the runtime's limit.
func TestRedteamSetOnHost(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	require.NotPanics(t, func() { Set(klog.Background()) })
	now := debug.SetMemoryLimit(-1)
	require.Greater(t, now, int64(16<<20), "host limit after Set")
}

// Held: GOMEMLIMIT=off runs (no limit; Set used to log it as a "limit
// set" of MaxInt64, now "No Go soft memory limit"); an invalid GOMEMLIMIT crashes the process in the
// Go runtime before main, not in memlimit (recorded, not memlimit's to
// fix). Runs this test binary as a child.
func TestRedteamGOMEMLIMITChild(t *testing.T) {
	if os.Getenv("RT_MEMLIMIT_CHILD") == "1" {
		Set(klog.Background())
		klog.Flush()
		if debug.SetMemoryLimit(-1) <= 0 {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	run := func(gomemlimit string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRedteamGOMEMLIMITChild$", "-test.count=1") //nolint:gosec // G702: the test binary itself, run again as a child
		cmd.Env = append(os.Environ(), "RT_MEMLIMIT_CHILD=1", "GOMEMLIMIT="+gomemlimit)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("off")
	require.NoError(t, err, out)
	out, err = run("128MiB")
	require.NoError(t, err, out)
	out, err = run("lots")
	require.Error(t, err)
	require.Contains(t, out, "malformed GOMEMLIMIT", "the runtime, not memlimit, refuses it")
}
