package keyedlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLockSerialisesOneKey(t *testing.T) {
	var l Locker
	ctx := context.Background()
	var mu sync.Mutex
	inside, maxInside := 0, 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := l.Lock(ctx, "a")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			maxInside = max(maxInside, inside)
			mu.Unlock()
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Errorf("%d holders at once", maxInside)
	}
	if l.Len() != 0 {
		t.Errorf("%d keys left", l.Len())
	}
}

func TestOtherKeysDoNotWait(t *testing.T) {
	var l Locker
	unlock, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	u2, err := l.Lock(ctx, "b")
	if err != nil {
		t.Fatalf("key b waited for key a: %v", err)
	}
	u2()
}

func TestLockGivesUpWithContext(t *testing.T) {
	var l Locker
	unlock, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, "a")
		done <- err
	}()
	cancel()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-timer.C:
		t.Fatal("Lock did not give up")
	}
	unlock()
	unlock() // a second call is harmless
	if l.Len() != 0 {
		t.Errorf("%d keys left after the waiter gave up", l.Len())
	}
	u, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	u()
}
