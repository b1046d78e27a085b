package alerts

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Credentials reads the Secret name from lull's configuration
// namespace and hands its credentials to c only where the Secret's owner
// said they may go. Only a Secret labelled lull.dev/alerts-credentials=true
// is used (the admin's consent), and only for a gate whose URL is under the
// Secret's own url (same scheme, host and port; the Secret's path a prefix
// of the gate's, by whole segments): a window's author chooses the gate's
// URL, the Secret's owner where its token may be sent. Plain http needs
// the Secret's explicit insecure-http: "true" too. Redirects are not
// followed with credentials (drainer/alerts).
func Credentials(ctx context.Context, secrets client.Reader, namespace, name string, c *Client) error {
	var s corev1.Secret
	if err := secrets.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("Secret %s/%s with alerts credentials does not exist", namespace, name) //nolint:staticcheck // ST1005: the message starts with the kind's name, as kubectl says it
		}
		return fmt.Errorf("reading Secret %s/%s with alerts credentials: %w", namespace, name, err)
	}
	if s.Labels[lullv1alpha1.AlertsCredentialsLabel] != "true" {
		return fmt.Errorf("Secret %s/%s lacks the label %s=true that lets lull send its credentials to an alerts server", //nolint:staticcheck // ST1005: the kind's name, as kubectl says it
			namespace, name, lullv1alpha1.AlertsCredentialsLabel)
	}
	if err := CredentialsMayGo(string(s.Data[lullv1alpha1.AlertsCredentialsURLKey]), s.Data[lullv1alpha1.AlertsCredentialsInsecureKey], c.URL); err != nil {
		return fmt.Errorf("Secret %s/%s: %w", namespace, name, err) //nolint:staticcheck // ST1005: the kind's name, as kubectl says it
	}
	c.BearerToken, c.Username, c.Password = string(s.Data["token"]), string(s.Data["username"]), string(s.Data["password"])
	c.CA = s.Data["ca.crt"]
	return nil
}

// CredentialsMayGo says why credentials whose Secret names allowed (its
// url: a server or a path prefix) and insecure (its insecure-http) must
// not be sent to target, the gate's URL; nil when they may.
func CredentialsMayGo(allowed string, insecure []byte, target string) error {
	a, err := allowedURL(allowed)
	if err != nil {
		return err
	}
	t, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("the gate's url %q: %w", target, err)
	}
	if err := cleanPath(target, t); err != nil {
		return err
	}
	prefix := strings.TrimSuffix(a.EscapedPath(), "/")
	path := t.EscapedPath()
	under := path == prefix || strings.HasPrefix(path, prefix+"/") || (prefix == "" && (path == "" || strings.HasPrefix(path, "/")))
	if !strings.EqualFold(t.Scheme, a.Scheme) || !strings.EqualFold(t.Host, a.Host) || !under {
		return fmt.Errorf("its credentials may be sent only to %s (its %s), not to the gate's url %s", a.String(), lullv1alpha1.AlertsCredentialsURLKey, target)
	}
	if t.Scheme == "http" && strings.TrimSpace(string(insecure)) != "true" {
		return fmt.Errorf("its credentials would go over plain http to %s: set %s: \"true\" in the Secret to allow it, or use https",
			target, lullv1alpha1.AlertsCredentialsInsecureKey)
	}
	return nil
}

// allowedURL parses the url a credentials Secret names: an http(s) URL
// without credentials, query or fragment.
func allowedURL(allowed string) (*url.URL, error) {
	if strings.TrimSpace(allowed) == "" {
		return nil, fmt.Errorf("it names no %s: lull sends credentials only to the server the Secret's owner names there (e.g. https://prometheus.monitoring:9090)",
			lullv1alpha1.AlertsCredentialsURLKey)
	}
	a, err := url.Parse(strings.TrimSpace(allowed))
	if err != nil || (a.Scheme != "http" && a.Scheme != "https") || a.Host == "" || a.User != nil || a.RawQuery != "" || a.Fragment != "" {
		return nil, fmt.Errorf("its %s %q is not an http(s) URL without credentials, query or fragment", lullv1alpha1.AlertsCredentialsURLKey, allowed)
	}
	return a, nil
}

// cleanPath says why credentials must not go to t's path (target as
// written): a dot segment, or a character some server reads as a
// separator.
func cleanPath(target string, t *url.URL) error {
	// The request is built with url.JoinPath, which cleans dot segments
	// (%2e%2e too, once unescaped): /prometheus/../grafana would pass a
	// prefix check by name and go elsewhere.
	for _, seg := range strings.Split(t.Path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("the gate's url %s has a %q path segment: credentials go only to a clean path under the Secret's %s", target, seg, lullv1alpha1.AlertsCredentialsURLKey)
		}
	}
	// Servers normalise more than dot segments (..; in Java servlet
	// containers, backslashes, encoded slashes): a path with credentials
	// keeps to the characters no server reads as a separator.
	if strings.ContainsFunc(t.EscapedPath(), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-._~", r))
	}) {
		return fmt.Errorf("the gate's url %s has a path character other than letters, digits and /-._~: credentials are not sent to it", target)
	}
	return nil
}
