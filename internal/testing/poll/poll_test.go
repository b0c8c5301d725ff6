package poll

import (
	"errors"
	"testing"
	"time"
)

func TestWaitReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	if err := Wait(time.Minute, func() (bool, string) { calls++; return calls == 3, "not yet" }); err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Errorf("cond called %d times, want 3 (polling stops once it holds)", calls)
	}
}

func TestWaitTimesOutWithTheLastExplanation(t *testing.T) {
	calls := 0
	err := Wait(3*Interval, func() (bool, string) { calls++; return false, "still waiting" })
	var te *TimeoutError
	if !errors.As(err, &te) || te.Why != "still waiting" {
		t.Fatalf("got %v, want a TimeoutError with the condition's explanation", err)
	}
	if calls < 2 {
		t.Errorf("cond called %d times, want it polled more than once", calls)
	}
}
