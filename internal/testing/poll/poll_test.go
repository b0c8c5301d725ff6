package poll

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWaitReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	if err := Wait(context.Background(), time.Minute, func() (bool, string) { calls++; return calls == 3, "not yet" }); err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Errorf("cond called %d times, want 3 (polling stops once it holds)", calls)
	}
}

func TestWaitTimesOutWithTheLastExplanation(t *testing.T) {
	calls := 0
	err := Wait(context.Background(), 3*Interval, func() (bool, string) { calls++; return false, "still waiting" })
	var te *TimeoutError
	if !errors.As(err, &te) || te.Why != "still waiting" {
		t.Fatalf("got %v, want a TimeoutError with the condition's explanation", err)
	}
	if calls < 2 {
		t.Errorf("cond called %d times, want it polled more than once", calls)
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Wait(ctx, time.Minute, func() (bool, string) { return false, "never" })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, time.Minute, "a value", ch); got != 7 {
		t.Errorf("Receive = %d, want 7", got)
	}
}
