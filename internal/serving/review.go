package serving

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long the API server's answers about a caller are kept: those of
// controller-runtime's filter (metrics/filters), which this replaces, except
// a refusal of access (30 s there), kept shorter so that a binding just made
// takes effect sooner. A token that failed is asked again after
// failedTokenTTL, so a caller cannot make lull ask the API server more
// than once per token in that time.
const (
	tokenTTL       = time.Minute
	failedTokenTTL = 10 * time.Second
	allowTTL       = 5 * time.Minute
	denyTTL        = 10 * time.Second
	// reviewTimeout bounds one TokenReview or SubjectAccessReview.
	reviewTimeout = 10 * time.Second
	// maxCached bounds each cache: a caller sending many different tokens
	// fills it, and then every expired entry goes; when none has expired,
	// the answer is not kept (each such request costs a review). Keys are
	// fixed-size hashes, so the bound is one of memory too.
	maxCached = 4096
	// maxReviewing bounds the reviews in flight at once: a request that
	// needs one beyond it is answered 429 without asking the API server
	// (answers already cached are served whatever the load).
	maxReviewing = 32
)

// Reviews is the metrics endpoint's authentication and authorization:
// a request's bearer token is checked with a TokenReview, and the user it
// names must be allowed to get the request's path (a non-resource URL,
// /metrics) by a SubjectAccessReview: what the API server's own
// delegated authentication and authorization do, and what
// controller-runtime's metrics/filters does (lull's own, because that
// package links k8s.io/apiserver's whole authentication stack into
// lull-drainer: 20 MB of binary, most of it mapped in at run time;
// docs/performance.md). Only bearer tokens are accepted: no client
// certificates, no anonymous access. Answers are cached for the TTLs
// above, keyed by the token's SHA-256 (the token itself is not kept).
type Reviews struct {
	Tokens authenticationclient.TokenReviewInterface
	Access authorizationclient.SubjectAccessReviewInterface
	Clock  clock.PassiveClock

	mu        sync.Mutex
	users     map[[sha256.Size]byte]userEntry
	access    map[[sha256.Size]byte]accessEntry
	reviewing int
}

type userEntry struct {
	user    *authenticationv1.UserInfo // nil: the token is not valid
	expires time.Time
}

type accessEntry struct {
	allowed bool
	reason  string
	expires time.Time
}

// ReviewsProvider builds the metrics server's filter from the manager's
// REST config (metricsserver.Options.FilterProvider).
func ReviewsProvider(c *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationclient.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, err
	}
	r := &Reviews{Tokens: authn.TokenReviews(), Access: authz.SubjectAccessReviews(), Clock: clock.RealClock{}}
	return r.Filter, nil
}

// Filter wraps handler: 405 for a method but GET (metrics are read, and a
// method is a verb the API server would be asked about: a caller's
// megabyte-long method was a cache key), 401 without a valid bearer
// token, 403 for a user not allowed to get the path, 429 when too many
// reviews are in flight, 500 when the API server could not be asked;
// handler otherwise.
func (r *Reviews) Filter(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearer(req)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		key := sha256.Sum256([]byte(token))
		user, err := r.authenticate(req.Context(), key, token)
		if errors.Is(err, errBusy) {
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
			return
		}
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		const verb = "get"
		allowed, reason, err := r.authorize(req.Context(), verb, req.URL.Path, user)
		if errors.Is(err, errBusy) {
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
			return
		}
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			log.V(4).Info("Authorization denied", "user", user.Username, "verb", verb, "path", req.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Authorization denied for user %s", user.Username), http.StatusForbidden)
			return
		}
		// The credential is not the handler's to see.
		req.Header.Del("Authorization")
		handler.ServeHTTP(w, req)
	}), nil
}

// bearer returns the request's bearer token (RFC 6750: the scheme is
// case-insensitive); ok is false when there is none.
func bearer(req *http.Request) (string, bool) {
	h := strings.TrimSpace(req.Header.Get("Authorization"))
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate returns the user the token belongs to; nil when the API
// server says it is not valid.
func (r *Reviews) authenticate(ctx context.Context, key [sha256.Size]byte, token string) (*authenticationv1.UserInfo, error) {
	now := r.Clock.Now()
	r.mu.Lock()
	e, ok := r.users[key]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.user, nil
	}
	if !r.startReview() {
		return nil, errBusy
	}
	defer r.endReview()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := r.Tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("reviewing a token: %w", err)
	}
	e = userEntry{expires: now.Add(failedTokenTTL)}
	if tr.Status.Authenticated && tr.Status.Error == "" {
		u := tr.Status.User
		e = userEntry{user: &u, expires: now.Add(tokenTTL)}
	}
	r.mu.Lock()
	if r.users == nil {
		r.users = map[[sha256.Size]byte]userEntry{}
	}
	keep(r.users, key, e, now, func(e userEntry) time.Time { return e.expires })
	r.mu.Unlock()
	return e.user, nil
}

// authorize reports whether user may do verb on the non-resource URL
// path. Answers are keyed by everything the review asks about (the user's
// name, UID, groups and extra, the verb, the path): a token whose user
// changed (a group taken away) is asked about again.
func (r *Reviews) authorize(ctx context.Context, verb, path string, user *authenticationv1.UserInfo) (bool, string, error) {
	k := accessKeyOf(user, verb, path)
	now := r.Clock.Now()
	r.mu.Lock()
	e, ok := r.access[k]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.allowed, e.reason, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for name, v := range user.Extra {
		extra[name] = authorizationv1.ExtraValue(v)
	}
	if !r.startReview() {
		return false, "", errBusy
	}
	defer r.endReview()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := r.Access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("reviewing access to %s: %w", path, err)
	}
	st := sar.Status
	if st.EvaluationError != "" && !st.Allowed {
		// Refused with an error: not a decision to keep.
		return false, st.EvaluationError, nil
	}
	e = accessEntry{allowed: st.Allowed && !st.Denied, reason: st.Reason, expires: now.Add(denyTTL)}
	if e.allowed {
		e.expires = now.Add(allowTTL)
	}
	r.mu.Lock()
	if r.access == nil {
		r.access = map[[sha256.Size]byte]accessEntry{}
	}
	keep(r.access, k, e, now, func(e accessEntry) time.Time { return e.expires })
	r.mu.Unlock()
	return e.allowed, e.reason, nil
}

// errBusy: maxReviewing reviews are in flight already.
var errBusy = errors.New("too many reviews in flight")

// startReview takes one of the maxReviewing review slots; false when none
// is free.
func (r *Reviews) startReview() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reviewing >= maxReviewing {
		return false
	}
	r.reviewing++
	return true
}

func (r *Reviews) endReview() {
	r.mu.Lock()
	r.reviewing--
	r.mu.Unlock()
}

// accessKeyOf hashes what a SubjectAccessReview asks about: every field
// length-prefixed, groups and extra in a fixed order.
func accessKeyOf(user *authenticationv1.UserInfo, verb, path string) [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(user.Username)
	field(user.UID)
	groups := slices.Clone(user.Groups)
	slices.Sort(groups)
	field(fmt.Sprint(len(groups)))
	for _, g := range groups {
		field(g)
	}
	names := slices.Sorted(maps.Keys(user.Extra))
	field(fmt.Sprint(len(names)))
	for _, name := range names {
		field(name)
		vs := user.Extra[name]
		field(fmt.Sprint(len(vs)))
		for _, v := range vs {
			field(v)
		}
	}
	field(verb)
	field(path)
	var k [sha256.Size]byte
	copy(k[:], h.Sum(nil))
	return k
}

// keep stores v under k in m, bounded by maxCached: a full map first
// drops its expired entries, and when none has, v is not kept.
func keep[K comparable, V any](m map[K]V, k K, v V, now time.Time, expires func(V) time.Time) {
	if _, ok := m[k]; !ok && len(m) >= maxCached {
		for old, e := range m {
			if !now.Before(expires(e)) {
				delete(m, old)
			}
		}
		if len(m) >= maxCached {
			return
		}
	}
	m[k] = v
}
