package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/version"
)

// DefaultInstallNamespace is where manifests/install and the Helm chart
// put lull-scheduler, lull-drainer and lull-agent.
const DefaultInstallNamespace = settings.Namespace

// component is one of lull's workloads; each runs a container of its name
// whose image tag is the release (manifests/install, charts/lull).
type component struct {
	name string
	kind string // Deployment or DaemonSet
}

// components are lull's workloads: the two Deployments lull is installed
// with, and lull-agent's DaemonSet (installed where host steps are used).
var components = []component{
	{name: settings.Scheduler, kind: kindDeployment},
	{name: settings.Drainer, kind: kindDeployment},
	{name: settings.Agent, kind: kindDaemonSet},
}

const (
	kindDeployment = "Deployment"
	kindDaemonSet  = "DaemonSet"
)

// versionView is what `version` prints (kind Version).
type versionView struct {
	ClientVersion clientVersion      `json:"clientVersion"`
	ServerVersion *k8sversion.Info   `json:"serverVersion,omitempty"`
	Components    []componentVersion `json:"components,omitempty"`
}

type clientVersion struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// componentVersion is what a lull Deployment (or lull-agent's DaemonSet)
// runs.
type componentVersion struct {
	Name string `json:"name"`
	// Kind of the workload: Deployment or DaemonSet.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Installed bool   `json:"installed"`
	// Version is the tag (or digest) of the workload's image.
	Version string `json:"version,omitempty"`
	Image   string `json:"image,omitempty"`
	// Running are the images its pods run, more than one during a rollout.
	Running []string `json:"running,omitempty"`
	// Replicas are the pods it wants (a DaemonSet: the nodes it should
	// run on), Ready those ready.
	Replicas int32  `json:"replicas"`
	Ready    int32  `json:"ready"`
	Error    string `json:"error,omitempty"`
}

func newVersionCommand(o *options) *cobra.Command {
	var clientOnly bool
	var namespace, output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of kubectl-lull, of lull in the cluster and of Kubernetes",
		Long: `Print kubectl-lull's version and, unless --client is given, the versions of
lull-scheduler and lull-drainer installed in the cluster (the image tags of
their Deployments, and the images their pods run), of lull-agent (its
DaemonSet, where host steps are used) and the Kubernetes server's version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o %q: version prints json or yaml (or, without -o, text)", output)
			}
			v := versionView{ClientVersion: clientVersion{Version: version.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}}
			var err error
			if !clientOnly {
				err = o.serverVersions(cmd.Context(), &v, namespace)
			}
			if perr := printVersion(o.out, v, namespace, clientOnly, output); perr != nil {
				return perr
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only kubectl-lull's version (no connection to the cluster)")
	cmd.Flags().StringVar(&namespace, "lull-namespace", DefaultInstallNamespace, "namespace lull-scheduler, lull-drainer and lull-agent are installed in")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: text)")
	return cmd
}

// serverVersions fills in the cluster's side; it returns the first error
// after reading all it can.
func (o *options) serverVersions(ctx context.Context, v *versionView, namespace string) error {
	cs, err := o.kube()
	if err != nil {
		return err
	}
	return collectServerVersions(ctx, cs, v, namespace)
}

func collectServerVersions(ctx context.Context, cs kubernetes.Interface, v *versionView, namespace string) error {
	info, err := discovery.ToDiscoveryInterfaceWithContext(cs.Discovery()).ServerVersionWithContext(ctx)
	if err != nil {
		return fmt.Errorf("reading the server's version: %w", err)
	}
	v.ServerVersion = info
	var firstErr error
	for _, comp := range components {
		c := componentOf(ctx, cs, namespace, comp)
		if c.Error != "" && firstErr == nil {
			firstErr = fmt.Errorf("reading %s in namespace %s: %s", comp.name, namespace, c.Error)
		}
		v.Components = append(v.Components, c)
	}
	return firstErr
}

// componentOf reads the workload comp in namespace and its pods' images.
func componentOf(ctx context.Context, cs kubernetes.Interface, namespace string, comp component) componentVersion {
	c := componentVersion{Name: comp.name, Kind: comp.kind, Namespace: namespace}
	spec, sel, err := workloadOf(ctx, cs, namespace, comp, &c)
	if apierrors.IsNotFound(err) {
		return c
	}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.Installed = true
	if ctr := containerOf(spec.Containers, comp.name); ctr != nil {
		c.Image, c.Version = ctr.Image, imageVersion(ctr.Image)
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		c.Error = fmt.Sprintf("the %s's selector: %v", comp.kind, err)
		return c
	}
	c.Running, err = runningImages(ctx, cs, namespace, comp.name, selector)
	if err != nil {
		c.Error = err.Error()
	}
	return c
}

// workloadOf reads the Deployment or DaemonSet comp: its pod spec and
// selector, and into c its wanted and ready pods.
func workloadOf(ctx context.Context, cs kubernetes.Interface, namespace string, comp component, c *componentVersion) (*corev1.PodSpec, *metav1.LabelSelector, error) {
	if comp.kind == kindDaemonSet {
		ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, comp.name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		c.Replicas, c.Ready = ds.Status.DesiredNumberScheduled, ds.Status.NumberReady
		return &ds.Spec.Template.Spec, ds.Spec.Selector, nil
	}
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, comp.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	c.Replicas, c.Ready = d.Status.Replicas, d.Status.ReadyReplicas
	return &d.Spec.Template.Spec, d.Spec.Selector, nil
}

// runningImages are the distinct images of the pods' container name.
func runningImages(ctx context.Context, cs kubernetes.Interface, namespace, name string, sel labels.Selector) ([]string, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		if ctr := containerOf(p.Spec.Containers, name); ctr != nil && p.Status.Phase == corev1.PodRunning {
			seen[ctr.Image] = true
		}
	}
	images := make([]string, 0, len(seen))
	for img := range seen {
		images = append(images, img)
	}
	sort.Strings(images)
	return images, nil
}

// containerOf is the container called name, or the only one.
func containerOf(ctrs []corev1.Container, name string) *corev1.Container {
	for i := range ctrs {
		if ctrs[i].Name == name {
			return &ctrs[i]
		}
	}
	if len(ctrs) == 1 {
		return &ctrs[0]
	}
	return nil
}

// imageVersion is an image reference's tag, else its digest, else
// "latest" (what a reference without either means).
func imageVersion(image string) string {
	ref, digest, hasDigest := strings.Cut(image, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	if hasDigest {
		return digest
	}
	return "latest"
}

func printVersion(w io.Writer, v versionView, namespace string, clientOnly bool, output string) error {
	if output != "" {
		obj, err := viewObject(KindVersion, "", v)
		if err != nil {
			return err
		}
		p, err := genericclioptions.NewJSONYamlPrintFlags().ToPrinter(output)
		if err != nil {
			return fmt.Errorf("-o %q: %w", output, err)
		}
		return p.PrintObj(obj, w)
	}
	fmt.Fprintf(w, "Client Version: %s\n", v.ClientVersion.Version)
	if clientOnly {
		return nil
	}
	if v.ServerVersion != nil {
		fmt.Fprintf(w, "Server Version: %s\n", v.ServerVersion.GitVersion)
	}
	printComponents(w, v.Components, namespace)
	return nil
}

func printComponents(w io.Writer, cs []componentVersion, namespace string) {
	found := false
	var deployments []string
	for _, comp := range components {
		if comp.kind == kindDeployment {
			deployments = append(deployments, comp.name)
		}
	}
	for _, c := range cs {
		found = found || (c.Kind == kindDeployment && (c.Installed || c.Error != ""))
	}
	if !found {
		fmt.Fprintf(w, "lull: not installed in namespace %s (no Deployment %s); if it is installed elsewhere, give --lull-namespace\n",
			namespace, strings.Join(deployments, " or "))
		return
	}
	for _, c := range cs {
		switch {
		case c.Error != "":
			fmt.Fprintf(w, "%s: unknown (%s)\n", c.Name, c.Error)
		case !c.Installed:
			fmt.Fprintf(w, "%s: not installed (no %s %s in namespace %s)\n", c.Name, c.Kind, c.Name, namespace)
		default:
			fmt.Fprintf(w, "%s: %s (image %s; %d/%d ready; namespace %s)\n", c.Name, dash(c.Version), dash(c.Image), c.Ready, c.Replicas, namespace)
			if len(c.Running) > 1 || (len(c.Running) == 1 && c.Running[0] != c.Image) {
				fmt.Fprintf(w, "  pods run: %s\n", strings.Join(c.Running, ", "))
			}
		}
	}
}
