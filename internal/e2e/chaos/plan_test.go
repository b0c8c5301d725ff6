package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// seedFlag replays a run: go test ./internal/e2e/chaos -args -chaos.seed=N
// (or CHAOS_SEED=N).
var seedFlag = flag.Int64("chaos.seed", 0, "seed of the chaos run (0: CHAOS_SEED, else the clock)")

// plan is the size of a run.
type plan struct {
	// Seed drives every random choice of the run.
	Seed int64
	// Proxies is how many Proxies are created (and deleted) in all;
	// MaxLive bounds how many exist at once.
	Proxies, MaxLive int
	// Speed is the simulator's speed-up: a wall second is Speed simulated
	// seconds.
	Speed float64
	// Step is the wall time between two random actions; the invariants
	// are checked every Poll.
	Step, Poll time.Duration
	// Restart is the chance per step that the operator is killed (and
	// started again one to three steps later).
	Restart float64
	// Fault is the chance per step that a fault is injected.
	Fault float64
	// KeyLosses and Hangs are how many times the ownership key is lost and
	// restored, and how many times the second entry's cluster hangs
	// (episodes_test.go); they take turns, spread over the creates.
	KeyLosses, Hangs int
}

// ciPlan is the run of `make test`: 50 Proxies in one to three minutes on
// two shared cores.
func ciPlan() plan {
	return plan{Proxies: 50, MaxLive: 14, Speed: 300, Step: 150 * time.Millisecond, Poll: 50 * time.Millisecond,
		Restart: 0.05, Fault: 0.35, KeyLosses: 1, Hangs: 1}
}

// longPlan is `make chaos` (CHAOS_LONG=1): more Proxies and restarts over a
// longer simulated period.
func longPlan() plan {
	p := ciPlan()
	p.Proxies, p.MaxLive, p.Speed = 400, 24, 200
	p.KeyLosses, p.Hangs = 3, 3
	return p
}

// planFromEnv picks the plan and the seed: -chaos.seed, else CHAOS_SEED,
// else the clock; CHAOS_LONG=1 takes the long plan and CHAOS_PROXIES
// overrides the number of Proxies.
func planFromEnv() (plan, error) {
	p := ciPlan()
	if os.Getenv("CHAOS_LONG") == "1" {
		p = longPlan()
	}
	if v := os.Getenv("CHAOS_PROXIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, fmt.Errorf("CHAOS_PROXIES=%q: want a positive number", v)
		}
		p.Proxies = n
	}
	p.Seed = *seedFlag
	if p.Seed == 0 {
		if v := os.Getenv("CHAOS_SEED"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return p, fmt.Errorf("CHAOS_SEED=%q: want a number", v)
			}
			p.Seed = n
		}
	}
	if p.Seed == 0 {
		p.Seed = time.Now().UnixNano()
	}
	return p, nil
}
