package budget

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// Red team of 93f424e (Ledger.SettledAt for the recovery gate).

// Attack: SettledAt racing Settled, took (a slot taken again) and
// settledUIDs (which deletes expired entries) from many workers, the
// clock moving meanwhile. Run with -race. Holds: every access is under
// l.mu, and a request once taken again is never reported settled.
func TestRedteamSettledAtRaces(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	l := &Ledger{Clock: clk}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				uid := types.UID(fmt.Sprintf("u%d", (w*500+i)%64))
				switch i % 5 {
				case 0:
					l.Settled(uid)
				case 1:
					l.SettledAt(uid)
				case 2:
					l.settledUIDs()
				case 3:
					l.took(string(uid), uid)
				case 4:
					clk.Step(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	l.Settled("x")
	l.took("nx", "x")
	_, ok := l.SettledAt("x")
	require.False(t, ok)
}

// Attack: a request settled, then taking its slot again (restarted under
// the gates after a lease wait) and finishing again: SettledAt reports the
// second end, not the first. Holds.
func TestRedteamSettledAtReportsTheLatestEnd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	l := &Ledger{Clock: clk}
	l.Settled("a")
	clk.Step(10 * time.Second)
	l.took("n", "a")
	clk.Step(20 * time.Second)
	l.Settled("a")
	at, ok := l.SettledAt("a")
	require.True(t, ok)
	require.Equal(t, clk.Now(), at)
}
