package serving

// Red-team tests of Reviews (commit 810782a): what docs/security.md
// ("Metrics") promises: nobody reads what the filter guards without a token
// whose user may get the path; a caller cannot make the component grow
// memory or CPU without bound; no cached "allowed" for a token, user, path
// or verb never allowed.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// rtEnv is a fake API server whose answers the test sets per call, and the
// Reviews under test (exposed, to look at its caches).
type rtEnv struct {
	mu sync.Mutex
	// tokenStatus answers a TokenReview for a token; nil: not authenticated.
	tokenStatus func(token string) *authenticationv1.TokenReviewStatus
	// sarStatus answers a SubjectAccessReview.
	sarStatus    func(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus
	tokensAsked  []string
	sars         []authorizationv1.SubjectAccessReviewSpec
	tokenReviews atomic.Int64
	clock        *clocktesting.FakeClock
	r            *Reviews
	server       http.Handler
}

func newRTEnv(t *testing.T) *rtEnv {
	t.Helper()
	e := &rtEnv{clock: clocktesting.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))}
	users := map[string]authenticationv1.UserInfo{
		"scraper-token": {Username: "system:serviceaccount:monitoring:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts"}},
		"nobody-token":  {Username: "nobody", Groups: []string{"system:authenticated"}},
	}
	e.tokenStatus = func(token string) *authenticationv1.TokenReviewStatus {
		if u, ok := users[token]; ok {
			return &authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
		}
		return nil
	}
	e.sarStatus = func(s authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		// RBAC as lull-metrics-reader: get on /metrics, for the scraper only.
		na := s.NonResourceAttributes
		return authorizationv1.SubjectAccessReviewStatus{Allowed: s.User == "system:serviceaccount:monitoring:prometheus" &&
			na != nil && na.Path == "/metrics" && na.Verb == "get"}
	}
	cs := kubefake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		e.tokenReviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		e.mu.Lock()
		e.tokensAsked = append(e.tokensAsked, tr.Spec.Token)
		f := e.tokenStatus
		e.mu.Unlock()
		if st := f(tr.Spec.Token); st != nil {
			tr.Status = *st
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		e.mu.Lock()
		e.sars = append(e.sars, sar.Spec)
		f := e.sarStatus
		e.mu.Unlock()
		sar.Status = f(sar.Spec)
		return true, sar, nil
	})
	e.r = &Reviews{Tokens: cs.AuthenticationV1().TokenReviews(), Access: cs.AuthorizationV1().SubjectAccessReviews(), Clock: e.clock}
	h, err := e.r.Filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "metrics") }))
	require.NoError(t, err)
	e.server = h
	return e
}

func (e *rtEnv) do(req *http.Request) int {
	w := httptest.NewRecorder()
	e.server.ServeHTTP(w, req)
	return w.Code
}

func (e *rtEnv) get(path, auth string) int {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return e.do(req)
}

func (e *rtEnv) sarCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sars)
}

// accessEntries is how many answers the access cache holds (its keys are
// fixed-size hashes).
func (e *rtEnv) accessEntries() int {
	e.r.mu.Lock()
	defer e.r.mu.Unlock()
	return len(e.r.access)
}

// startMetricsServer serves lull's own secure metrics options
// (serving.Metrics: controller-runtime's server, its mux, its http.Server
// limits, TLS with HTTP/1.1 only) on loopback with e's filter, and returns
// the address.
func startMetricsServer(t *testing.T, e *rtEnv) string {
	t.Helper()
	opts := Metrics("127.0.0.1:0", true, "")
	opts.FilterProvider = func(*rest.Config, *http.Client) (metricsserver.Filter, error) { return e.r.Filter, nil }
	srv, err := metricsserver.NewServer(opts, &rest.Config{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		addr = srv.(interface{ GetBindAddr() string }).GetBindAddr()
		return addr != "", nil
	}))
	return addr
}

// rawRequest sends one HTTP/1.1 request line and headers over TLS as
// written (no client-side validation) and returns the status code.
func rawRequest(t *testing.T, addr, method, target string, headers ...string) int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n", method, target)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	_, err = c.Write([]byte(b.String()))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// RT-1. Any authenticated user (here one allowed nothing, as any pod's
// ServiceAccount token is) can make each access-cache entry hold ~1 MB:
// the HTTP method is the SubjectAccessReview's verb and a key of the
// access cache, net/http accepts a method as long as MaxHeaderBytes (1 MiB)
// allows, and controller-runtime's mux routes /metrics for every method.
// 4,096 entries × ~1 MB ≈ 4 GB, each kept for denyTTL (10 s): refreshing
// needs ~400 requests/s. docs/security.md says the caches "grow no memory".
// Fixed: a method but GET is refused (405) before any review, and the
// access cache's keys are fixed-size hashes.
func TestRedteamLongMethodsGrowTheAccessCache(t *testing.T) {
	e := newRTEnv(t)
	addr := startMetricsServer(t, e)

	require.Equal(t, http.StatusUnauthorized, rawRequest(t, addr, "GET", "/metrics"), "the real server is up and guarded")
	const n = 16
	const methodLen = 1_000_000
	for i := range n {
		method := fmt.Sprintf("%s%06d", strings.Repeat("X", methodLen-6), i)
		code := rawRequest(t, addr, method, "/metrics", "Authorization: Bearer nobody-token")
		require.Equal(t, http.StatusMethodNotAllowed, code, "request %d", i)
	}
	require.Zero(t, e.sarCount(), "the API server is not asked about a method but GET")
	require.Zero(t, e.tokenReviews.Load())
	require.Zero(t, e.accessEntries())
}

// RT-2. The access cache is keyed by the token, not by the user the
// TokenReview returns: when the token's user loses a group (webhook/OIDC
// authenticators re-evaluate groups; the token is re-reviewed every
// tokenTTL) the allowed answer given for the old groups is still served for
// up to allowTTL. controller-runtime's (k8s.io/apiserver's) webhook
// authorizer keyed its cache on the whole SubjectAccessReview spec (user,
// UID, groups, extra, verb, path), so a changed user was asked again.
func TestRedteamGroupsRemovedStillServedFromCache(t *testing.T) {
	e := newRTEnv(t)
	groups := []string{"system:authenticated", "metrics-readers"}
	e.tokenStatus = func(token string) *authenticationv1.TokenReviewStatus {
		if token != "oidc-token" {
			return nil
		}
		return &authenticationv1.TokenReviewStatus{Authenticated: true,
			User: authenticationv1.UserInfo{Username: "alice", Groups: append([]string(nil), groups...)}}
	}
	e.sarStatus = func(s authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		for _, g := range s.Groups {
			if g == "metrics-readers" && s.NonResourceAttributes.Path == "/metrics" && s.NonResourceAttributes.Verb == "get" {
				return authorizationv1.SubjectAccessReviewStatus{Allowed: true}
			}
		}
		return authorizationv1.SubjectAccessReviewStatus{}
	}
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer oidc-token"))

	e.mu.Lock()
	groups = []string{"system:authenticated"} // alice left metrics-readers
	e.mu.Unlock()
	e.clock.Step(tokenTTL) // the token is reviewed again and names alice without the group
	code := e.get("/metrics", "Bearer oidc-token")
	require.Equal(t, int64(2), e.tokenReviews.Load(), "the token was re-reviewed")
	require.Equal(t, http.StatusForbidden, code,
		"the user the API server now names (groups %v) was never allowed, yet the answer cached for the old groups is served (%d SARs asked)",
		groups, e.sarCount())
}

// RT-3. Header parsing: only "Bearer <token>" in the Authorization header
// counts; nothing in a query, a cookie, another header, or after a tab.
func TestRedteamHeaderParsing(t *testing.T) {
	e := newRTEnv(t)
	for _, tc := range []struct {
		name string
		set  func(*http.Request)
		want int
	}{
		{"tab after the scheme", func(r *http.Request) { r.Header.Set("Authorization", "Bearer\tscraper-token") }, http.StatusUnauthorized},
		{"query parameter", func(r *http.Request) { r.URL.RawQuery = "access_token=scraper-token" }, http.StatusUnauthorized},
		{"cookie", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "token", Value: "scraper-token", Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		}, http.StatusUnauthorized},
		{"proxy-authorization", func(r *http.Request) { r.Header.Set("Proxy-Authorization", "Bearer scraper-token") }, http.StatusUnauthorized},
		{"X-Forwarded identity", func(r *http.Request) {
			r.Header.Set("X-Remote-User", "system:serviceaccount:monitoring:prometheus")
			r.Header.Set("Impersonate-User", "system:serviceaccount:monitoring:prometheus")
		}, http.StatusUnauthorized},
		{"second header carries the good token", func(r *http.Request) {
			r.Header.Add("Authorization", "Bearer nobody-token")
			r.Header.Add("Authorization", "Bearer scraper-token")
		}, http.StatusForbidden},
		{"uppercase scheme", func(r *http.Request) { r.Header.Set("Authorization", "BEARER scraper-token") }, http.StatusOK},
		{"nbsp after scheme", func(r *http.Request) { r.Header.Set("Authorization", "Bearer\u00a0scraper-token") }, http.StatusUnauthorized},
		{"token with trailing garbage", func(r *http.Request) { r.Header.Set("Authorization", "Bearer scraper-token x") }, http.StatusUnauthorized},
	} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		tc.set(req)
		require.Equal(t, tc.want, e.do(req), tc.name)
	}
	// Differences from k8s.io/apiserver's bearertoken (SplitN(" ", 3), token
	// = parts[1]): "Bearer  t" (two spaces) is a token there refused, here
	// accepted; "Bearer a b" is "a" there, "a b" here. Neither lets a
	// token through that the API server did not vouch for.
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer   scraper-token"), "extra spaces are trimmed (apiserver refused)")
	e.mu.Lock()
	asked := append([]string(nil), e.tokensAsked...)
	e.mu.Unlock()
	require.Contains(t, asked, "scraper-token x", "the whole rest of the header is the token (apiserver: up to the next space)")
}

// RT-4. Paths and verbs: each distinct path and method is asked about;
// normalised or encoded forms of /metrics do not reuse /metrics's answer,
// and a token allowed GET is not thereby allowed HEAD, POST or "Get".
func TestRedteamPathsAndVerbsAreAskedSeparately(t *testing.T) {
	e := newRTEnv(t)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	for _, p := range []string{"/metrics/", "//metrics", "/./metrics", "/%2Fmetrics", "/metrics/..", "/METRICS", "/metrics%00"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		u, err := url.ParseRequestURI(p) // as net/http's server parses the request target: no dot-segment resolution
		require.NoError(t, err, p)
		req.URL = u
		req.Header.Set("Authorization", "Bearer scraper-token")
		require.Equal(t, http.StatusForbidden, e.do(req), "%q (Path %q)", p, u.Path)
	}
	// The query is not part of the authorization, as in apiserver.
	require.Equal(t, http.StatusOK, e.get("/metrics?name[]=x", "Bearer scraper-token"))
	// A method but GET is refused before any review.
	n := e.sarCount()
	for _, m := range []string{http.MethodHead, http.MethodPost, "PROPFIND", "get"} {
		req := httptest.NewRequest(m, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer scraper-token")
		require.Equal(t, http.StatusMethodNotAllowed, e.do(req), m)
	}
	require.Equal(t, n, e.sarCount())
	// Another token of a user asked about before is answered from the
	// cache (the answer is the user's, not the token's); a user never
	// asked about is asked about.
	n = e.sarCount()
	e.tokenStatus = func(token string) *authenticationv1.TokenReviewStatus {
		return &authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "nobody"}}
	}
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer another-token"))
	require.Equal(t, n+1, e.sarCount())
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer a-third-token"))
	require.Equal(t, n+1, e.sarCount(), "the same user, the same answer")
}

// RT-5. Unusual review statuses.
func TestRedteamReviewStatuses(t *testing.T) {
	// Allowed and Denied both set: refused (apiserver: deny with an error).
	e := newRTEnv(t)
	e.sarStatus = func(authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true}
	}
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer scraper-token"))

	// Authenticated with an Error: refused (apiserver accepted it).
	e = newRTEnv(t)
	e.tokenStatus = func(string) *authenticationv1.TokenReviewStatus {
		return &authenticationv1.TokenReviewStatus{Authenticated: true, Error: "partial", User: authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}}
	}
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer scraper-token"))
	require.Zero(t, e.sarCount())

	// Not authenticated but a user filled in: refused, no SAR.
	e = newRTEnv(t)
	e.tokenStatus = func(string) *authenticationv1.TokenReviewStatus {
		return &authenticationv1.TokenReviewStatus{User: authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}}
	}
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer scraper-token"))
	require.Zero(t, e.sarCount())

	// A token valid, then revoked: served until tokenTTL, 401 after, even
	// though the allowed answer is still cached.
	e = newRTEnv(t)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	e.tokenStatus = func(string) *authenticationv1.TokenReviewStatus { return nil }
	e.clock.Step(tokenTTL - time.Second)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	e.clock.Step(time.Second)
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer scraper-token"))
}

// RT-6. Concurrency: N simultaneous requests with one uncached token each
// make their own TokenReview (k8s.io/apiserver's cached authenticator
// coalesced them with singleflight into one). One review per request is
// what the docs promise; this records the difference, and checks the race
// detector finds nothing in the caches.
func TestRedteamConcurrentRequestsOneTokenAreNotCoalesced(t *testing.T) {
	e := newRTEnv(t)
	// The fake clientset serialises reactors under one lock: a TokenReview
	// client of its own lets the reviews overlap as a real API server does.
	bt := &blockingTokens{release: make(chan struct{})}
	e.r.Tokens = bt
	const n = 32
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() { codes[i] = e.get("/metrics", "Bearer junk") })
	}
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 3*time.Second, true, func(context.Context) (bool, error) {
		return bt.calls.Load() == n, nil
	})
	close(bt.release)
	wg.Wait()
	for _, c := range codes {
		require.Equal(t, http.StatusUnauthorized, c)
	}
	t.Logf("%d concurrent requests with one token: %d TokenReviews in flight at once (apiserver's singleflight: 1)", n, bt.calls.Load())
	require.NoError(t, err, "one TokenReview per request, all at once")
}

type blockingTokens struct {
	authenticationclient.TokenReviewInterface
	release chan struct{}
	calls   atomic.Int64
}

func (b *blockingTokens) Create(ctx context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := tr.DeepCopy()
	out.Status.Error = "invalid bearer token"
	return out, nil
}

// RT-7. A full access cache: any authenticated user fills it with 4,096
// refusals (distinct paths, 10 s each) and the scraper's allowed answer,
// once expired, is no longer kept: each scrape then costs a SAR, and each
// new entry costs a scan of the whole map under the one mutex. Documented
// ("the answer is not kept"); recorded here.
func TestRedteamFullAccessCacheCostsTheScraperASARPerScrape(t *testing.T) {
	e := newRTEnv(t)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	e.clock.Step(allowTTL)
	for i := range maxCached {
		req := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/metrics/%d", i), nil)
		req.Header.Set("Authorization", "Bearer nobody-token")
		require.Equal(t, http.StatusForbidden, e.do(req))
	}
	n := e.sarCount()
	for range 5 {
		require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	}
	t.Logf("5 scrapes with the access cache full of another user's refusals: %d SARs", e.sarCount()-n)
	require.Equal(t, n+5, e.sarCount())
}
