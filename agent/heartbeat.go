package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/agentlease"
)

// Heartbeat keeps the agent's lease (internal/agentlease) renewed, so the
// drainer knows an agent runs on the node.
type Heartbeat struct {
	Kube      kubernetes.Interface
	Namespace string
	Node      string
	Identity  string
	Clock     clock.WithTicker

	mu  sync.Mutex
	off bool
}

// Start renews the lease until ctx ends (a manager.Runnable).
func (h *Heartbeat) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("lease", h.Namespace+"/"+agentlease.Name(h.Node))
	t := h.Clock.NewTicker(agentlease.RenewEvery)
	defer t.Stop()
	for {
		if err := h.Renew(ctx); err != nil {
			logger.Error(err, "Renewing lull-agent's lease")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// NeedLeaderElection: every agent renews its own lease.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// Renew creates or renews the lease once; after Off it does nothing.
func (h *Heartbeat) Renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.off {
		return nil
	}
	return h.write(ctx, agentlease.Duration)
}

// Off stops the heartbeat for good, as switching the machine off stops
// it: for a simulated power-off (SimulatedPower.Off). Its last write
// claims one second, so the drainer sees the agent gone at once rather
// than a heartbeat's duration later, as it would after a real power-off.
func (h *Heartbeat) Off(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.off = true
	return h.write(ctx, time.Second)
}

// write creates or renews the lease, claiming d.
func (h *Heartbeat) write(ctx context.Context, d time.Duration) error {
	leases := h.Kube.CoordinationV1().Leases(h.Namespace)
	now := metav1.NewMicroTime(h.Clock.Now())
	name := agentlease.Name(h.Node)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.Namespace,
			Labels: map[string]string{agentlease.ComponentLabel: agentlease.Component}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(h.Identity), LeaseDurationSeconds: ptr.To(int32(d / time.Second)), //nolint:gosec // G115: d is agentlease.Duration or a second (the callers' constants)
				AcquireTime: &now, RenewTime: &now}}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating lease %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading lease %s: %w", name, err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != h.Identity {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = ptr.To(h.Identity), &now
	}
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second)) //nolint:gosec // G115: d is agentlease.Duration or a second (the callers' constants)
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing lease %s: %w", name, err)
	}
	return nil
}
