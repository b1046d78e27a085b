package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Event reasons of the reboot sentinel.
const (
	ReasonSentinelRequested = "RebootRequired"
	ReasonSentinelWithdrawn = "RebootNoLongerRequired"
	ReasonSentinelStays     = "RebootSentinelStillPresent"
	ReasonSentinelCleared   = "RebootSentinelCleared"
)

// SentinelWrittenAnnotation on a request the sentinel filed records the
// sentinel file's modification time then (RFC 3339, by the node's clock):
// the file is written again when its time is another, a comparison of the
// node's clock with itself.
const SentinelWrittenAnnotation = "lull.dev/reboot-sentinel-written"

// sentinelReadTimeout bounds a read of the sentinel's files: a read of a
// regular file can still hang on a stuck file system, and must not stop
// the sentinel. Real time: it bounds a system call, not a decision.
const sentinelReadTimeout = 10 * time.Second

// Sentinel files a request for a reboot of its node because the node says
// so, as kured does: a file on the host (the package manager's
// /var/run/reboot-required) or a command (exit 0: a reboot is needed),
// checked every Period. lull then reboots the node like any request, in
// its window, within its budget, under its lease (docs/agent.md, "The
// reboot sentinel"):
//
//   - sentinel present, no active request: it files one for its node with
//     Class and the sentinel's details as the reason (the packages in
//     <file>.pkgs where present), recording the file's modification time
//     (SentinelWrittenAnnotation). A finished record in the way is
//     replaced, as a label replaces one;
//   - sentinel gone before its request started: the request is withdrawn
//     (deleted; nothing was done);
//   - after the reboot the drainer completes the request. A sentinel that
//     is still there then is reported on the finished request (condition
//     RebootSentinel True, reason StillPresent, and a Warning event) and
//     never rebooted again in a loop: a new request is filed only once
//     the sentinel has gone (condition False, Cleared) and come back, or,
//     for a file, once its modification time is not the one recorded on
//     the request (the node's clock against itself, never against the API
//     server's).
//
// The files are read as untrusted input (untrusted.go): resolved in the
// host's root as a chroot would, never following their last component,
// and only as regular files owned and written by root alone; the package
// list is bounded and only package names reach the reason. A sentinel that
// is anything else is an error (nothing filed, nothing withdrawn); a
// package list that is, is left out and the reason says why.
//
// The state lives in the API server (the finished request and its
// condition), so an agent restarted at any moment decides the same. The
// admission guard lets the agent create only its own node's request, only
// with the sentinel class and nothing else in its spec, and delete only
// its own sentinel request that has not started or a finished record of
// its node (lull-agent-requests).
type Sentinel struct {
	// Live reads the API server (the request is read fresh); Client
	// writes.
	Live   client.Reader
	Client client.Client
	Node   string
	// Commands runs the check chrooted into the host's root.
	Commands *Commands
	// File is the sentinel's path on the host; Command, when set, is run
	// instead (exit 0: a reboot is needed).
	File, Command string
	// Class of the requests it files.
	Class  string
	Period time.Duration
	Clock  clock.WithTicker
	// Recorder reports on the requests.
	Recorder events.EventRecorder

	// readHost reads the sentinel file (tests replace it); readTimeout
	// bounds it (sentinelReadTimeout if zero).
	readHost    func() (reading, error)
	readTimeout time.Duration
	// busy: a read has not returned yet (one stuck read, not one more
	// each period).
	busy atomic.Bool
}

// Start checks the sentinel every Period until ctx ends.
func (s *Sentinel) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("sentinel").WithValues("node", s.Node)
	ctx = klog.NewContext(ctx, logger)
	t := s.Clock.NewTicker(s.Period)
	defer t.Stop()
	for {
		if err := s.Check(ctx); err != nil {
			logger.Error(err, "Checking the reboot sentinel")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// NeedLeaderElection: every node's agent checks its own sentinel.
func (s *Sentinel) NeedLeaderElection() bool { return false }

// reading is what the sentinel says now.
type reading struct {
	needed bool
	// written is when the file was last written (zero for a command).
	written time.Time
	// details are the packages, or the command's output.
	details string
}

// Check reads the sentinel once and acts on the node's request.
func (s *Sentinel) Check(ctx context.Context) error {
	r, err := s.read(ctx)
	if err != nil {
		return err
	}
	nm := &lullv1alpha1.NodeMaintenance{}
	err = s.Live.Get(ctx, types.NamespacedName{Name: s.Node}, nm)
	switch {
	case apierrors.IsNotFound(err):
		nm = nil
	case err != nil:
		return fmt.Errorf("reading the NodeMaintenance of node %s: %w", s.Node, err)
	}
	ours := nm != nil && nm.Annotations[lullv1alpha1.RequestedByAnnotation] == lullv1alpha1.RequestedBySentinel
	switch {
	case nm == nil:
		if r.needed {
			return s.request(ctx, r)
		}
	case nm.DeletionTimestamp != nil:
		// Going: look again next time.
	case !nm.Status.Phase.Finished():
		if ours && !r.needed && nm.Status.StartedAt == nil {
			return s.withdraw(ctx, nm)
		}
	case !ours:
		// Another request's record: it makes way, as for a label, also
		// when it rebooted the node. Whether the sentinel was written
		// before that reboot cannot be told without comparing the node's
		// clock with the API server's; at worst the node is rebooted once
		// more (drained, in its window), and from then on the request is
		// ours and records the sentinel's time: no loop.
		if r.needed {
			return s.replace(ctx, nm, r)
		}
	default:
		// Our request: a sentinel still there after a reboot is
		// reported, never rebooted again in a loop.
		return s.afterRequest(ctx, nm, r)
	}
	return nil
}

// afterRequest handles the sentinel once its own request has finished.
func (s *Sentinel) afterRequest(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, r reading) error {
	cond := meta.FindStatusCondition(nm.Status.Conditions, lullv1alpha1.ConditionRebootSentinel)
	switch {
	case !r.needed:
		if cond != nil && cond.Status == metav1.ConditionFalse {
			return nil
		}
		s.event(nm, corev1.EventTypeNormal, ReasonSentinelCleared, "the reboot sentinel is gone")
		return s.setCondition(ctx, nm, metav1.ConditionFalse, "Cleared", "the reboot sentinel is gone")
	case cond != nil && cond.Status == metav1.ConditionFalse:
		// Gone after this request, and back: a new need.
		return s.replace(ctx, nm, r)
	case writtenAgain(nm, r):
		// Written again since the request was made: a new need.
		return s.replace(ctx, nm, r)
	case cond != nil && cond.Status == metav1.ConditionTrue:
		return nil // reported already
	}
	what := "the node rebooted"
	if !rebooted(nm) {
		what = fmt.Sprintf("the request ended %s without a reboot", nm.Status.Phase)
	}
	again := "once it is gone, or written again,"
	if _, ok := recordedWritten(nm); !ok || r.written.IsZero() {
		again = "once it has gone and come back,"
	}
	msg := fmt.Sprintf("%s and the reboot sentinel (%s) is still there: not rebooting again by itself. "+
		"Find out why it stays (%s); %s lull-agent requests a reboot again",
		what, s.what(), strings.TrimSpace(r.details), again)
	s.event(nm, corev1.EventTypeWarning, ReasonSentinelStays, msg)
	return s.setCondition(ctx, nm, metav1.ConditionTrue, "StillPresent", msg)
}

// writtenAgain: the sentinel file's modification time is not the one
// recorded when the request was filed. Both are the node's: a node clock
// ahead of or behind the API server's changes nothing. A request without
// a recorded time (another's record, or filed by an older agent) is
// renewed only once the sentinel has gone and come back.
func writtenAgain(nm *lullv1alpha1.NodeMaintenance, r reading) bool {
	recorded, ok := recordedWritten(nm)
	return ok && !r.written.IsZero() && !recorded.Equal(r.written)
}

func recordedWritten(nm *lullv1alpha1.NodeMaintenance) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, nm.Annotations[SentinelWrittenAnnotation])
	return t, err == nil
}

func rebooted(nm *lullv1alpha1.NodeMaintenance) bool {
	for _, a := range nm.Status.Actions {
		if a.Type == lullv1alpha1.StepReboot && a.State == lullv1alpha1.ActionSucceeded {
			return true
		}
	}
	return false
}

// request files a request for the node.
func (s *Sentinel) request(ctx context.Context, r reading) error {
	reason := "reboot required: " + s.what()
	if d := strings.TrimSpace(r.details); d != "" {
		reason += " (" + d + ")"
	}
	if len(reason) > 1024 {
		reason = reason[:1021] + "..."
	}
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: s.Node,
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedBySentinel}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: s.Node, Classes: []string{s.Class}, Reason: reason},
	}
	if !r.written.IsZero() {
		nm.Annotations[SentinelWrittenAnnotation] = r.written.UTC().Format(time.RFC3339Nano)
	}
	if err := s.Client.Create(ctx, nm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // made meanwhile: look again next time
		}
		return fmt.Errorf("requesting a reboot of node %s: %w", s.Node, err)
	}
	klog.FromContext(ctx).Info("Reboot required: requested", "class", s.Class, "reason", reason)
	s.event(nm, corev1.EventTypeNormal, ReasonSentinelRequested, reason)
	return nil
}

// replace deletes a finished record that holds the node's name, then
// files the request (the next check, once the record is gone).
func (s *Sentinel) replace(ctx context.Context, old *lullv1alpha1.NodeMaintenance, r reading) error {
	if err := s.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the finished NodeMaintenance %s to request a reboot: %w", old.Name, err)
	}
	// A record still going makes the create fail AlreadyExists, which
	// request takes as "look again next time".
	return s.request(ctx, r)
}

// withdraw deletes the node's sentinel request that has not started: the
// sentinel went away, nothing needs doing.
func (s *Sentinel) withdraw(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) error {
	s.event(nm, corev1.EventTypeNormal, ReasonSentinelWithdrawn, "the reboot sentinel is gone before the request started: withdrawn")
	if err := s.Client.Delete(ctx, nm, client.Preconditions{UID: &nm.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("withdrawing NodeMaintenance %s: %w", nm.Name, err)
	}
	klog.FromContext(ctx).Info("Reboot no longer required: request withdrawn")
	return nil
}

// setCondition writes the RebootSentinel condition on the request's
// status (the one condition the guard lets lull-agent write).
func (s *Sentinel) setCondition(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, status metav1.ConditionStatus, reason, msg string) error {
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	meta.SetStatusCondition(&nm.Status.Conditions, metav1.Condition{Type: lullv1alpha1.ConditionRebootSentinel, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: nm.Generation, LastTransitionTime: metav1.Time{Time: s.Clock.Now()}})
	if err := s.Client.Status().Update(ctx, nm); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recording the reboot sentinel on NodeMaintenance %s: %w", nm.Name, err)
	}
	return nil
}

// what names the sentinel.
func (s *Sentinel) what() string {
	if s.Command != "" {
		return "the command " + s.Command
	}
	return s.File
}

// read checks the sentinel: the command, chrooted into the host's root,
// or the file.
func (s *Sentinel) read(ctx context.Context) (reading, error) {
	if s.Command != "" {
		out, err := s.Commands.output(ctx, "", "", s.Command)
		if err != nil {
			if code, ok := exitCode(err); ok && code != 126 && code != 127 {
				return reading{}, nil // exit status other than 0: not needed
			}
			return reading{}, fmt.Errorf("running the reboot sentinel command: %w", err)
		}
		return reading{needed: true, details: lastLine(out)}, nil
	}
	return s.readFile(ctx)
}

// readFile reads the sentinel file within a deadline. A read that does not
// return (a file system that hangs) is left behind, and no other is
// started until it has returned.
func (s *Sentinel) readFile(ctx context.Context) (reading, error) {
	if !s.busy.CompareAndSwap(false, true) {
		return reading{}, fmt.Errorf("reading the reboot sentinel %s: the previous read has not returned yet", s.File)
	}
	read, timeout := s.readHost, s.readTimeout
	if read == nil {
		read = s.readHostFiles
	}
	if timeout <= 0 {
		timeout = sentinelReadTimeout
	}
	type result struct {
		r   reading
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := read()
		s.busy.Store(false)
		done <- result{r, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		return reading{}, fmt.Errorf("reading the reboot sentinel %s: no answer within %s", s.File, timeout)
	}
}

// readHostFiles reads the sentinel file and its package list in the host's
// root, as untrusted input (untrusted.go).
func (s *Sentinel) readHostFiles() (reading, error) {
	hostRoot := "/"
	if s.Commands != nil && s.Commands.HostRoot != "" {
		hostRoot = s.Commands.HostRoot
	}
	dir, err := openHostDir(hostRoot, path.Dir(s.File))
	if errors.Is(err, fs.ErrNotExist) {
		return reading{}, nil
	}
	if err != nil {
		return reading{}, fmt.Errorf("reading the reboot sentinel %s: %w", s.File, err)
	}
	defer dir.Close()
	name := path.Base(s.File)
	f, err := readHostFile(dir, name, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return reading{}, nil
	case untrustedWhy(err) != "":
		return reading{}, fmt.Errorf("the reboot sentinel %s is not trusted: %s (it counts only as a regular file owned by root, "+
			"writable by root alone, with one name): neither requesting nor withdrawing a reboot", s.File, untrustedWhy(err))
	case err != nil:
		return reading{}, fmt.Errorf("reading the reboot sentinel %s: %w", s.File, err)
	}
	r := reading{needed: true, written: f.written}
	pkgs, err := readHostFile(dir, name+".pkgs", maxPackageList)
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case untrustedWhy(err) != "":
		r.details = "unreadable package list: " + untrustedWhy(err)
	case errors.As(err, &pe):
		r.details = "unreadable package list: " + pe.Err.Error()
	case err != nil:
		r.details = "unreadable package list: " + err.Error()
	default:
		r.details = packageList(pkgs.data, pkgs.more)
	}
	return r, nil
}

func (s *Sentinel) event(nm *lullv1alpha1.NodeMaintenance, eventType, reason, msg string) {
	if s.Recorder != nil {
		s.Recorder.Eventf(nm, nil, eventType, reason, "RebootSentinel", "%s", msg)
	}
}

// exitCode is the exit status of a command that ran and exited non-zero.
func exitCode(err error) (int, bool) {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return ee.ExitCode(), true
	}
	return 0, false
}
