// Command rebootd is a tool outside lull taking part in the node disruption
// lease protocol the way a reboot daemon would: acquire the node's lease
// before disrupting it, renew it while working, release it when done, and
// back off while another actor holds it. TestOutsideModule builds it in a
// module of its own that requires only lull.dev/lull/lease, and runs it
// against a fake clientset.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"lull.dev/lull/lease"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "rebootd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}})
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	// Replicas of one tool share a family ("rebootd/<host>"); another tool
	// has a family of its own.
	rebootd := lease.New(cs, lease.Options{Namespace: lease.DefaultNamespace, Clock: clk})
	upgrader := lease.New(cs, lease.Options{Namespace: lease.DefaultNamespace, Clock: clk})
	const holder = "rebootd/host-a"

	info, err := rebootd.Acquire(ctx, "n1", holder, "reboot", "kernel 6.12", 2*time.Minute)
	if err != nil {
		return fmt.Errorf("acquiring: %w", err)
	}
	fmt.Printf("acquired %s/%s by %s (family %s) for %s, token %d\n",
		info.Namespace, lease.Name(info.Node), info.Holder, lease.Family(info.Holder), info.Duration, info.Token().Transitions)

	_, err = upgrader.Acquire(ctx, "n1", "upgrader", "update", "", time.Minute)
	held, ok := lease.IsHeld(err)
	if !ok {
		return fmt.Errorf("another tool acquiring a held lease: want a HeldError, got %v", err)
	}
	fmt.Printf("upgrader waits: %v\n", held)

	clk.Step(time.Minute)
	if info, err = rebootd.Renew(ctx, "n1", holder); err != nil {
		return fmt.Errorf("renewing: %w", err)
	}
	fmt.Printf("renewed at %s\n", info.Renewed.UTC().Format(time.RFC3339))
	if _, err := upgrader.Renew(ctx, "n1", "upgrader"); !errors.Is(err, lease.ErrNotHolder) {
		return fmt.Errorf("renewing someone else's lease: want ErrNotHolder, got %v", err)
	}

	if err := rebootd.Release(ctx, "n1", holder); err != nil {
		return fmt.Errorf("releasing: %w", err)
	}
	if info, err = rebootd.Get(ctx, "n1"); err != nil || info != nil {
		return fmt.Errorf("after release: want no lease, got %+v, %v", info, err)
	}
	fmt.Println("released")

	if info, err = upgrader.Acquire(ctx, "n1", "upgrader", "update", "", time.Minute); err != nil {
		return fmt.Errorf("acquiring a released lease: %w", err)
	}
	fmt.Printf("upgrader acquired %s/%s\n", info.Namespace, lease.Name(info.Node))
	return nil
}
