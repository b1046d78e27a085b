// Package capi is what lull reads and writes on Cluster API's objects
// (sigs.k8s.io/cluster-api, contract v1beta2): the names of the hooks,
// labels and annotations, and why a Machine is being deleted. It reads
// Machines, MachineSets and MachineDeployments as unstructured objects:
// Cluster API is built on other Kubernetes libraries than lull, so its Go
// types are never linked in (docs/cluster-api.md).
package capi

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Group and Version are Cluster API's core API group and the version lull
// reads (served by Cluster API v1.11 and later).
const (
	Group   = "cluster.x-k8s.io"
	Version = "v1beta2"
)

// GroupVersion kinds lull reads.
var (
	MachineKind           = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "Machine"}
	MachineSetKind        = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "MachineSet"}
	MachineDeploymentKind = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "MachineDeployment"}
	ClusterKind           = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "Cluster"}
	// MachineResource is what discovery must serve before lull watches
	// Machines.
	MachineResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "machines"}
)

// Names Cluster API defines (sigs.k8s.io/cluster-api/api/core/v1beta2).
const (
	// PreDrainHookPrefix: a Machine being deleted is not drained while an
	// annotation PreDrainHookPrefix/<name> is present.
	PreDrainHookPrefix = "pre-drain.delete.hook.machine.cluster.x-k8s.io"
	// BeforeUpgradeHookPrefix: a Cluster's topology upgrade does not start
	// while an annotation BeforeUpgradeHookPrefix/<name> is present.
	BeforeUpgradeHookPrefix = "before-upgrade.hook.cluster.cluster.x-k8s.io"
	// SkipRemediationAnnotation keeps MachineHealthChecks off a Machine.
	SkipRemediationAnnotation = "cluster.x-k8s.io/skip-remediation"
	// RemediateMachineAnnotation asks for a Machine's remediation by hand.
	RemediateMachineAnnotation = "cluster.x-k8s.io/remediate-machine"
	// RevisionAnnotation is a MachineDeployment's revision, copied to each
	// of its MachineSets.
	RevisionAnnotation = "machinedeployment.clusters.x-k8s.io/revision"
	// ClusterNameLabel, MachineDeploymentNameLabel: on every Machine.
	ClusterNameLabel           = "cluster.x-k8s.io/cluster-name"
	MachineDeploymentNameLabel = "cluster.x-k8s.io/deployment-name"
	// OwnerRemediatedCondition is set (False) on a Machine a
	// MachineHealthCheck found unhealthy, until its owner remediates it.
	OwnerRemediatedCondition = "OwnerRemediated"
)

// lull's own names on Cluster API's objects.
const (
	// GovernedLabel on a Machine puts it under lull: lull's pre-drain hook
	// from its creation (the lull-cluster-api MutatingAdmissionPolicy) and
	// its deletion as a lull request. Set it in a MachineDeployment's or
	// MachineSet's spec.template.metadata.labels (Cluster API copies it to
	// every Machine it creates) or in a Cluster topology's worker metadata.
	GovernedLabel = "lull.dev/governed"
	// HookName is lull's hook: PreDrainHook is the annotation's key, its
	// value HookOwner. lull removes only this key.
	HookName     = "lull"
	PreDrainHook = PreDrainHookPrefix + "/" + HookName
	HookOwner    = "lull-drainer"
	// BeforeUpgradeHook is lull's hook on a governed Cluster (label
	// GovernedLabel on the Cluster): its value says which of lull's
	// requests hold the upgrade.
	BeforeUpgradeHook = BeforeUpgradeHookPrefix + "/" + HookName
	// MachineAnnotation on a NodeMaintenance made for a Machine's deletion
	// names the Machine (namespace/name); MachineUIDAnnotation its UID.
	MachineAnnotation    = "lull.dev/machine"
	MachineUIDAnnotation = "lull.dev/machine-uid"
	// SkipRemediationByLull on a Machine records that lull set its
	// SkipRemediationAnnotation (its value: the request that holds the
	// node down); lull removes the skip only where it recorded it.
	SkipRemediationByLull = "lull.dev/skip-remediation"
	// NodeIndex is the cache index of Machines by status.nodeRef.name.
	NodeIndex = "status.nodeRef.name"
	// RequestedBy is the lull.dev/requested-by of those requests.
	RequestedBy = lullv1alpha1.RequestedByClusterAPI
)

// Cause is why Cluster API deletes a Machine; each is a maintenance class
// of its own, so a DisruptionPolicy decides each (docs/cluster-api.md).
type Cause string

const (
	// CauseRollout: a MachineDeployment replaces its Machines (a new
	// version, image or template): the Machine's MachineSet is an older
	// revision than its MachineDeployment's.
	CauseRollout Cause = "cluster-api-rollout"
	// CauseScaleDown: a MachineSet has more Machines than it wants.
	CauseScaleDown Cause = "cluster-api-scale-down"
	// CauseRemediation: a MachineHealthCheck (or an admin's
	// remediate-machine annotation) found the Machine unhealthy.
	CauseRemediation Cause = "cluster-api-remediation"
	// CauseDelete: anything else, a user's `kubectl delete machine` or
	// the Cluster's deletion.
	CauseDelete Cause = "cluster-api-delete"
)

// Causes lists every cause, in the order they are told apart.
var Causes = []Cause{CauseRemediation, CauseRollout, CauseScaleDown, CauseDelete}

// Governed reports whether lull governs the Machine.
func Governed(m *unstructured.Unstructured) bool {
	return m.GetLabels()[GovernedLabel] == "true"
}

// HasHook reports whether the Machine carries lull's pre-drain hook.
func HasHook(m *unstructured.Unstructured) bool {
	_, ok := m.GetAnnotations()[PreDrainHook]
	return ok
}

// NodeName is the Machine's node (status.nodeRef.name), empty before it
// has one.
func NodeName(m *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
	return name
}

// Deleting reports whether the Machine is being deleted.
func Deleting(m *unstructured.Unstructured) bool {
	return m.GetDeletionTimestamp() != nil
}

// OwnerMachineSet is the name of the MachineSet that controls the Machine,
// empty when none does.
func OwnerMachineSet(m *unstructured.Unstructured) string {
	for _, o := range m.GetOwnerReferences() {
		if o.Kind == MachineSetKind.Kind && o.Controller != nil && *o.Controller {
			if gv, err := schema.ParseGroupVersion(o.APIVersion); err == nil && gv.Group == Group {
				return o.Name
			}
		}
	}
	return ""
}

// Unhealthy reports whether a MachineHealthCheck or an admin marked the
// Machine for remediation.
func Unhealthy(m *unstructured.Unstructured) bool {
	if _, ok := m.GetAnnotations()[RemediateMachineAnnotation]; ok {
		return true
	}
	conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
	for _, c := range conds {
		cm, ok := c.(map[string]any)
		if ok && cm["type"] == OwnerRemediatedCondition && cm["status"] == string(metav1.ConditionFalse) {
			return true
		}
	}
	return false
}

// CauseOf tells why the Machine is being deleted, from the Machine, its
// MachineSet (nil: none, or not found) with the number of that set's
// Machines not being deleted, and the set's MachineDeployment (nil: none).
// It returns the cause and a sentence saying how it was told.
func CauseOf(m, set *unstructured.Unstructured, setActive int, md *unstructured.Unstructured) (Cause, string) {
	if Unhealthy(m) {
		return CauseRemediation, "the Machine is marked unhealthy (a MachineHealthCheck or " + RemediateMachineAnnotation + ")"
	}
	if set != nil && md != nil {
		setRev, err1 := strconv.Atoi(set.GetAnnotations()[RevisionAnnotation])
		mdRev, err2 := strconv.Atoi(md.GetAnnotations()[RevisionAnnotation])
		if err1 == nil && err2 == nil && setRev < mdRev {
			return CauseRollout, fmt.Sprintf("MachineDeployment %s rolls out revision %d; the Machine's MachineSet %s is revision %d", md.GetName(), mdRev, set.GetName(), setRev)
		}
	}
	if set != nil {
		want, found, _ := unstructured.NestedInt64(set.Object, "spec", "replicas")
		if found && int64(setActive) >= want {
			return CauseScaleDown, fmt.Sprintf("MachineSet %s scales down to %d Machine(s)", set.GetName(), want)
		}
	}
	return CauseDelete, "the Machine was deleted (by a user or with its Cluster)"
}
