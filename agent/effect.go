package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// settle reads a step's effect after its command until judge says it is
// done (a message) or failed (an error): at once, then every 200ms on c's
// clock, since a command may queue the job without waiting for it
// (systemctl --no-block). judge is told when the read is the last one, at
// least Settle after the first (final): it must then decide. A read that
// fails, and ctx ending, end the wait.
func settle[S any](ctx context.Context, c *Commands, read func() (S, error), judge func(s S, final bool) (string, error)) (string, error) {
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	tick := clk.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	until := clk.Now().Add(c.settle())
	for {
		s, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err() // the read was killed at the deadline
			}
			return "", err
		}
		final := !clk.Now().Before(until)
		msg, err := judge(s, final)
		switch {
		case err != nil || msg != "":
			return msg, err
		case final:
			return "", fmt.Errorf("the step's effect was not seen within %s", c.settle())
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C():
		}
	}
}

func (c *Commands) settle() time.Duration {
	if c.Settle <= 0 {
		return 10 * time.Second
	}
	return c.Settle
}

// verified is a verified step's output: what its command printed last,
// then what was seen of its effect.
func verified(out, msg string, err error) (string, error) {
	if err != nil {
		return out, err
	}
	if out != "" {
		msg = out + "; " + msg
	}
	return msg, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// listUnits names units for a message: the first five, then how many
// more.
func listUnits(units []string) string {
	const shown = 5
	if len(units) <= shown {
		return strings.Join(units, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(units[:shown], ", "), len(units)-shown)
}
