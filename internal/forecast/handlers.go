package forecast

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

var (
	// NodeMaintenanceResource is the NodeMaintenance API resource.
	NodeMaintenanceResource = lullv1alpha1.GroupVersion.WithResource("nodemaintenances")
	// MaintenanceWindowResource is the MaintenanceWindow API resource.
	MaintenanceWindowResource = lullv1alpha1.GroupVersion.WithResource("maintenancewindows")
	// DisruptionPolicyResource is the DisruptionPolicy API resource.
	DisruptionPolicyResource = lullv1alpha1.GroupVersion.WithResource("disruptionpolicies")
)

// Handlers returns informer event handlers feeding the forecast. They
// accept typed objects, unstructured ones (dynamic informers) and
// tombstones, so client-go, dynamic and controller-runtime informers can
// all feed the same forecast. An object that cannot be converted is logged
// and dropped; it never panics.
type Handlers struct {
	Nodes, Leases, Maintenances, Windows, Policies cache.ResourceEventHandler
	// Admission takes the admission guard's ConfigMap (any other is
	// ignored): its criticalUnits.
	Admission cache.ResourceEventHandler
}

// Handlers returns the forecast's event handlers.
func (f *Forecast) Handlers() Handlers {
	return Handlers{
		Nodes: handler(func(n *v1.Node) { f.SetNode(n) }, func(n *v1.Node) { f.DeleteNode(n.Name) }),
		Leases: handler(func(l *coordinationv1.Lease) { f.SetLease(l) },
			func(l *coordinationv1.Lease) { f.DeleteLease(l.Namespace, l.Name) }),
		Maintenances: handler(func(m *lullv1alpha1.NodeMaintenance) { f.SetMaintenance(m) }, f.DeleteMaintenance),
		Windows: handler(func(w *lullv1alpha1.MaintenanceWindow) { f.SetWindow(w) },
			func(w *lullv1alpha1.MaintenanceWindow) { f.DeleteWindow(w.Name) }),
		Policies: handler(func(p *lullv1alpha1.DisruptionPolicy) { f.SetPolicy(p) },
			func(p *lullv1alpha1.DisruptionPolicy) { f.DeletePolicy(p.Name) }),
		Admission: handler(func(cm *v1.ConfigMap) { f.SetAdmission(cm) }, f.DeleteAdmission),
	}
}

func handler[T any, PT interface {
	*T
	runtime.Object
}](set, del func(PT)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if o, err := As[T, PT](obj); err == nil {
				set(o)
			} else {
				klog.ErrorS(err, "Forecast dropped an object")
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if o, err := As[T, PT](obj); err == nil {
				set(o)
			} else {
				klog.ErrorS(err, "Forecast dropped an object")
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, err := As[T, PT](obj); err == nil {
				del(o)
			} else {
				klog.ErrorS(err, "Forecast dropped a deletion")
			}
		},
	}
}

// As converts an informer object (typed or unstructured) to *T.
func As[T any, PT interface {
	*T
	runtime.Object
}](obj interface{}) (PT, error) {
	switch o := obj.(type) {
	case PT:
		return o, nil
	case *unstructured.Unstructured:
		out := PT(new(T))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("converting %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected object of type %T, want %T", obj, PT(nil))
}

// Sources are the clients a standalone forecast watches with.
type Sources struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Nodes, if set, is a shared node informer to reuse (the scheduler's);
	// otherwise one is created.
	Nodes cache.SharedIndexInformer
}

// Run starts informers for leases (in the lease namespace only: the
// kubelets' heartbeat leases never reach us), NodeMaintenances,
// MaintenanceWindows and DisruptionPolicies, plus nodes unless a shared node informer is given,
// and waits until their caches have synced. The informers stop with ctx.
func (f *Forecast) Run(ctx context.Context, src Sources) error {
	h := f.Handlers()
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(src.Client, 0, informers.WithNamespace(f.opts.LeaseNamespace))
	if _, err := leaseFactory.Coordination().V1().Leases().Informer().AddEventHandler(h.Leases); err != nil {
		return err
	}
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(src.Dynamic, 0)
	for gvr, hd := range map[schema.GroupVersionResource]cache.ResourceEventHandler{
		NodeMaintenanceResource: h.Maintenances, MaintenanceWindowResource: h.Windows, DisruptionPolicyResource: h.Policies,
	} {
		if _, err := dyn.ForResource(gvr).Informer().AddEventHandler(hd); err != nil {
			return err
		}
	}
	synced := []cache.InformerSynced{}
	var nodeFactory informers.SharedInformerFactory
	nodes := src.Nodes
	if nodes == nil {
		nodeFactory = informers.NewSharedInformerFactory(src.Client, 0)
		nodes = nodeFactory.Core().V1().Nodes().Informer()
	}
	reg, err := nodes.AddEventHandler(h.Nodes)
	if err != nil {
		return err
	}
	if ns := f.opts.AdmissionNamespace; ns != "" {
		// The guard's ConfigMap alone (Options.AdmissionNamespace).
		admission := informers.NewSharedInformerFactoryWithOptions(src.Client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", settings.AdmissionConfigMap).String()
			}))
		inf := admission.Core().V1().ConfigMaps().Informer()
		if _, err := inf.AddEventHandler(h.Admission); err != nil {
			return err
		}
		admission.Start(ctx.Done())
		synced = append(synced, inf.HasSynced)
	}
	leaseFactory.Start(ctx.Done())
	dyn.Start(ctx.Done())
	if nodeFactory != nil {
		nodeFactory.Start(ctx.Done())
		synced = append(synced, reg.HasSynced)
	}
	synced = append(synced, leaseFactory.Coordination().V1().Leases().Informer().HasSynced,
		dyn.ForResource(NodeMaintenanceResource).Informer().HasSynced,
		dyn.ForResource(MaintenanceWindowResource).Informer().HasSynced,
		dyn.ForResource(DisruptionPolicyResource).Informer().HasSynced)
	go func() {
		<-ctx.Done()
		f.Stop()
	}()
	// Wait as long as it takes (until ctx ends), with a hint now and then:
	// a missing CRD or RBAC rule shows here.
	logger := klog.FromContext(ctx)
	for {
		syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ok := cache.WaitForCacheSync(syncCtx.Done(), synced...)
		cancel()
		if ok {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("forecast: stopped before the caches synced: %w", ctx.Err())
		}
		logger.Info("Forecast caches have not synced yet; are the lull CRDs installed, and may we list leases?",
			"leaseNamespace", f.opts.LeaseNamespace)
	}
	f.SetSynced()
	return nil
}
