package machines

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/capi"
)

// What both controllers do to Cluster API's objects, read as unstructured.

func newMachineList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(capi.MachineKind.GroupVersion().WithKind("MachineList"))
	return l
}

// machinesOnNode lists the Machines whose node is node (the cache index
// capi.NodeIndex).
func machinesOnNode(ctx context.Context, c client.Client, node string) ([]unstructured.Unstructured, error) {
	list := newMachineList()
	if err := c.List(ctx, list, client.MatchingFields{capi.NodeIndex: node}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// patchAnnotations sets the annotations in set on o (a nil value removes
// the key) and touches no other: a JSON merge patch with o's
// resourceVersion, so a concurrent change is read again first. An object
// already gone is not an error.
func patchAnnotations(ctx context.Context, c client.Client, o *unstructured.Unstructured, set map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": o.GetResourceVersion(), "annotations": set}})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(c.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch)))
}

// eventOn records an event on a Cluster API object.
func eventOn(rec events.EventRecorder, o *unstructured.Unstructured, typ, reason, format string, args ...any) {
	if rec != nil {
		rec.Eventf(o, nil, typ, reason, "ClusterAPI", format, args...)
	}
}
