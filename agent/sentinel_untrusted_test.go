package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The sentinel's files are written by whoever can write the host's /run
// (a DaemonSet with a hostPath): lull-agent reads them as root, and what it
// reads goes into spec.reason and an Event every reader of NodeMaintenances
// sees.

// secretMarker stands for a credential of the node's: it must never reach
// the request or its events.
const secretMarker = "MHcCAQEEIlullsecretmarker"

func writeSecret(t *testing.T) string {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "kubelet-client-current.pem")
	require.NoError(t, os.WriteFile(secret, []byte("-----BEGIN EC PRIVATE KEY-----\n"+secretMarker+"\n-----END EC PRIVATE KEY-----\n"), 0o600))
	return secret
}

// checkWithin runs Check and fails unless it returns within d (a FIFO or a
// blocking read must not stop the sentinel).
func checkWithin(t *testing.T, s *Sentinel, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Check(t.Context()) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Check did not return within %s", d)
		return nil
	}
}

// chown gives a file another owner, which needs root: lull-agent runs as
// root, and trusts files of root (or of the user it runs as).
func chown(t *testing.T, file string, uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	require.NoError(t, os.Chown(file, uid, gid))
}

func requireNoEventContains(t *testing.T, rec *events.FakeRecorder, s string) {
	t.Helper()
	for {
		select {
		case e := <-rec.Events:
			require.NotContains(t, e, s)
		default:
			return
		}
	}
}

// A package list that is not a plain file written by root is never read:
// the request is filed (the sentinel is there) and says why the list is
// left out.
func TestSentinelPkgsNotTrusted(t *testing.T) {
	for _, tc := range []struct {
		name string
		// make puts something at pkgs; secret is a root-owned file with a
		// credential in it, in the same file system.
		make func(t *testing.T, pkgs, secret string)
		why  string
	}{
		{name: "a symbolic link to the kubelet's key", why: "a symbolic link",
			make: func(t *testing.T, pkgs, secret string) { require.NoError(t, os.Symlink(secret, pkgs)) }},
		{name: "a relative symbolic link", why: "a symbolic link",
			make: func(t *testing.T, pkgs, secret string) {
				rel, err := filepath.Rel(filepath.Dir(pkgs), secret)
				require.NoError(t, err)
				require.NoError(t, os.Symlink(rel, pkgs))
			}},
		{name: "a hard link to the kubelet's key", why: "a hard link (2 names)",
			make: func(t *testing.T, pkgs, secret string) {
				// A hard link needs the same file system: put the secret beside.
				own := filepath.Join(filepath.Dir(pkgs), "key.pem")
				data, err := os.ReadFile(secret)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(own, data, 0o600))
				require.NoError(t, os.Link(own, pkgs))
			}},
		{name: "owned by another user", why: "owned by uid 1000, not root",
			make: func(t *testing.T, pkgs, _ string) {
				require.NoError(t, os.WriteFile(pkgs, []byte("libc6\n"), 0o644))
				chown(t, pkgs, 1000, 1000)
			}},
		{name: "writable by others", why: "writable by others than root",
			make: func(t *testing.T, pkgs, _ string) {
				require.NoError(t, os.WriteFile(pkgs, []byte("libc6\n"), 0o644))
				require.NoError(t, os.Chmod(pkgs, 0o646))
			}},
		{name: "writable by a group other than root's", why: "writable by others than root",
			make: func(t *testing.T, pkgs, _ string) {
				require.NoError(t, os.WriteFile(pkgs, []byte("libc6\n"), 0o644))
				chown(t, pkgs, 0, 1000)
				require.NoError(t, os.Chmod(pkgs, 0o664))
			}},
		{name: "a directory", why: "not a regular file (a directory)",
			make: func(t *testing.T, pkgs, _ string) { require.NoError(t, os.Mkdir(pkgs, 0o755)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c, file := sentinelCase(t)
			rec := events.NewFakeRecorder(10)
			s.Recorder = rec
			require.NoError(t, os.WriteFile(file, nil, 0o644))
			tc.make(t, file+".pkgs", writeSecret(t))
			require.NoError(t, checkWithin(t, s, 10*time.Second))
			nm := getNM(t, c)
			require.NotNil(t, nm, "the sentinel is there: a request is filed")
			require.NotContains(t, nm.Spec.Reason, secretMarker)
			require.Equal(t, "reboot required: "+file+" (unreadable package list: "+tc.why+")", nm.Spec.Reason)
			requireNoEventContains(t, rec, secretMarker)
		})
	}
}

// A FIFO in place of the package list never stops the sentinel.
func TestSentinelPkgsFIFO(t *testing.T) {
	s, c, file := sentinelCase(t)
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.NoError(t, syscall.Mkfifo(file+".pkgs", 0o644))
	require.NoError(t, checkWithin(t, s, 10*time.Second))
	require.Equal(t, "reboot required: "+file+" (unreadable package list: not a regular file (a named pipe))", getNM(t, c).Spec.Reason)
}

// The sentinel itself counts only as a regular file written by root:
// anything else at its name is reported as an error, and neither files nor
// withdraws a request.
func TestSentinelFileNotTrusted(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, file string)
		why  string
	}{
		{name: "a symbolic link", why: "a symbolic link",
			make: func(t *testing.T, file string) { require.NoError(t, os.Symlink(writeSecret(t), file)) }},
		{name: "a FIFO", why: "not a regular file (a named pipe)",
			make: func(t *testing.T, file string) { require.NoError(t, syscall.Mkfifo(file, 0o644)) }},
		{name: "owned by another user", why: "owned by uid 1000, not root",
			make: func(t *testing.T, file string) {
				require.NoError(t, os.WriteFile(file, nil, 0o644))
				chown(t, file, 1000, 1000)
			}},
		{name: "a directory", why: "not a regular file (a directory)",
			make: func(t *testing.T, file string) { require.NoError(t, os.Mkdir(file, 0o755)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c, file := sentinelCase(t)
			tc.make(t, file)
			err := checkWithin(t, s, 10*time.Second)
			require.ErrorContains(t, err, tc.why)
			require.Nil(t, getNM(t, c), "no request for a sentinel that is not trusted")

			s, c, file = sentinelCase(t, sentinelRequest(lullv1alpha1.PhaseWaitingForWindow, time.Now(), false, false))
			tc.make(t, file)
			require.Error(t, checkWithin(t, s, 10*time.Second))
			require.NotNil(t, getNM(t, c), "not withdrawn either: the sentinel is not known gone")
		})
	}
}

// The package list is bounded and cleaned: only package names reach the
// request, and a list that is not one is left out whole.
func TestSentinelPkgsCleaned(t *testing.T) {
	var long strings.Builder
	for i := 0; long.Len() < 1<<20; i++ {
		long.WriteString("linux-modules-extra-6.12.0-")
		long.WriteString(strings.Repeat("9", 1+i%7))
		long.WriteString("\n")
	}
	for _, tc := range []struct {
		name, content, want string
	}{
		{name: "package names", content: "linux-image-6.12.0-1-amd64\nlibc6:amd64\nlibstdc++6\nfoo~bar_baz\n",
			want: "packages: linux-image-6.12.0-1-amd64 libc6:amd64 libstdc++6 foo~bar_baz"},
		{name: "spaces, tabs and CRLF separate", content: "libc6 \t openssl\r\nsystemd\n\n",
			want: "packages: libc6 openssl systemd"},
		{name: "empty", content: "", want: ""},
		{name: "binary", content: "libc6\n\x00\x01\x1b[2J\xff\xfe\n", want: "unreadable package list: not text"},
		{name: "terminal escape", content: "libc6\n\x1b]0;owned\x07\n", want: "unreadable package list: not text"},
		{name: "not a package name", content: "libc6\n-----BEGIN EC PRIVATE KEY-----\n" + secretMarker + "\n",
			want: "unreadable package list: entry 2 is not a package name"},
		{name: "a path", content: "libc6\n/etc/shadow\n", want: "unreadable package list: entry 2 is not a package name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, file := sentinelCase(t)
			require.NoError(t, os.WriteFile(file, nil, 0o644))
			require.NoError(t, os.WriteFile(file+".pkgs", []byte(tc.content), 0o644))
			r, err := s.read(t.Context())
			require.NoError(t, err)
			require.True(t, r.needed)
			require.Equal(t, tc.want, r.details)
		})
	}

	t.Run("writable by root's group (a umask of 002)", func(t *testing.T) {
		s, _, file := sentinelCase(t)
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		require.NoError(t, os.WriteFile(file+".pkgs", []byte("libc6\n"), 0o644))
		require.NoError(t, os.Chmod(file, 0o664))
		require.NoError(t, os.Chmod(file+".pkgs", 0o664))
		r, err := s.read(t.Context())
		require.NoError(t, err)
		require.Equal(t, "packages: libc6", r.details)
	})

	t.Run("oversized", func(t *testing.T) {
		s, _, file := sentinelCase(t)
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		require.NoError(t, os.WriteFile(file+".pkgs", []byte(long.String()+"\x00binary after the first 4 KiB\n"), 0o644))
		r, err := s.read(t.Context())
		require.NoError(t, err)
		require.LessOrEqual(t, len(r.details), 4096+100, "at most 4 KiB of the list")
		require.True(t, strings.HasPrefix(r.details, "packages: linux-modules-extra-6.12.0-9 linux-modules-extra-6.12.0-99 "), r.details)
		require.True(t, strings.HasSuffix(r.details, " and more (the list is longer than 4096 bytes)"), r.details)
		for _, name := range strings.Fields(strings.TrimPrefix(r.details, "packages: "))[:10] {
			require.Regexp(t, `^linux-modules-extra-6\.12\.0-9+$`, name, "no name cut in half")
		}
	})
}

// Whether the sentinel was written again is judged by the node's own
// clock: its modification time against the one the agent recorded when it
// filed the request, never against the API server's timestamps.
func TestSentinelNodeClock(t *testing.T) {
	const writtenKey = SentinelWrittenAnnotation
	nodeNow := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	t.Run("the filed request records the sentinel's time", func(t *testing.T) {
		s, c, file := sentinelCase(t)
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		mtime := nodeNow.Add(-time.Minute).Add(123456789)
		require.NoError(t, os.Chtimes(file, mtime, mtime))
		require.NoError(t, s.Check(t.Context()))
		require.Equal(t, mtime.Format(time.RFC3339Nano), getNM(t, c).Annotations[writtenKey])
	})

	t.Run("node clock behind: a new sentinel is noticed", func(t *testing.T) {
		// The API server's clock is an hour ahead of the node's: the
		// request was created at (API) nodeNow+50m, the sentinel it was
		// filed for written at (node) nodeNow-20m, and written again
		// after the reboot at (node) nodeNow, before the request's
		// creation by the API server's clock.
		old := sentinelRequest(lullv1alpha1.PhaseCompleted, nodeNow.Add(50*time.Minute), true, true)
		old.Annotations[writtenKey] = nodeNow.Add(-20 * time.Minute).Format(time.RFC3339Nano)
		s, c, file := sentinelCase(t, old)
		s.Clock = clocktesting.NewFakeClock(nodeNow)
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		require.NoError(t, os.Chtimes(file, nodeNow, nodeNow))
		require.NoError(t, s.Check(t.Context()))
		nm := getNM(t, c)
		require.NotEqual(t, "old", string(nm.UID), "written again after the request: a new request")
		require.Equal(t, nodeNow.Format(time.RFC3339Nano), nm.Annotations[writtenKey])
	})

	t.Run("node clock ahead: a sentinel that survived the reboot is not taken for new", func(t *testing.T) {
		// The node's clock is an hour ahead: the sentinel's time is after
		// the request's creation by the API server's clock, but it is
		// the time the agent recorded.
		written := nodeNow.Add(-5 * time.Minute)
		old := sentinelRequest(lullv1alpha1.PhaseCompleted, nodeNow.Add(-time.Hour), true, true)
		old.Annotations[writtenKey] = written.Format(time.RFC3339Nano)
		s, c, file := sentinelCase(t, old)
		s.Clock = clocktesting.NewFakeClock(nodeNow)
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		require.NoError(t, os.Chtimes(file, written, written))
		require.NoError(t, s.Check(t.Context()))
		nm := getNM(t, c)
		require.Equal(t, "old", string(nm.UID), "not written again: no new request")
		cond := meta.FindStatusCondition(nm.Status.Conditions, lullv1alpha1.ConditionRebootSentinel)
		require.NotNil(t, cond)
		require.Equal(t, "StillPresent", cond.Reason)
	})
}

// The sentinel's path resolves in the host's root as it does on the host:
// /var/run → /run (an absolute link) leads to the host's /run, and no link
// leads out of the host's root.
func TestSentinelResolvesInHostRoot(t *testing.T) {
	for _, link := range []string{"/run", "../run", "../../../../../../run"} {
		t.Run(link, func(t *testing.T) {
			s, c, _ := sentinelCase(t)
			host := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(host, "var"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(host, "run"), 0o755))
			require.NoError(t, os.Symlink(link, filepath.Join(host, "var", "run")))
			require.NoError(t, os.WriteFile(filepath.Join(host, "run", "reboot-required"), nil, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(host, "run", "reboot-required.pkgs"), []byte("libc6\n"), 0o644))
			s.Commands = &Commands{HostRoot: host}
			s.File = "/var/run/reboot-required"
			require.NoError(t, s.Check(t.Context()))
			require.Equal(t, "reboot required: /var/run/reboot-required (packages: libc6)", getNM(t, c).Spec.Reason)
		})
	}
}

// A read of the sentinel that does not return (a file system that hangs)
// ends the check with an error within the deadline; the next check does
// not start another read behind it, and once it returns, reads resume.
func TestSentinelReadDeadline(t *testing.T) {
	s, c, _ := sentinelCase(t)
	release := make(chan struct{})
	var reads atomic.Int32
	s.readTimeout = 50 * time.Millisecond
	s.readHost = func() (reading, error) {
		reads.Add(1)
		<-release
		return reading{needed: true, details: "packages: libc6"}, nil
	}
	require.ErrorContains(t, checkWithin(t, s, 5*time.Second), "no answer within 50ms")
	require.Nil(t, getNM(t, c))
	require.ErrorContains(t, checkWithin(t, s, 5*time.Second), "the previous read has not returned yet")
	require.Equal(t, int32(1), reads.Load(), "no second read behind the stuck one")

	close(release)
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		last = s.Check(ctx)
		return last == nil, nil
	})
	require.NoError(t, err, "last: %v", last)
	require.Equal(t, "reboot required: "+s.File+" (packages: libc6)", getNM(t, c).Spec.Reason)
}
