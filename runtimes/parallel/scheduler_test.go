package parallel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/audioproof/audioproof/server/apierror"
)

// fakeClock is a settable clock for overdue checks.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// waitStats polls until cond holds on the scheduler's stats (2 s).
func waitStats(t *testing.T, s *scheduler, what string, cond func(schedStats) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		st := s.stats()
		if cond(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; stats %+v", what, st)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitQueued(t *testing.T, s *scheduler, req, mgr int) {
	t.Helper()
	waitStats(t, s, fmt.Sprintf("%d queued requests and %d managers", req, mgr), func(st schedStats) bool {
		return st.queuedRequests == req && st.queuedManagers == mgr
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// grantLog records grants in order through the scheduler's hook.
type grantLog struct {
	mu      sync.Mutex
	tickets []uint64
	mgr     []bool
}

func (g *grantLog) hook(s *scheduler) {
	s.onGrant = func(ticket uint64, manager bool, _ int) {
		g.mu.Lock()
		g.tickets = append(g.tickets, ticket)
		g.mgr = append(g.mgr, manager)
		g.mu.Unlock()
	}
}

func (g *grantLog) snapshot() ([]uint64, []bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]uint64(nil), g.tickets...), append([]bool(nil), g.mgr...)
}

func TestSchedulerFIFOWithManagerAmong17Waiters(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 2)
	var log grantLog
	log.hook(s)
	// Both slots held, so everyone queues.
	a, _ := s.acquire(ctx, 0)
	b, _ := s.acquire(ctx, 0)

	type result struct {
		idx  int
		slot int
	}
	var order []int
	var orderMu sync.Mutex
	var wg sync.WaitGroup
	var running atomic.Int32
	var overlapWithManager atomic.Bool
	const n = 17
	const mgrAt = 8
	for i := 0; i < n; i++ {
		wg.Add(1)
		if i == mgrAt {
			goT(t, func() {
				defer wg.Done()
				if err := s.acquireExclusive(ctx, 0); err != nil {
					t.Errorf("manager: %v", err)
					return
				}
				if running.Load() != 0 {
					overlapWithManager.Store(true)
				}
				orderMu.Lock()
				order = append(order, i)
				orderMu.Unlock()
				time.Sleep(2 * time.Millisecond)
				s.releaseExclusive()
			})
			waitQueued(t, s, mgrAt, 1)
			continue
		}
		goT(t, func() {
			defer wg.Done()
			slot, err := s.acquire(ctx, 0)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			running.Add(1)
			orderMu.Lock()
			order = append(order, i)
			orderMu.Unlock()
			time.Sleep(time.Millisecond)
			running.Add(-1)
			s.release(slot)
		})
		mgr := 0
		if i > mgrAt {
			mgr = 1
		}
		waitQueued(t, s, i+1-mgr, mgr)
	}
	s.release(a)
	s.release(b)
	wg.Wait()
	if overlapWithManager.Load() {
		t.Fatal("the manager ran while a request held a slot")
	}
	tickets, _ := log.snapshot()
	for i := 1; i < len(tickets); i++ {
		if tickets[i] <= tickets[i-1] {
			t.Fatalf("grants out of FIFO order: %v", tickets)
		}
	}
	// Requests before the manager may finish in any order, but every one of
	// them finishes before the manager, and every later one after it.
	pos := -1
	for p, idx := range order {
		if idx == mgrAt {
			pos = p
		}
	}
	if pos != mgrAt {
		t.Fatalf("manager ran at position %d, want %d (order %v)", pos, mgrAt, order)
	}
	for p, idx := range order {
		if (p < pos) != (idx < mgrAt) {
			t.Fatalf("request %d crossed the barrier: order %v", idx, order)
		}
	}
	if st := s.stats(); st.occupied != 0 || st.queuedRequests != 0 || st.queuedManagers != 0 || st.exclusive {
		t.Fatalf("counters not drained: %+v", st)
	}
}

func TestSchedulerOldestWaiterGetsFreedSlot(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 1)
	held, _ := s.acquire(ctx, 0)
	got := make(chan int, 3)
	release := make(chan struct{})
	for i := 0; i < 3; i++ {
		goT(t, func() {
			slot, err := s.acquire(ctx, 0)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			got <- i
			<-release
			s.release(slot)
		})
		waitQueued(t, s, i+1, 0)
	}
	s.release(held)
	if first := <-got; first != 0 {
		t.Fatalf("freed slot went to waiter %d, want the oldest (0)", first)
	}
	// A newcomer must not barge past the two still queued.
	if _, err := s.acquire(ctx, 10*time.Millisecond); !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("newcomer: err = %v, want server_busy after queueing behind older waiters", err)
	}
	close(release)
	if a, b := <-got, <-got; a != 1 || b != 2 {
		t.Fatalf("order %d,%d, want 1,2", a, b)
	}
}

func TestSchedulerReservationCancelTryExpiry(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 1)
	if !s.tryExclusive() {
		t.Fatal("tryExclusive on an idle model failed")
	}
	s.releaseExclusive()
	held, _ := s.acquire(ctx, 0)
	if s.tryExclusive() {
		t.Fatal("tryExclusive succeeded while a slot is occupied")
	}

	// Cancel: a queued request whose context ends leaves the queue.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	goT(t, func() { _, err := s.acquire(cctx, 0); errc <- err })
	waitQueued(t, s, 1, 0)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	waitQueued(t, s, 0, 0)

	// A cancelled barrier at the head wakes the runnable requests behind it.
	mctx, mcancel := context.WithCancel(ctx)
	goT(t, func() { errc <- s.acquireExclusive(mctx, 0) })
	waitQueued(t, s, 0, 1)
	s.release(held) // slot free, but the barrier waits... it gets granted now
	if err := <-errc; err != nil {
		t.Fatalf("barrier: %v", err)
	}
	mcancel()
	s.releaseExclusive()

	held, _ = s.acquire(ctx, 0)
	goT(t, func() { errc <- s.acquireExclusive(mctx2(ctx, &mcancel), 0) })
	waitQueued(t, s, 0, 1)
	slotc := make(chan int, 1)
	goT(t, func() {
		slot, err := s.acquire(ctx, 0)
		if err != nil {
			t.Errorf("request behind barrier: %v", err)
		}
		slotc <- slot
	})
	waitQueued(t, s, 1, 1)
	if s.tryExclusive() {
		t.Fatal("tryExclusive succeeded with a non-empty queue")
	}
	s.release(held)
	// The barrier holds now; the request still waits.
	if err := <-errc; err != nil {
		t.Fatalf("barrier: %v", err)
	}
	waitQueued(t, s, 1, 0)
	mcancel() // too late to matter: it was granted
	s.releaseExclusive()
	s.release(<-slotc)

	// Cancelling a queued barrier (not granted) wakes a request behind it.
	held, _ = s.acquire(ctx, 0)
	s2 := newScheduler("m2", 2)
	h2, _ := s2.acquire(ctx, 0)
	bctx, bcancel := context.WithCancel(ctx)
	goT(t, func() { errc <- s2.acquireExclusive(bctx, 0) })
	waitQueued(t, s2, 0, 1)
	goT(t, func() {
		slot, err := s2.acquire(ctx, 0)
		if err != nil {
			t.Errorf("request: %v", err)
		}
		slotc <- slot
	})
	waitQueued(t, s2, 1, 1)
	bcancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled barrier: %v", err)
	}
	if slot := <-slotc; slot != 1 {
		t.Fatalf("request behind the cancelled barrier got slot %d, want the free slot 1", slot)
	}
	s2.release(1)
	s2.release(h2)

	// Expiry: the deadline answers server_busy and removes the waiter.
	start := time.Now()
	_, err := s.acquire(ctx, 30*time.Millisecond)
	if !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("expired waiter: %v, want server_busy", err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("expired after %v, before its 30ms deadline", el)
	}
	waitQueued(t, s, 0, 0)
	s.release(held)
	if st := s.stats(); st.occupied != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func mctx2(parent context.Context, cancel *context.CancelFunc) context.Context {
	ctx, c := context.WithCancel(parent)
	*cancel = c
	return ctx
}

func TestSchedulerOverdueRejectionWithWaitingManagers(t *testing.T) {
	for slots := 1; slots <= 4; slots++ {
		for managers := 1; managers <= 2; managers++ {
			t.Run(fmt.Sprintf("slots=%d/managers=%d", slots, managers), func(t *testing.T) {
				ctx := testCtx(t)
				clock := newFakeClock()
				s := newScheduler("m", slots)
				s.now = clock.Now
				held, _ := s.acquire(ctx, 0)
				errc := make(chan error, managers)
				for i := 0; i < managers; i++ {
					goT(t, func() {
						err := s.acquireExclusive(ctx, 0)
						if err == nil {
							s.releaseExclusive()
						}
						errc <- err
					})
					waitQueued(t, s, 0, i+1)
				}
				// Healthy holder: a request with a timeout queues (spare slots
				// sit behind the waiting managers) and then times out.
				if _, err := s.acquire(ctx, 20*time.Millisecond); !apierror.Is(err, apierror.TypeBusy) ||
					!containsStr(err.Error(), "timed out") {
					t.Fatalf("request with a healthy holder: %v, want a timeout", err)
				}
				clock.Advance(time.Hour)
				// Every occupied slot is overdue: rejected at once.
				start := time.Now()
				_, err := s.acquire(ctx, time.Minute)
				if !apierror.Is(err, apierror.TypeBusy) || !containsStr(err.Error(), "has run for more than") {
					t.Fatalf("request with an overdue holder: %v, want an immediate overdue rejection", err)
				}
				if time.Since(start) > time.Second {
					t.Fatal("overdue rejection waited")
				}
				// A manager is rejected too when any occupied slot is overdue.
				if err := s.acquireExclusive(ctx, time.Minute); !apierror.Is(err, apierror.TypeBusy) {
					t.Fatalf("manager with an overdue holder: %v", err)
				}
				// Timeout 0 never checks overdue: it queues.
				slotc := make(chan int, 1)
				goT(t, func() {
					slot, err := s.acquire(ctx, 0)
					if err != nil {
						t.Errorf("unbounded request: %v", err)
					}
					slotc <- slot
				})
				waitQueued(t, s, 1, managers)
				s.release(held)
				for i := 0; i < managers; i++ {
					if err := <-errc; err != nil {
						t.Fatalf("manager: %v", err)
					}
				}
				s.release(<-slotc)
				if st := s.stats(); st.occupied != 0 || st.queuedRequests+st.queuedManagers != 0 || st.exclusive {
					t.Fatalf("not drained: %+v", st)
				}
			})
		}
	}
}

func containsStr(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestSchedulerExclusiveOverdue(t *testing.T) {
	ctx := testCtx(t)
	clock := newFakeClock()
	s := newScheduler("m", 2)
	s.now = clock.Now
	if err := s.acquireExclusive(ctx, 0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := s.acquire(ctx, time.Second); !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("request behind an overdue exclusive holder: %v", err)
	}
	if err := s.acquireExclusive(ctx, time.Second); !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("manager behind an overdue exclusive holder: %v", err)
	}
	s.releaseExclusive()
}

func TestSchedulerManagerPriorityWithHealthySlotTimeout0(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 2)
	held, _ := s.acquire(ctx, 0)
	var events []string
	var mu sync.Mutex
	add := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	done := make(chan struct{}, 2)
	goT(t, func() {
		if err := s.acquireExclusive(ctx, 0); err != nil {
			t.Errorf("manager: %v", err)
		}
		add("manager")
		time.Sleep(5 * time.Millisecond)
		add("manager-end")
		s.releaseExclusive()
		done <- struct{}{}
	})
	waitQueued(t, s, 0, 1)
	goT(t, func() {
		slot, err := s.acquire(ctx, 0)
		if err != nil {
			t.Errorf("request: %v", err)
		}
		add("request")
		s.release(slot)
		done <- struct{}{}
	})
	// The request waits behind the barrier although slot 1 is free.
	waitQueued(t, s, 1, 1)
	time.Sleep(10 * time.Millisecond)
	if st := s.stats(); st.occupied != 1 {
		t.Fatalf("request overtook the waiting manager: %+v", st)
	}
	s.release(held)
	<-done
	<-done
	if len(events) != 3 || events[0] != "manager" || events[1] != "manager-end" || events[2] != "request" {
		t.Fatalf("events %v, want manager, manager-end, request", events)
	}
}

func TestSchedulerExhaustedSlotTimeout(t *testing.T) {
	ctx := testCtx(t)
	for _, slots := range []int{1, 2, 4} {
		s := newScheduler("m", slots)
		var held []int
		for i := 0; i < slots; i++ {
			h, err := s.acquire(ctx, 0)
			if err != nil || h != i {
				t.Fatalf("slot %d: got %d, %v (lowest free slot first)", i, h, err)
			}
			held = append(held, h)
		}
		_, err := s.acquire(ctx, 25*time.Millisecond)
		if !apierror.Is(err, apierror.TypeBusy) || !containsStr(err.Error(), "timed out waiting for a slot") {
			t.Fatalf("slots=%d: %v, want timed out waiting for a slot", slots, err)
		}
		if st := s.stats(); st.queuedRequests != 0 {
			t.Fatalf("expired waiter left in the queue: %+v", st)
		}
		for _, h := range held {
			s.release(h)
		}
	}
}

func TestSchedulerNoSlotSharingUnder12x20Contention(t *testing.T) {
	ctx := testCtx(t)
	for _, slots := range []int{1, 2, 4} {
		s := newScheduler("m", slots)
		owners := make([]atomic.Int64, slots)
		var active, peak atomic.Int32
		var wg sync.WaitGroup
		for g := 1; g <= 12; g++ {
			wg.Add(1)
			goT(t, func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					if g%5 == 0 && i%7 == 0 {
						if err := s.acquireExclusive(ctx, 0); err != nil {
							t.Error(err)
							return
						}
						if a := active.Load(); a != 0 {
							t.Errorf("manager granted with %d active slots", a)
						}
						s.releaseExclusive()
						continue
					}
					slot, err := s.acquire(ctx, 0)
					if err != nil {
						t.Error(err)
						return
					}
					if !owners[slot].CompareAndSwap(0, int64(g)) {
						t.Errorf("slot %d shared by %d and %d", slot, owners[slot].Load(), g)
					}
					a := active.Add(1)
					for {
						p := peak.Load()
						if a <= p || peak.CompareAndSwap(p, a) {
							break
						}
					}
					if a > int32(slots) {
						t.Errorf("%d requests active on %d slots", a, slots)
					}
					time.Sleep(50 * time.Microsecond)
					active.Add(-1)
					owners[slot].Store(0)
					s.release(slot)
				}
			})
		}
		wg.Wait()
		if st := s.stats(); st.occupied != 0 || st.queuedRequests != 0 || st.exclusive {
			t.Fatalf("slots=%d: not drained %+v", slots, st)
		}
		if slots == 1 && peak.Load() != 1 {
			t.Fatalf("slots=1 peak %d", peak.Load())
		}
	}
}

func TestSchedulerExceptionRelease(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 1)
	func() {
		defer func() { _ = recover() }()
		slot, _ := s.acquire(ctx, 0)
		defer s.release(slot)
		panic("handler failed")
	}()
	if _, err := s.acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatalf("slot not released after a panic: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("double release did not panic")
		}
	}()
	s.release(0)
	s.release(0)
}

func TestSchedulerResizeRefusedWhileOccupied(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 2)
	slot, _ := s.acquire(ctx, 0)
	if err := s.resize(4); err == nil {
		t.Fatal("resize succeeded while a slot is occupied")
	}
	s.release(slot)
	if err := s.acquireExclusive(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.resize(4); err != nil {
		t.Fatal(err)
	}
	if err := s.resize(0); err == nil {
		t.Fatal("resize to 0 accepted")
	}
	s.releaseExclusive()
	var held []int
	for i := 0; i < 4; i++ {
		h, err := s.acquire(ctx, 10*time.Millisecond)
		if err != nil {
			t.Fatalf("slot %d after resize: %v", i, err)
		}
		held = append(held, h)
	}
	for _, h := range held {
		s.release(h)
	}
}

func TestSchedulerSlots1NeverOverlaps(t *testing.T) {
	ctx := testCtx(t)
	s := newScheduler("m", 1)
	var active atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		goT(t, func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				slot, err := s.acquire(ctx, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if active.Add(1) != 1 {
					t.Error("two requests overlap on one slot")
				}
				active.Add(-1)
				s.release(slot)
			}
		})
	}
	wg.Wait()
}
