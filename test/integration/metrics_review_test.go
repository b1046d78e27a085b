package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/serving"
)

// TestMetricsReviewsAgainstTheAPIServer serves a handler behind lull's
// metrics filter (internal/serving.Reviews) built from a real API server's
// config, as lull-drainer and lull-agent do, and scrapes it with tokens
// the API server issued: no token or a forged one is 401, a ServiceAccount
// without the right to get /metrics is 403 (and so is the scraper on
// another path), and one bound to a ClusterRole allowing it is served.
func TestMetricsReviewsAgainstTheAPIServer(t *testing.T) {
	ctx := t.Context()
	cs := cp.Clientset
	tokens := accountTokens(t, "metrics-review", "scraper", "nobody")
	scraper, nobody := tokens[0], tokens[1]
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-review-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-review-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "metrics-review"}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	filter, err := serving.ReviewsProvider(cp.Config, httpClient)
	require.NoError(t, err)
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "lull_up 1\n") }))
	require.NoError(t, err)
	srv := httptest.NewServer(h) // loopback
	t.Cleanup(srv.Close)

	get := func(ctx context.Context, path, auth string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"a forged token", "/metrics", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl", http.StatusUnauthorized},
		{"a ServiceAccount without the right", "/metrics", "Bearer " + nobody, http.StatusForbidden},
		{"the scraper elsewhere", "/debug/pprof/", "Bearer " + scraper, http.StatusForbidden},
	} {
		code, body := get(ctx, tc.path, tc.auth)
		require.Equal(t, tc.want, code, "%s: %s", tc.name, body)
	}
	// RBAC is read from the API server's cache: the binding may take a
	// moment to count.
	var code int
	var body string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, body = get(ctx, "/metrics", "Bearer "+scraper)
		return code == http.StatusOK, nil
	}), "the scraper: %d %s", code, body)
	require.Equal(t, "lull_up 1\n", body)
}

// accountTokens creates namespace ns and its ServiceAccounts accounts, and
// returns a token the API server issued for each (10 minutes), in order.
func accountTokens(t *testing.T, ns string, accounts ...string) []string {
	t.Helper()
	ctx, cs := t.Context(), cp.Clientset
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var out []string
	for _, sa := range accounts {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		require.NoError(t, err)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		out = append(out, tr.Status.Token)
	}
	return out
}
