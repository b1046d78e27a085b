package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func deployment(name, image string, replicas, ready int32) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultInstallNamespace},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: image}}}}},
		Status: appsv1.DeploymentStatus{Replicas: replicas, ReadyReplicas: ready},
	}
}

func pod(name, component, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultInstallNamespace, Labels: map[string]string{"app.kubernetes.io/name": component}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: component, Image: image}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func versionsOf(t *testing.T, objs ...runtime.Object) (versionView, error) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &k8sversion.Info{GitVersion: "v1.37.1", Major: "1", Minor: "37"}
	v := versionView{ClientVersion: clientVersion{Version: "v0.2.0", GoVersion: "go1.26", Platform: "linux/amd64"}}
	err := collectServerVersions(t.Context(), cs, &v, DefaultInstallNamespace)
	return v, err
}

// version reads each component's Deployment image tag and what its pods
// run (two images in the middle of an upgrade).
func TestVersionInstalled(t *testing.T) {
	v, err := versionsOf(t,
		deployment("lull-scheduler", "lull.dev/lull-scheduler:v0.2.0", 1, 1),
		deployment("lull-drainer", "registry.example:5000/lull/lull-drainer:v0.2.0@sha256:abc", 2, 1),
		pod("lull-scheduler-1", "lull-scheduler", "lull.dev/lull-scheduler:v0.2.0"),
		pod("lull-drainer-1", "lull-drainer", "registry.example:5000/lull/lull-drainer:v0.1.0"),
		pod("lull-drainer-2", "lull-drainer", "registry.example:5000/lull/lull-drainer:v0.2.0@sha256:abc"),
	)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, printVersion(&buf, v, DefaultInstallNamespace, false, ""))
	golden(t, "version", buf.Bytes())

	buf.Reset()
	require.NoError(t, printVersion(&buf, v, DefaultInstallNamespace, false, "json"))
	var got struct {
		APIVersion, Kind string
		versionView
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got), buf.String())
	require.Equal(t, "cli.lull.dev/v1alpha1", got.APIVersion)
	require.Equal(t, KindVersion, got.Kind)
	require.Equal(t, v, got.versionView)
}

func TestVersionNotInstalled(t *testing.T) {
	v, err := versionsOf(t)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, printVersion(&buf, v, DefaultInstallNamespace, false, ""))
	golden(t, "version-not-installed", buf.Bytes())
}

func TestImageVersion(t *testing.T) {
	for image, want := range map[string]string{
		"lull.dev/lull-drainer:v0.1.0":            "v0.1.0",
		"localhost:5000/lull-drainer:v0.1.0":      "v0.1.0",
		"localhost:5000/lull-drainer":             "latest",
		"lull.dev/lull-drainer@sha256:abc":        "sha256:abc",
		"lull.dev/lull-drainer:v0.1.0@sha256:abc": "v0.1.0",
		"lull-drainer":                            "latest",
	} {
		require.Equal(t, want, imageVersion(image), image)
	}
}

// lull-agent's version is its DaemonSet's image tag, with the nodes it
// should run on and those where it is ready.
func TestVersionAgent(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/name": "lull-agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "lull-agent", Namespace: DefaultInstallNamespace},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "lull-agent", Image: "lull.dev/lull-agent:v0.2.0"}}}}},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, NumberReady: 2},
	}
	v, err := versionsOf(t, deployment("lull-drainer", "lull.dev/lull-drainer:v0.2.0", 1, 1), ds,
		pod("lull-agent-a", "lull-agent", "lull.dev/lull-agent:v0.2.0"))
	require.NoError(t, err)
	var agent componentVersion
	for _, c := range v.Components {
		if c.Name == "lull-agent" {
			agent = c
		}
	}
	require.Equal(t, componentVersion{Name: "lull-agent", Kind: "DaemonSet", Namespace: DefaultInstallNamespace, Installed: true,
		Version: "v0.2.0", Image: "lull.dev/lull-agent:v0.2.0", Running: []string{"lull.dev/lull-agent:v0.2.0"}, Replicas: 3, Ready: 2}, agent)
	var buf bytes.Buffer
	require.NoError(t, printVersion(&buf, v, DefaultInstallNamespace, false, ""))
	require.Contains(t, buf.String(), "lull-agent: v0.2.0 (image lull.dev/lull-agent:v0.2.0; 2/3 ready; namespace lull-system)")
}
