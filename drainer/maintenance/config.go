package maintenance

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
)

// A request that writes a NodeConfig (spec.changes.config) is bound to it
// when it starts: its decision records the NodeConfig's UID and the hash
// of its files, and lull-agent writes no other NodeConfig of that name
// (agent/write.go). A name alone would let one deleted and created again
// with other files be written for a request planned before.

// configRetry is how soon a request whose NodeConfig could not be read
// looks again.
const configRetry = 30 * time.Second

// bindConfig records, in the decision of a request about to start, the
// NodeConfig it writes (Decision.ConfigUID and ConfigSHA256), read from
// the API server. It returns why the request cannot start ("" when it
// can): its NodeConfig does not exist or cannot be read. A request that
// writes nothing, or started before (its decision is kept), is left as
// it is.
func (s *step) bindConfig(ctx context.Context) string {
	d := s.status.Decision
	if d == nil || d.Config == "" || s.status.StartedAt != nil {
		return ""
	}
	key := types.NamespacedName{Namespace: s.r.configNamespace(), Name: d.Config}
	var nc lullv1alpha1.NodeConfig
	if err := s.r.live().Get(ctx, key, &nc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("NodeConfig %s, which the request writes (spec.changes.config), does not exist: the request starts once it does", key)
		}
		s.logger.Error(err, "Reading the request's NodeConfig", "nodeConfig", key)
		return fmt.Sprintf("the request writes NodeConfig %s, which lull-drainer cannot read: %v", key, err)
	}
	d.ConfigUID, d.ConfigSHA256 = nc.UID, hostfiles.ConfigSHA256(nc.Spec.Files)
	return ""
}

// waitForConfig keeps a request whose NodeConfig cannot be read from
// starting, holding nothing: the lease and budget slot the gates just
// took are given back.
func (s *step) waitForConfig(ctx context.Context, msg string) (reconcile.Result, error) {
	s.releaseIfHeld(ctx)
	s.status.WaitingFor = msg
	return s.save(ctx, lullv1alpha1.PhasePending, lookAgain(configRetry))
}

// sameDecision reports whether two decisions say the same: the binding
// of the NodeConfig, added when the request starts, is no new decision
// (it is not announced again).
func sameDecision(a, b lullv1alpha1.Decision) bool {
	a.ConfigUID, a.ConfigSHA256 = "", ""
	b.ConfigUID, b.ConfigSHA256 = "", ""
	return equality.Semantic.DeepEqual(a, b)
}

// configNamespace holds the NodeConfigs (lull-agent's --config-namespace).
func (r *Reconciler) configNamespace() string {
	if r.ConfigNamespace == "" {
		return lullv1alpha1.ConfigNamespace
	}
	return r.ConfigNamespace
}

// live reads the API server: a NodeConfig is read when a request starts,
// never cached (the drainer watches none).
func (r *Reconciler) live() client.Reader {
	if r.APIReader == nil {
		return r.Client // unit tests: a fake client is the API server
	}
	return r.APIReader
}
