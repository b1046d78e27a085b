//go:build unix

package nodeconfig

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// tree lays out a directory tree under root: a value "->target" is a
// symbolic link, anything else a file's content (mode 0644).
func tree(t *testing.T, root string, entries map[string]string) {
	t.Helper()
	for name, content := range entries {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if target, ok := strings.CutPrefix(content, "->"); ok {
			require.NoError(t, os.Symlink(target, p))
			continue
		}
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		require.NoError(t, os.Chmod(p, 0o644)) // whatever the umask
	}
}

func readDir(t *testing.T, root string) *Config {
	t.Helper()
	c, err := ReadDir(root)
	require.NoError(t, err)
	return c
}

func TestReadDir(t *testing.T) {
	common := map[string]string{
		"etc/ssh/sshd_config":                                       "PermitRootLogin no\n",
		"etc/systemd/system/kubelet.service":                        "[Service]\nExecStart=/usr/bin/kubelet\n",
		"etc/systemd/system/kubelet.service.d/README":               "not a drop-in\n",
		"etc/systemd/system/getty@tty1.service.d/10-autologin.conf": "[Service]\n",
		"etc/systemd/system/sockets.target.wants/sshd.socket":       "->/usr/lib/systemd/system/sshd.socket",
	}
	oldRoot, newRoot := t.TempDir(), t.TempDir()
	tree(t, oldRoot, common)
	tree(t, newRoot, common)
	tree(t, oldRoot, map[string]string{
		"etc/chrony.conf": "pool 2.pool.ntp.org\n",
		"etc/localtime":   "->/usr/share/zoneinfo/UTC",
		"etc/gone":        "x",
		"etc/systemd/system/chronyd.service.d/10-opts.conf":          "[Service]\nEnvironment=A=1\n",
		"etc/systemd/system/multi-user.target.wants/kubelet.service": "->/etc/systemd/system/kubelet.service",
		"etc/systemd/system/rpcbind.service":                         "->/dev/null",
		"root/.ssh/authorized_keys":                                  "ssh-ed25519 AAA one\nssh-ed25519 BBB two\n",
		"home/core/.ssh/authorized_keys":                             "# keys\nssh-ed25519 CCC three\n",
		"etc/kernel/cmdline":                                         "quiet nosmt\n",
	})
	tree(t, newRoot, map[string]string{
		"etc/chrony.conf": "pool 2.pool.ntp.org\n",
		"etc/localtime":   "->/usr/share/zoneinfo/Europe/Paris",
		"etc/added":       "y",
		"etc/systemd/system/chronyd.service.d/10-opts.conf": "[Service]\nEnvironment=A=2\n",
		"etc/systemd/system/rpcbind.service.d/10.conf":      "[Unit]\n",
		"root/.ssh/authorized_keys":                         "ssh-ed25519 BBB two\n\nssh-ed25519 AAA one\n",
		"home/core/.ssh/authorized_keys":                    "ssh-ed25519 CCC three\n",
		"home/core/.ssh/authorized_keys.d/ignition":         "ssh-ed25519 DDD four\n",
		"etc/kernel/cmdline":                                "quiet  hugepages=16",
	})
	require.NoError(t, os.Chmod(filepath.Join(newRoot, "etc/chrony.conf"), 0o600))

	old, newer := readDir(t, oldRoot), readDir(t, newRoot)

	require.Equal(t, oldRoot, old.Source)
	require.Equal(t, []string{"quiet", "nosmt"}, old.KernelArguments)
	require.Equal(t, map[string][]string{
		"root": {"ssh-ed25519 AAA one", "ssh-ed25519 BBB two"},
		"core": {"ssh-ed25519 CCC three"},
	}, old.SSHKeys)
	require.Equal(t, File{Link: "/usr/share/zoneinfo/UTC", Mode: linkMode, User: owner(strconv.Itoa(os.Getuid())), Group: owner(strconv.Itoa(os.Getgid()))},
		old.Files["/etc/localtime"])
	require.Contains(t, old.Files, "/etc/systemd/system/kubelet.service.d/README", "only *.conf are drop-ins")
	require.NotContains(t, old.Files, "/etc/kernel/cmdline")
	require.NotContains(t, old.Files, "/root/.ssh/authorized_keys")
	require.True(t, old.Units["rpcbind.service"].Mask)
	require.Nil(t, old.Units["rpcbind.service"].File)
	require.True(t, *old.Units["kubelet.service"].Enabled)
	require.True(t, *old.Units["sshd.socket"].Enabled)
	require.Equal(t, []byte("[Service]\n"), old.Units["getty@tty1.service"].Dropins["10-autologin.conf"].Contents)

	require.Equal(t, lullv1alpha1.Changes{
		Files:           []string{"/etc/added", "/etc/chrony.conf", "/etc/gone", "/etc/localtime"},
		Units:           []string{"chronyd.service", "kubelet.service", "rpcbind.service"},
		SSHKeys:         []string{"core"},
		KernelArguments: []string{"hugepages=16", "nosmt"},
	}, Diff(old, newer))

	require.True(t, empty(Diff(old, readDir(t, oldRoot))), "a tree read twice is the same")

	paths := func(fs []lullv1alpha1.ConfigFile) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Path)
		}
		return out
	}
	require.Equal(t, []string{
		"/etc/added", "/etc/chrony.conf", "/etc/gone",
		"/etc/systemd/system/chronyd.service.d/10-opts.conf",
		"/etc/systemd/system/rpcbind.service.d/10.conf",
	}, paths(Files(old, newer)))
	require.Equal(t, []string{"/etc/localtime"}, Unwritable(old, newer).Files)
	require.Equal(t, []string{"kubelet.service", "rpcbind.service"}, Unwritable(old, newer).Units)
}

func TestReadDirOwnerAndMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	oldRoot, newRoot := t.TempDir(), t.TempDir()
	tree(t, oldRoot, map[string]string{"etc/a": "x", "usr/local/bin/tool": "#!/bin/sh\n"})
	tree(t, newRoot, map[string]string{"etc/a": "x", "usr/local/bin/tool": "#!/bin/sh\n"})
	require.NoError(t, os.Chown(filepath.Join(newRoot, "etc/a"), 1000, 1000))
	require.NoError(t, os.Chmod(filepath.Join(newRoot, "usr/local/bin/tool"), 0o755|os.ModeSetuid))

	old, newer := readDir(t, oldRoot), readDir(t, newRoot)
	require.Equal(t, "root", old.Files["/etc/a"].User, "uid 0 is root")
	require.Equal(t, "1000", newer.Files["/etc/a"].User)
	require.Equal(t, "1000", newer.Files["/etc/a"].Group)
	require.Equal(t, int32(0o4755), newer.Files["/usr/local/bin/tool"].Mode)
	require.Equal(t, []string{"/etc/a", "/usr/local/bin/tool"}, Diff(old, newer).Files)

	// A tree of root's files is the Ignition config that writes them.
	c := readIgn(t, "same.ign", ign("3.4.0", files(file("/etc/a", plain("x")), file("/usr/local/bin/tool", plain("#!/bin/sh\n"), `,"mode":420`))+
		units(`{"name":"a.service","enabled":true}`)))
	tree(t, oldRoot, map[string]string{"etc/systemd/system/multi-user.target.wants/a.service": "->/usr/lib/systemd/system/a.service"})
	require.True(t, empty(Diff(readDir(t, oldRoot), c)))
}

func TestReadDirErrors(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		_, err := ReadDir(filepath.Join(t.TempDir(), "nope"))
		require.ErrorIs(t, err, os.ErrNotExist)
		require.ErrorContains(t, err, "nope")
	})
	t.Run("not a directory", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "f")
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		_, err := ReadDir(p)
		require.EqualError(t, err, p+": not a directory")
	})
	t.Run("special file", func(t *testing.T) {
		root := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(root, "run"), 0o755))
		require.NoError(t, syscall.Mkfifo(filepath.Join(root, "run", "fifo"), 0o644))
		_, err := ReadDir(root)
		require.EqualError(t, err, filepath.Join(root, "run", "fifo")+": a named pipe: only regular files, directories and symbolic links can be compared")
	})
	t.Run("unreadable directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any directory")
		}
		root := t.TempDir()
		locked := filepath.Join(root, "etc")
		require.NoError(t, os.MkdirAll(locked, 0o755))
		require.NoError(t, os.Chmod(locked, 0))
		t.Cleanup(func() { _ = os.Chmod(locked, 0o755) })
		_, err := ReadDir(root)
		require.ErrorIs(t, err, os.ErrPermission)
		require.ErrorContains(t, err, locked)
	})
	t.Run("a symlinked root is followed", func(t *testing.T) {
		root := t.TempDir()
		tree(t, root, map[string]string{"real/etc/a": "x"})
		require.NoError(t, os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "link")))
		c := readDir(t, filepath.Join(root, "link"))
		require.Equal(t, []byte("x"), c.Files["/etc/a"].Contents)
	})
}
