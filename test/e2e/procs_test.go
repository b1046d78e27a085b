package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// proc is one host process of the local cluster, started by hack/local-up.sh
// (hack/lib/cluster.sh start_proc: output in logs/<name>.log, PID in
// pids/<name>.pid) or restarted by a test.
type proc struct {
	name string
	args []string // the command line it was started with
	env  []string
}

// snapshotProc records a running process's command line and environment,
// so it can be started again exactly as local-up.sh started it.
func snapshotProc(name string) (*proc, error) {
	p := &proc{name: name}
	pid := p.pid()
	if pid == 0 {
		return nil, fmt.Errorf("%s: no pid file", name)
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.args = strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
	p.env = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	return p, nil
}

func (p *proc) pidFile() string { return filepath.Join(cluster.Dir, "pids", p.name+".pid") }

func (p *proc) pid() int {
	b, err := os.ReadFile(p.pidFile())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// alive reports whether the recorded process exists and is not a zombie
// (hack/lib/cluster.sh alive). A killed process's main thread can be a
// zombie while its other threads are still exiting (one blocked in a disk
// write, say) and still hold its files, listening sockets included: it is
// alive until its last thread is gone, or a restart finds its port in use.
func (p *proc) alive() bool {
	pid := p.pid()
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i <= 0 || i+2 >= len(s) {
		return false
	}
	if s[i+2] != 'Z' && s[i+2] != 'X' {
		return true
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err == nil && len(tasks) > 1
}

// signal sends sig to the process's group (it runs in its own session, so
// its children get it too).
func (p *proc) signal(sig syscall.Signal) error {
	pid := p.pid()
	if pid == 0 {
		return fmt.Errorf("%s: no pid", p.name)
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		return syscall.Kill(pid, sig)
	}
	return nil
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill(ctx context.Context) error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !p.alive(), nil
	})
}

// start runs the process again with its recorded command line and
// environment, appending to its log and recording its new PID where
// hack/local-down.sh looks for it.
func (p *proc) start() error {
	logf, err := os.OpenFile(filepath.Join(cluster.Dir, "logs", p.name+".log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n==== e2e: restarting %s at %s\n", p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	go func() { _ = cmd.Wait() }() // reaps it, so alive() sees it gone
	return os.WriteFile(p.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// lullProcs are the processes a Deployment would restart when they exit:
// both lull-drainer replicas and lull-scheduler. Each exits when it loses
// leader election, as controller-runtime and kube-scheduler do.
var lullProcs = []string{"lull-drainer", "lull-drainer-2", "lull-scheduler"}

// supervisor plays the kubelet for lull's host processes: whatever exits
// (killed by a test, or on its own after losing leader election during an
// outage) is started again with the same command line, after a short
// back-off that grows while it keeps exiting.
type supervisor struct {
	mu       sync.Mutex
	procs    map[string]*proc
	restarts map[string]int
	stop     context.CancelFunc
	done     chan struct{}
}

// superviseLull starts a supervisor for lullProcs (and extra) until the end
// of the test.
func superviseLull(t *testing.T, extra ...*proc) *supervisor {
	t.Helper()
	s := &supervisor{procs: map[string]*proc{}, restarts: map[string]int{}, done: make(chan struct{})}
	for _, name := range lullProcs {
		p, err := snapshotProc(name)
		if err != nil {
			t.Fatalf("supervisor: %v", err)
		}
		s.procs[name] = p
	}
	for _, p := range extra {
		s.procs[p.name] = p
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.run(ctx)
	t.Cleanup(s.close)
	return s
}

func (s *supervisor) run(ctx context.Context) {
	defer close(s.done)
	backoff := map[string]time.Duration{}
	next := map[string]time.Time{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		for name, p := range s.procs {
			if p.alive() || time.Now().Before(next[name]) {
				continue
			}
			if err := p.start(); err != nil {
				continue
			}
			s.restarts[name]++
			// 0.2 s for a process that ran a while, doubling up to 5 s for
			// one that keeps exiting (the API server may be down).
			b := backoff[name]
			if time.Since(next[name]) > 30*time.Second {
				b = 0
			}
			b = min(max(2*b, 200*time.Millisecond), 5*time.Second)
			backoff[name], next[name] = b, time.Now().Add(b)
		}
		s.mu.Unlock()
	}
}

// add supervises another process (e.g. one a test started itself).
func (s *supervisor) add(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[p.name] = p
}

// remove stops supervising a process (the test stops it for good).
func (s *supervisor) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, name)
}

// hold stops restarting a process until release is called: a replica
// kept down, so that the other takes over.
func (s *supervisor) hold(name string) (release func()) {
	s.mu.Lock()
	p := s.procs[name]
	delete(s.procs, name)
	s.mu.Unlock()
	return func() {
		if p != nil {
			s.add(p)
		}
	}
}

// restartCounts returns how often each process was started again.
func (s *supervisor) restartCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.restarts {
		out[k] = v
	}
	return out
}

// close stops supervising and makes sure every supervised process runs, so
// the next scenario starts from a whole cluster.
func (s *supervisor) close() {
	s.stop()
	<-s.done
	for _, p := range s.procs {
		if !p.alive() {
			_ = p.start()
		}
	}
}

// leader waits until one drainer replica says it leads and returns its
// name.
func leader(ctx context.Context, timeout time.Duration, ps ...drainerProc) (string, error) {
	if len(ps) == 0 {
		ps = drainerProcs()
	}
	var name string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, p := range ps {
			if p.leading() {
				name = p.name
				return true, nil
			}
		}
		return false, nil
	})
	return name, err
}

// auditEvent is the part of an API server audit event (audit.k8s.io/v1,
// one JSON object per line) the fault tests read.
type auditEvent struct {
	AuditID                  string    `json:"auditID"`
	Verb                     string    `json:"verb"`
	UserAgent                string    `json:"userAgent"`
	RequestURI               string    `json:"requestURI"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	ObjectRef                *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"responseStatus"`
}

func (a auditEvent) String() string {
	code := 0
	if a.ResponseStatus != nil {
		code = a.ResponseStatus.Code
	}
	return fmt.Sprintf("%s %s %s -> %d", a.RequestReceivedTimestamp.UTC().Format("15:04:05.000"), a.Verb, a.RequestURI, code)
}

// bytesLines splits b into non-empty lines.
func bytesLines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			out = append(out, l)
		}
	}
	return out
}
