package legacy

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/session"
)

// TestBusyTimeoutLayers checks that a waiter gives up after exactly the
// effective timeout: the model's value beats the server's, and a positive
// request override lowers it (min rule) or applies alone when the ceiling is 0.
func TestBusyTimeoutLayers(t *testing.T) {
	cases := []struct {
		name    string
		server  int64
		model   *int64
		request *int64
		want    time.Duration
	}{
		{"server only", 300, nil, nil, 300 * time.Millisecond},
		{"model beats server", 300, ptr(200), nil, 200 * time.Millisecond},
		{"model above server", 300, ptr(900), nil, 900 * time.Millisecond},
		{"request lowers ceiling", 300, ptr(200), ptr(50), 50 * time.Millisecond},
		{"request cannot raise ceiling", 300, ptr(200), ptr(500), 200 * time.Millisecond},
		{"request zero ignored", 300, nil, ptr(0), 300 * time.Millisecond},
		{"unbounded ceiling takes request", 0, nil, ptr(70), 70 * time.Millisecond},
		{"model zero ceiling takes request", 300, ptr(0), ptr(40), 40 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mdl(t, "m")
				m.BusyTimeoutMs = tc.model
				rt := newRT(t, cfgWith(tc.server, m))
				holder := mustAcquire(t, rt, "m", nil)
				start := time.Now()
				_, err := rt.Acquire(context.Background(), "m", tc.request)
				wantType(t, err, apierror.TypeBusy, "timed out after", "waiting for the inference lock of model m")
				if got := time.Since(start); got != tc.want {
					t.Errorf("waited %v, want %v", got, tc.want)
				}
				holder.Release()
				mustAcquire(t, rt, "m", nil).Release()
			})
		})
	}
}

// TestZeroTimeoutWaitsUntilRelease: with every layer at 0 the waiter waits
// however long the holder takes, then gets the lock.
func TestZeroTimeoutWaitsUntilRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mdl(t, "m")
		m.BusyTimeoutMs = ptr(0)
		rt := newRT(t, cfgWith(300, m))
		holder := mustAcquire(t, rt, "m", nil)
		start := time.Now()
		ch := acquireAsync(context.Background(), rt, "m", nil)
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case r := <-ch:
			t.Fatalf("waiter returned while the lock was held: %v", r.err)
		default:
		}
		holder.Release()
		r := <-ch
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if r.at.Sub(start) != time.Hour {
			t.Errorf("waiter got the lock after %v, want exactly when released (1h)", r.at.Sub(start))
		}
		r.lease.Release()
	})
}

// TestOverdueHolderFailsAtOnce: a holder past the waiter's timeout (strictly
// greater) makes the waiter fail immediately; at exactly the timeout it is
// not overdue and the waiter waits the full timeout.
func TestOverdueHolderFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(100, mdl(t, "m")))
		holder := mustAcquire(t, rt, "m", nil)
		defer holder.Release()

		time.Sleep(100 * time.Millisecond) // exactly the timeout: not overdue
		start := time.Now()
		_, err := rt.Acquire(context.Background(), "m", nil)
		wantType(t, err, apierror.TypeBusy, "timed out after 100 ms")
		if time.Since(start) != 100*time.Millisecond {
			t.Errorf("not-overdue waiter waited %v, want 100ms", time.Since(start))
		}

		// Now the holder has run 200 ms > 100 ms: overdue.
		start = time.Now()
		_, err = rt.Acquire(context.Background(), "m", nil)
		wantType(t, err, apierror.TypeBusy, "current inference has run for 200 ms", "longer than the busy timeout of 100 ms")
		if time.Since(start) != 0 {
			t.Errorf("overdue rejection took %v, want immediate", time.Since(start))
		}
		// The request override is the waiter's own timeout for the check.
		start = time.Now()
		_, err = rt.Acquire(context.Background(), "m", ptr(50))
		wantType(t, err, apierror.TypeBusy, "current inference has run")
		if time.Since(start) != 0 {
			t.Errorf("overdue rejection with override took %v", time.Since(start))
		}
	})
}

// TestZeroTimeoutNeverOverdue: a waiter with timeout 0 waits even behind a
// holder that has run for a long time.
func TestZeroTimeoutNeverOverdue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(0, mdl(t, "m")))
		holder := mustAcquire(t, rt, "m", nil)
		time.Sleep(time.Hour)
		ch := acquireAsync(context.Background(), rt, "m", nil)
		synctest.Wait()
		select {
		case r := <-ch:
			t.Fatalf("timeout-0 waiter returned: %v", r.err)
		default:
		}
		holder.Release()
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		} else {
			r.lease.Release()
		}
	})
}

// TestAcquireHonoursContext: a cancelled waiter returns ctx's error and
// leaves the lock usable.
func TestAcquireHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(0, mdl(t, "m")))
		holder := mustAcquire(t, rt, "m", nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch := acquireAsync(ctx, rt, "m", nil)
		synctest.Wait()
		cancel()
		r := <-ch
		if !isCanceled(r.err) || r.lease != nil {
			t.Fatalf("cancelled waiter: lease %v err %v", r.lease, r.err)
		}
		holder.Release()
		// The cancelled waiter must not have taken the lock.
		l, err := rt.Acquire(context.Background(), "m", ptr(1))
		if err != nil {
			t.Fatalf("lock leaked by the cancelled waiter: %v", err)
		}
		l.Release()
	})
}

// TestOneRunAtATime: many concurrent requests on one model never overlap.
func TestOneRunAtATime(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	c := ctl(t, "m")
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			l, err := rt.Acquire(context.Background(), "m", nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer l.Release()
			_, err = l.Session().Run(context.Background(), &session.Request{Options: map[string]string{"fixture_delay_ms": "5"}}, nil)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if c.Runs.Load() != 6 || c.MaxConcurrentRuns() != 1 {
		t.Errorf("Runs=%d MaxConcurrentRuns=%d, want 6 and 1", c.Runs.Load(), c.MaxConcurrentRuns())
	}
	if c.Loads.Load() != 1 || c.Sessions.Load() != 1 {
		t.Errorf("Loads=%d Sessions=%d, want 1 and 1 (one session per model)", c.Loads.Load(), c.Sessions.Load())
	}
}

func TestUnknownModel(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	_, err := rt.Acquire(context.Background(), "nope", nil)
	wantType(t, err, apierror.TypeNotFound, `"nope"`)
	if _, ok := rt.Lookup("nope"); ok {
		t.Error("Lookup found an unknown id")
	}
}
