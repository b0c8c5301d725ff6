package sharedread

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// source is a read that blocks until released, counting its calls.
type source struct {
	mu      sync.Mutex
	calls   int
	started chan struct{} // one send per read started
	release chan int      // the value the read in progress returns
	deadln  []bool        // per read: whether its context had a deadline
}

func newSource() *source {
	return &source{started: make(chan struct{}, 16), release: make(chan int)}
}

func (s *source) read(ctx context.Context) (int, error) {
	s.mu.Lock()
	s.calls++
	_, has := ctx.Deadline()
	s.deadln = append(s.deadln, has)
	s.mu.Unlock()
	s.started <- struct{}{}
	select {
	case v := <-s.release:
		return v, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *source) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type result struct {
	v   int
	err error
}

func TestGetSharesOneReadAmongWaiters(t *testing.T) {
	src, clk := newSource(), &clock{t: time.Unix(1000, 0)}
	r := New(src.read, Options{Now: clk.now})
	ctx := context.Background()
	out := make(chan result, 3)
	get := func() {
		v, _, err := r.Get(ctx, clk.now())
		out <- result{v, err}
	}
	go get()
	<-src.started
	// Two more callers come while the read is in flight: they join it.
	var joined sync.WaitGroup
	for range 2 {
		joined.Add(1)
		go func() { joined.Done(); get() }()
	}
	joined.Wait()
	// A caller that comes after the read finished finds its answer kept:
	// the same one read either way.
	src.release <- 7
	for range 3 {
		if got := <-out; got != (result{v: 7}) {
			t.Errorf("Get() = %+v, want 7 from the one shared read", got)
		}
	}
	// The kept answer serves a caller that accepts its age.
	if v, at, err := r.Get(ctx, clk.now().Add(-time.Minute)); v != 7 || err != nil || !at.Equal(time.Unix(1000, 0)) {
		t.Errorf("Get() of a kept answer = %d, %v, %v; want 7 read at 1000", v, at, err)
	}
	if diff := cmp.Diff(1, src.count()); diff != "" {
		t.Errorf("reads mismatch (-want +got): one read serves every caller that accepts it:\n%s", diff)
	}
}

func TestGetReadsAgainForANewerAnswer(t *testing.T) {
	tests := []struct {
		name      string
		reason    string
		notBefore func(read time.Time) time.Time
		reads     int
	}{
		{name: "same start", reason: "an answer read from the time asked for serves", notBefore: func(at time.Time) time.Time { return at }, reads: 1},
		{name: "older accepted", reason: "an answer newer than asked serves", notBefore: func(at time.Time) time.Time { return at.Add(-time.Second) }, reads: 1},
		{name: "newer wanted", reason: "an answer whose read started before the time asked for does not serve", notBefore: func(at time.Time) time.Time { return at.Add(time.Second) }, reads: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, clk := newSource(), &clock{t: time.Unix(1000, 0)}
			r := New(src.read, Options{Now: clk.now})
			first := clk.now()
			go func() { <-src.started; src.release <- 1 }()
			if _, _, err := r.Get(context.Background(), first); err != nil {
				t.Fatal(err)
			}
			clk.add(2 * time.Second)
			go func() {
				if _, ok := <-src.started; ok {
					src.release <- 2
				}
			}()
			if _, _, err := r.Get(context.Background(), tc.notBefore(first)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.reads, src.count()); diff != "" {
				t.Errorf("reads mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			close(src.started)
		})
	}
}

func TestInvalidate(t *testing.T) {
	src, clk := newSource(), &clock{t: time.Unix(1000, 0)}
	r := New(src.read, Options{Now: clk.now})
	ctx := context.Background()
	done := make(chan result, 1)
	go func() { v, _, err := r.Get(ctx, clk.now()); done <- result{v, err} }()
	<-src.started
	// A change lands while the read is in flight: its waiter still gets the
	// answer, but it is not kept, since it may predate the change.
	r.Invalidate()
	src.release <- 1
	if got := <-done; got != (result{v: 1}) {
		t.Errorf("waiter of the invalidated read got %+v, want its answer 1", got)
	}
	go func() { <-src.started; src.release <- 2 }()
	if v, _, err := r.Get(ctx, time.Time{}); v != 2 || err != nil {
		t.Errorf("Get() after Invalidate = %d, %v; want a new read's 2", v, err)
	}
	// And Invalidate drops a kept answer.
	r.Invalidate()
	go func() { <-src.started; src.release <- 3 }()
	if v, _, err := r.Get(ctx, time.Time{}); v != 3 || err != nil {
		t.Errorf("Get() after the second Invalidate = %d, %v; want a new read's 3", v, err)
	}
	if diff := cmp.Diff(3, src.count()); diff != "" {
		t.Errorf("reads mismatch (-want +got):\n%s", diff)
	}
}

func TestCallerLeavesReadGoesOn(t *testing.T) {
	src, clk := newSource(), &clock{t: time.Unix(1000, 0)}
	r := New(src.read, Options{Now: clk.now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := r.Get(ctx, clk.now()); done <- err }()
	<-src.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Get() of a caller that left = %v, want context.Canceled", err)
	}
	// The read was not cancelled with its first caller: the next caller
	// joins it or finds its answer kept, and either way gets its 5.
	src.release <- 5
	if v, _, err := r.Get(context.Background(), clk.now()); v != 5 || err != nil {
		t.Errorf("Get() after the first caller left = %d, %v; want the read's 5", v, err)
	}
}

func TestBound(t *testing.T) {
	for _, bound := range []time.Duration{0, time.Hour} {
		src := newSource()
		r := New(src.read, Options{Bound: bound})
		go func() { <-src.started; src.release <- 1 }()
		if _, _, err := r.Get(context.Background(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]bool{bound > 0}, src.deadln); diff != "" {
			t.Errorf("Bound %v: read had a deadline mismatch (-want +got):\n%s", bound, diff)
		}
	}
}

// TestNewest: when the newest read started, kept or in flight, without
// reading: none before the first read, the read in flight while it runs
// (a Get no newer would join it), the kept one after, none after
// Invalidate.
func TestNewest(t *testing.T) {
	src, clk := newSource(), &clock{t: time.Unix(1000, 0)}
	r := New(src.read, Options{Now: clk.now})
	type newest struct {
		At time.Time
		OK bool
	}
	look := func() newest { at, ok := r.Newest(); return newest{at, ok} }
	read := func(v int) {
		done := make(chan struct{})
		go func() { _, _, _ = r.Get(context.Background(), clk.now()); close(done) }()
		<-src.started
		got := look()
		if want := (newest{clk.now(), true}); got != want {
			t.Errorf("Newest while a read is in flight = %+v, want %+v", got, want)
		}
		src.release <- v
		<-done
	}
	var got []newest
	got = append(got, look())
	read(1)
	got = append(got, look())
	clk.add(time.Minute)
	got = append(got, look())
	read(2)
	got = append(got, look())
	r.Invalidate()
	got = append(got, look())
	want := []newest{{}, {time.Unix(1000, 0), true}, {time.Unix(1000, 0), true}, {time.Unix(1060, 0), true}, {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Newest (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(2, src.count()); diff != "" {
		t.Errorf("reads (-want +got): Newest reads nothing:\n%s", diff)
	}
}
