package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"lull.dev/lull/internal/serving"
)

// Red team (metrics reviews): lull-drainer's real secure metrics server
// (serving.Metrics, ReviewsProvider from the API server's config) and a
// ServiceAccount token allowed nothing. Each request whose HTTP method is
// ~1 MB is refused (403: the real API server answers the
// SubjectAccessReview with the 1 MB verb, it does not error), and the
// refusal is cached keyed by that verb: the process's heap grows by about
// a megabyte per request, up to 4,096 entries (~4 GB) refreshed every
// 10 s. docs/security.md: "a caller ... grows no memory". Fixed: a method
// but GET is refused (405) before any review, and the cache's keys are
// fixed-size hashes.
func TestMetricsReviewsRedteamLongMethodsGrowTheHeap(t *testing.T) {
	ctx := t.Context()
	token := accountTokens(t, "metrics-review-redteam", "anyone")[0]

	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	srv, err := metricsserver.NewServer(serving.Metrics("127.0.0.1:0", true, ""), cp.Config, httpClient)
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		addr = srv.(interface{ GetBindAddr() string }).GetBindAddr()
		return addr != "", nil
	}))

	send := func(method string) int {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		_, err = fmt.Fprintf(c, "%s /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer %s\r\n\r\n", method, token)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, send("GET"), "the ServiceAccount may not get /metrics")

	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const n = 24
	for i := range n {
		method := fmt.Sprintf("%s%06d", strings.Repeat("X", 1_000_000-6), i)
		require.Equal(t, http.StatusMethodNotAllowed, send(method), "request %d", i)
	}
	after := heap()
	grown := int64(after) - int64(before)
	t.Logf("heap before %d MB, after %d requests with 1 MB methods %d MB: +%d MB retained (~%d MB at 4,096 entries)",
		before>>20, n, after>>20, grown>>20, grown/n*4096>>20)
	runtime.KeepAlive(srv)
	require.Less(t, grown, int64(8<<20), "the metrics filter keeps ~1 MB per refused request (the access cache's key holds the method)")
}
