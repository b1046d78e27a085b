package serving

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// reviewEnv is an API server answering TokenReviews from tokens (token →
// user; absent: not authenticated) and SubjectAccessReviews from allowed
// (user → paths it may get), counting both.
type reviewEnv struct {
	tokens           map[string]authenticationv1.UserInfo
	allowed          map[string][]string
	tokenErr, sarErr error
	evaluationError  string
	tokenReviews     int
	sars             []authorizationv1.SubjectAccessReviewSpec
	clock            *clocktesting.FakeClock
	handlerSaw       http.Header
	server           http.Handler
	reviews          *Reviews
}

func newReviewEnv(t *testing.T) *reviewEnv {
	t.Helper()
	e := &reviewEnv{tokens: map[string]authenticationv1.UserInfo{
		"scraper-token": {Username: "system:serviceaccount:monitoring:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts"},
			Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}},
		"nobody-token": {Username: "nobody"},
	}, allowed: map[string][]string{"system:serviceaccount:monitoring:prometheus": {"/metrics"}},
		clock: clocktesting.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))}
	cs := kubefake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		e.tokenReviews++
		if e.tokenErr != nil {
			return true, nil, e.tokenErr
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if u, ok := e.tokens[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		e.sars = append(e.sars, sar.Spec)
		if e.sarErr != nil {
			return true, nil, e.sarErr
		}
		if e.evaluationError != "" {
			sar.Status = authorizationv1.SubjectAccessReviewStatus{EvaluationError: e.evaluationError}
			return true, sar, nil
		}
		for _, p := range e.allowed[sar.Spec.User] {
			if sar.Spec.NonResourceAttributes != nil && p == sar.Spec.NonResourceAttributes.Path && sar.Spec.NonResourceAttributes.Verb == "get" {
				sar.Status.Allowed = true
			}
		}
		return true, sar, nil
	})
	r := &Reviews{Tokens: cs.AuthenticationV1().TokenReviews(), Access: cs.AuthorizationV1().SubjectAccessReviews(), Clock: e.clock}
	e.reviews = r
	h, err := r.Filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		e.handlerSaw = req.Header.Clone()
		_, _ = fmt.Fprint(w, "metrics")
	}))
	require.NoError(t, err)
	e.server = h
	return e
}

// get sends GET path with the Authorization header auth ("" for none) and
// returns the status.
func (e *reviewEnv) get(path, auth string) int {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	e.server.ServeHTTP(w, req)
	return w.Code
}

func TestReviewsRefuseWithoutAValidToken(t *testing.T) {
	e := newReviewEnv(t)
	for _, auth := range []string{"", "Basic c2NyYXBlcjpwdw==", "Bearer", "Bearer    ", "scraper-token", "Token scraper-token"} {
		require.Equal(t, http.StatusUnauthorized, e.get("/metrics", auth), "%q", auth)
	}
	require.Zero(t, e.tokenReviews, "nothing to review without a bearer token")
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer forged"))
	require.Equal(t, 1, e.tokenReviews)
	require.Nil(t, e.handlerSaw, "the handler never ran")
}

func TestReviewsServeOnlyUsersAllowedThePath(t *testing.T) {
	e := newReviewEnv(t)
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer nobody-token"))
	require.Equal(t, http.StatusOK, e.get("/metrics", "bearer scraper-token"), "the scheme is case-insensitive")
	require.NotContains(t, e.handlerSaw, "Authorization", "the credential is not passed on")
	require.Equal(t, http.StatusForbidden, e.get("/debug/pprof/", "Bearer scraper-token"), "each path is asked for")
	// What the API server was asked: the user as the TokenReview named it.
	last := e.sars[1]
	require.Equal(t, "system:serviceaccount:monitoring:prometheus", last.User)
	require.Equal(t, "u1", last.UID)
	require.Equal(t, []string{"system:serviceaccounts"}, last.Groups)
	require.Equal(t, authorizationv1.ExtraValue{"prometheus-0"}, last.Extra["authentication.kubernetes.io/pod-name"])
	require.Equal(t, &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}, last.NonResourceAttributes)
	require.Nil(t, last.ResourceAttributes)

	req := httptest.NewRequest(http.MethodPost, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer scraper-token")
	w := httptest.NewRecorder()
	e.server.ServeHTTP(w, req)
	require.Equal(t, http.StatusMethodNotAllowed, w.Code, "metrics are only read: no review for another method")
	require.Len(t, e.sars, 3)
}

// More than maxReviewing reviews in flight at once: the next request that
// needs one is answered 429 without asking; cached answers are served.
func TestReviewsBoundTheReviewsInFlight(t *testing.T) {
	e := newReviewEnv(t)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	r := e.reviews
	r.mu.Lock()
	r.reviewing = maxReviewing
	r.mu.Unlock()
	n := e.tokenReviews
	require.Equal(t, http.StatusTooManyRequests, e.get("/metrics", "Bearer another-token"))
	require.Equal(t, n, e.tokenReviews)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"), "a cached answer needs no review")
	r.mu.Lock()
	r.reviewing = 0
	r.mu.Unlock()
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer another-token"))
}

// Answers are kept for their TTLs: a scrape every 15 s costs no review
// within them, and a refusal or a token that failed is asked again soon.
func TestReviewsCacheAnswers(t *testing.T) {
	e := newReviewEnv(t)
	for range 3 {
		require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	}
	require.Equal(t, 1, e.tokenReviews)
	require.Len(t, e.sars, 1)
	e.clock.Step(tokenTTL)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	require.Equal(t, 2, e.tokenReviews, "the token is reviewed again after its TTL")
	require.Len(t, e.sars, 1, "the access allowed is kept longer")
	e.clock.Step(allowTTL)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	require.Len(t, e.sars, 2)

	// A refusal is kept for denyTTL only: a binding made then takes effect.
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer nobody-token"))
	e.allowed["nobody"] = []string{"/metrics"}
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer nobody-token"))
	e.clock.Step(denyTTL)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer nobody-token"))

	// A token that failed is asked about again after failedTokenTTL.
	n := e.tokenReviews
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer new-token"))
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer new-token"))
	require.Equal(t, n+1, e.tokenReviews)
	e.tokens["new-token"] = authenticationv1.UserInfo{Username: "nobody"}
	e.clock.Step(failedTokenTTL)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer new-token"))
}

// The API server not answering is a 500, and not remembered.
func TestReviewsErrorsAreNotCached(t *testing.T) {
	e := newReviewEnv(t)
	e.tokenErr = errors.New("connection refused")
	require.Equal(t, http.StatusInternalServerError, e.get("/metrics", "Bearer scraper-token"))
	e.tokenErr = nil
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))

	e = newReviewEnv(t)
	e.sarErr = errors.New("connection refused")
	require.Equal(t, http.StatusInternalServerError, e.get("/metrics", "Bearer scraper-token"))
	e.sarErr = nil
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))

	// An authorizer that could not decide refuses, and is asked again.
	e = newReviewEnv(t)
	e.evaluationError = "webhook authorizer timed out"
	require.Equal(t, http.StatusForbidden, e.get("/metrics", "Bearer scraper-token"))
	e.evaluationError = ""
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
}

// A caller sending many tokens cannot grow the cache without bound, nor
// evict a valid answer before its time.
func TestReviewsCacheIsBounded(t *testing.T) {
	e := newReviewEnv(t)
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	for i := range maxCached + 100 {
		require.Equal(t, http.StatusUnauthorized, e.get("/metrics", fmt.Sprintf("Bearer junk-%d", i)))
	}
	n := e.tokenReviews
	require.Equal(t, http.StatusOK, e.get("/metrics", "Bearer scraper-token"))
	require.Equal(t, n, e.tokenReviews, "the valid token's answer was kept")
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer junk-5000"))
	require.Equal(t, n+1, e.tokenReviews, "a full cache keeps no new answer")
	// Once the junk expired, new answers are kept again.
	e.clock.Step(failedTokenTTL)
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer junk-x"))
	require.Equal(t, http.StatusUnauthorized, e.get("/metrics", "Bearer junk-x"))
	require.Equal(t, n+2, e.tokenReviews)
}
