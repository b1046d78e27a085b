// Command graceful is the process of the lull.dev/e2e-graceful test image
// (hack/images.sh e2e-graceful): a long-lived container that takes its time
// to stop, so tests on a real kubelet node can check that a drain honours a
// pod's termination grace period.
//
// It prints its pid on start, serves `GET /` with 200 on :8080 (a readiness
// probe; LISTEN_ADDR overrides the address), and on SIGTERM or SIGINT waits
// GRACEFUL_DELAY (a Go duration, default 3s) and then exits 0, printing
// when the signal came and when it leaves. A kubelet that kills it before
// the delay is over shows up as exit code 137 and no "exiting" line.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	log.SetPrefix("graceful: ")
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	delay := 3 * time.Second
	if v := os.Getenv("GRACEFUL_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("GRACEFUL_DELAY=%q: want a non-negative Go duration such as 3s", v)
		}
		delay = d
	}
	addr := os.Getenv("LISTEN_ADDR")
	if addr == "" {
		addr = ":8080"
	}

	// Subscribe before announcing ourselves, so a signal sent right after
	// the pid line is never lost.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	fmt.Printf("graceful: pid %d listening on %s, GRACEFUL_DELAY=%s\n", os.Getpid(), ln.Addr(), delay)

	select {
	case sig := <-sigs:
		log.Printf("got %s, exiting in %s", sig, delay)
	case err := <-served:
		return fmt.Errorf("http server stopped: %w", err)
	}
	// Keep answering probes while we wait: only the delay decides when we go.
	time.Sleep(delay)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Printf("http shutdown: %v", err)
	}
	log.Printf("exiting 0 after %s", delay)
	return nil
}
