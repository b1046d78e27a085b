package app

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/drainer/karpenter"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/uninstall"
	"lull.dev/lull/lease"
)

// lull-drainer's part in an uninstall: the Helm chart's pre-delete hook
// (--uninstall), and ending every request after a signal when lull is
// being uninstalled (--end-requests-on-uninstall).

// uninstallHook is lull-drainer --uninstall, the Helm chart's pre-delete
// hook: it marks the install, so the running lull-drainer ends every
// request and makes no new one, and waits for that; with no replica ready
// it ends them itself (it runs as lull-drainer's ServiceAccount). Helm
// deletes nothing until it exits 0.
func uninstallHook(cfg *rest.Config, o Options, logger klog.Logger) int {
	ctx, cancel := context.WithTimeout(ctrl.SetupSignalHandler(), o.UninstallTimeout)
	defer cancel()
	ctx = klog.NewContext(ctx, logger)
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		logger.Error(err, "Creating a client")
		return 1
	}
	d, err := uninstall.Drainer(ctx, c, o.LeaderElectionNamespace)
	if err != nil {
		logger.Error(err, "Finding lull-drainer")
		return 1
	}
	holding, err := uninstall.Holding(ctx, c)
	if err != nil {
		logger.Error(err, "Listing the requests")
		return 1
	}
	logger.Info("lull is being uninstalled: ending every request", "holding", len(holding))
	if !uninstall.Marked(d) {
		if err := uninstall.Mark(ctx, c, d, time.Now()); err != nil {
			logger.Error(err, "Marking the install")
			return 1
		}
	}
	if len(holding) > 0 && d.Status.ReadyReplicas == 0 {
		logger.Info("No lull-drainer replica is ready: ending the requests here")
		endRequests(ctx, cfg, o, clock.RealClock{}, logger)
	}
	if err := uninstall.Wait(ctx, c, o.UninstallTimeout); err != nil {
		logger.Error(err, "Waiting for the requests to end")
		return 1
	}
	logger.Info("Every request has ended", "ended", len(holding))
	return 0
}

// install is what lull-drainer watches for an uninstall.
func install(o *Options) maintenance.Install {
	return maintenance.Install{Namespace: o.LeaderElectionNamespace}
}

// endOnUninstall runs after a signal stopped the manager: when lull is
// being uninstalled it ends every request still holding something (the
// reconcilers may not have ended them all: helm uninstall deletes the
// Deployment first, and its pods stop at once), talking to the API server
// directly, for as long as its rights last (the same delete removes them:
// kubectl lull uninstall ends the requests first). Every replica does it;
// the writes are idempotent and conflicts are retried.
func endOnUninstall(cfg *rest.Config, o Options, clk clock.Clock, logger klog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), o.UninstallTimeout)
	defer cancel()
	ctx = klog.NewContext(ctx, logger)
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		logger.Error(err, "Creating a client to check for an uninstall")
		return
	}
	in := install(&o)
	uninstalling, why, err := in.Uninstalling(ctx, c)
	if err != nil || !uninstalling {
		if err != nil {
			logger.Error(err, "Checking whether lull is being uninstalled; requests are left as they are")
		}
		return
	}
	logger.Info("lull is being uninstalled: ending every request before exiting", "because", why)
	endRequests(ctx, cfg, o, clk, logger)
}

// endRequests ends every request still holding something, with a direct
// client, until done or ctx ends.
func endRequests(ctx context.Context, cfg *rest.Config, o Options, clk clock.Clock, logger klog.Logger) {
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		logger.Error(err, "Creating a client")
		return
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error(err, "Creating a clientset")
		return
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	defer b.Shutdown()
	o.Settings = o.Settings.WithDefaults()
	mo := o.Maintenance
	r := &maintenance.Reconciler{
		Client: c, APIReader: c, Kube: kube, Clock: clk, Options: mo,
		Leases:   lease.New(kube, lease.Options{Namespace: o.Settings.LeaseNamespace, Clock: clk, TakeOverReplicas: o.LeaderElect}),
		Recorder: b.NewRecorder(lullscheme.New(), settings.Drainer),
		// The windows' silences are expired with their credentials.
		Secrets: c, ConfigNamespace: o.ConfigNamespace,
	}
	// The admission guard may refuse for a moment while it is deleted
	// (its parameters go before its bindings): try again until the
	// deadline.
	for {
		n, err := r.WindDown(ctx)
		var failed []string
		if err == nil {
			// And lull's entries in Karpenter's NodePools: one left at
			// "0" would hold Karpenter off for ever.
			failed, err = karpenter.RemoveAll(ctx, c)
			if err == nil && len(failed) > 0 {
				err = fmt.Errorf("lull's budget entries not removed from NodePools %v", failed)
			}
		}
		if err == nil {
			logger.Info("Ended every request and removed lull's entries from Karpenter's NodePools", "ended", n)
			return
		}
		logger.Error(err, "Ending the requests; trying again")
		select {
		case <-ctx.Done():
			logger.Info("Gave up ending the requests (docs/install.md#if-lull-drainer-is-gone)")
			return
		case <-time.After(time.Second):
		}
	}
}
