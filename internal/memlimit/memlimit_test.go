package memlimit

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeSystem is a process with env, files and a runtime limit.
type fakeSystem struct {
	env   map[string]string
	files map[string]string
	set   int64
}

func (f *fakeSystem) sys() System {
	return System{
		Getenv: func(k string) string { return f.env[k] },
		ReadFile: func(p string) ([]byte, error) {
			if b, ok := f.files[p]; ok {
				return []byte(b), nil
			}
			return nil, fs.ErrNotExist
		},
		SetLimit: func(n int64) int64 {
			old := f.set
			if n >= 0 {
				f.set = n
			}
			return old
		},
	}
}

func TestApply(t *testing.T) {
	for name, tc := range map[string]struct {
		env    map[string]string
		files  map[string]string
		want   int64
		source Source
	}{
		"cgroup v2 in its own namespace": {
			files: map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "268435456\n"},
			want:  241591910, source: FromCgroup,
		},
		"cgroup v2 seen from the host's namespace": {
			files: map[string]string{"/proc/self/cgroup": "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup/kubepods/pod1/c1/memory.max": "100000000"},
			want:  90000000, source: FromCgroup,
		},
		"cgroup v2 without a limit": {
			files: map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "max\n"},
		},
		"cgroup v1": {
			files: map[string]string{"/proc/self/cgroup": "12:memory:/kubepods/pod1/c1\n11:cpu,cpuacct:/kubepods/pod1/c1\n",
				"/sys/fs/cgroup/memory/memory.limit_in_bytes": "200000000\n"},
			want: 180000000, source: FromCgroup,
		},
		"cgroup v1 unlimited": {
			files: map[string]string{"/proc/self/cgroup": "12:memory:/\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"},
		},
		"no cgroup files": {files: map[string]string{"/proc/self/cgroup": "0::/\n"}},
		"GOMEMLIMIT wins": {
			env:   map[string]string{"GOMEMLIMIT": "150MiB"},
			files: map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "268435456\n"},
			want:  157286400, source: FromEnv,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeSystem{env: tc.env, files: tc.files}
			if tc.source == FromEnv {
				f.set = 157286400 // what the runtime took from GOMEMLIMIT
			}
			got, source, err := Apply(f.sys())
			require.NoError(t, err)
			require.Equal(t, tc.source, source)
			require.Equal(t, tc.want, got)
			if tc.source == FromCgroup {
				require.Equal(t, tc.want, f.set, "the runtime's limit")
			}
		})
	}
}

func TestApplyUnreadable(t *testing.T) {
	f := &fakeSystem{files: map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "lots"}}
	_, source, err := Apply(f.sys())
	require.Error(t, err)
	require.Equal(t, None, source)
	require.Zero(t, f.set, "nothing set")
}
