package agent

import (
	"testing"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The agent's cache holds its own node, its node's request and its node's
// disruption lease, and nothing else of the cluster.
func TestCacheOptions(t *testing.T) {
	opts := CacheOptions("n1", "lull-leases")
	got := map[string]string{}
	for obj, by := range opts.ByObject {
		namespaces := ""
		for ns := range by.Namespaces {
			namespaces += ns
		}
		key := ""
		switch obj.(type) {
		case *lullv1alpha1.NodeMaintenance:
			key = "NodeMaintenance"
		case *corev1.Node:
			key = "Node"
		case *coordinationv1.Lease:
			key = "Lease"
		default:
			t.Fatalf("unexpected cached type %T", obj)
		}
		require.Nil(t, by.Label, key)
		got[key] = by.Field.String() + " in [" + namespaces + "]"
	}
	require.Equal(t, map[string]string{
		"NodeMaintenance": "metadata.name=n1 in []",
		"Node":            "metadata.name=n1 in []",
		"Lease":           "metadata.name=node-n1 in [lull-leases]",
	}, got)
}
