package parallel

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
)

// scheduler is one model's admission: a fixed number of request slots and
// an exclusive (management) hold, granted through a single FIFO queue that
// holds requests and barriers in the order their callers entered it.
//
// Rules (parallel-contract.md section 3):
//   - A request takes the lowest free slot at once only when nothing
//     exclusive is held, the queue is empty and a slot is free.
//   - A barrier (management operation) is granted only when no slot is
//     occupied and nothing exclusive is held; while it waits it blocks every
//     later caller, even when slots are free.
//   - Nothing overtakes the head of the queue. A waiter's grant (and its
//     slot) is assigned under the lock before it is woken, so no later
//     caller can take it.
//   - A waiter that expires or is cancelled leaves the queue, and the callers
//     behind it are reconsidered at once.
//
// The scheduler never blocks while holding mu.
type scheduler struct {
	name string // model id, for error messages
	now  func() time.Time

	mu        sync.Mutex
	slots     []slotState
	occupied  int
	exclusive bool
	exclSince time.Time
	queue     list.List // of *waiter, oldest first
	queuedReq int       // request waiters in queue (managers excluded)
	ticket    uint64    // next ticket; every acquisition gets one on entry

	// onGrant, when set (tests), is called under mu for every grant with the
	// caller's ticket, in grant order.
	onGrant func(ticket uint64, manager bool, slot int)
}

type slotState struct {
	busy  bool
	since time.Time
}

// waiter is one queued caller. ready is closed once the grant (slot or
// exclusive hold) is assigned.
type waiter struct {
	manager bool
	ticket  uint64
	ready   chan struct{}
	granted bool
	slot    int
	elem    *list.Element
}

func newScheduler(name string, size int) *scheduler {
	if size < 1 {
		size = 1
	}
	return &scheduler{name: name, now: time.Now, slots: make([]slotState, size)}
}

// schedStats is an observation of the scheduler.
type schedStats struct {
	size, occupied, queuedRequests, queuedManagers int
	exclusive                                      bool
}

func (s *scheduler) stats() schedStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return schedStats{
		size: len(s.slots), occupied: s.occupied, queuedRequests: s.queuedReq,
		queuedManagers: s.queue.Len() - s.queuedReq, exclusive: s.exclusive,
	}
}

func (s *scheduler) nextTicketLocked() uint64 {
	s.ticket++
	return s.ticket
}

func (s *scheduler) grantLocked(ticket uint64, manager bool, slot int) {
	if s.onGrant != nil {
		s.onGrant(ticket, manager, slot)
	}
}

// lowestFreeLocked returns the lowest free slot, or -1.
func (s *scheduler) lowestFreeLocked() int {
	for i := range s.slots {
		if !s.slots[i].busy {
			return i
		}
	}
	return -1
}

func (s *scheduler) takeSlotLocked(i int) {
	s.slots[i] = slotState{busy: true, since: s.now()}
	s.occupied++
}

// overdueLocked reports whether the exclusive holder is overdue, and
// whether every occupied slot (any, when all=false) is overdue.
func (s *scheduler) exclusiveOverdueLocked(timeout time.Duration, now time.Time) bool {
	return s.exclusive && runtimes.Overdue(s.exclSince, timeout, now)
}

func (s *scheduler) slotsOverdueLocked(timeout time.Duration, now time.Time, all bool) bool {
	if s.occupied == 0 || timeout <= 0 {
		return false
	}
	for _, st := range s.slots {
		if !st.busy {
			continue
		}
		over := runtimes.Overdue(st.since, timeout, now)
		if all && !over {
			return false
		}
		if !all && over {
			return true
		}
	}
	return all
}

func (s *scheduler) busyOverdue(timeout time.Duration) error {
	return apierror.Busyf("model %q is busy: the current inference has run for more than %d ms (busy_timeout_ms); retry later or raise busy_timeout_ms",
		s.name, timeout.Milliseconds())
}

// acquire takes a request slot, waiting in FIFO order for at most timeout
// (0 = without limit). It fails with server_busy at once when the exclusive
// holder is overdue or every occupied slot is overdue, and with server_busy
// when the deadline passes (its queue entry is removed). A done ctx removes
// the waiter and returns ctx.Err().
func (s *scheduler) acquire(ctx context.Context, timeout time.Duration) (int, error) {
	s.mu.Lock()
	t := s.nextTicketLocked()
	if !s.exclusive && s.queue.Len() == 0 {
		if i := s.lowestFreeLocked(); i >= 0 {
			s.takeSlotLocked(i)
			s.grantLocked(t, false, i)
			s.mu.Unlock()
			return i, nil
		}
	}
	now := s.now()
	if s.exclusiveOverdueLocked(timeout, now) || s.slotsOverdueLocked(timeout, now, true) {
		s.mu.Unlock()
		return -1, s.busyOverdue(timeout)
	}
	w := s.enqueueLocked(false, t)
	s.mu.Unlock()
	if err := s.wait(ctx, w, timeout); err != nil {
		return -1, err
	}
	return w.slot, nil
}

// acquireExclusive takes the exclusive hold as a barrier: it waits behind
// every older queued caller and until no slot is occupied. It fails with
// server_busy at once when the exclusive holder or any occupied slot is
// overdue, and when timeout (0 = without limit) passes.
func (s *scheduler) acquireExclusive(ctx context.Context, timeout time.Duration) error {
	s.mu.Lock()
	now := s.now()
	if s.exclusiveOverdueLocked(timeout, now) || s.slotsOverdueLocked(timeout, now, false) {
		s.mu.Unlock()
		return s.busyOverdue(timeout)
	}
	w := s.enqueueExclusiveLocked()
	s.mu.Unlock()
	return s.wait(ctx, w, timeout)
}

// enqueueExclusive publishes a barrier without waiting and without overdue
// checks (bulk unload). The returned waiter may already be granted; the
// caller must wait on it (or cancel it) and release the hold.
func (s *scheduler) enqueueExclusive() *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enqueueExclusiveLocked()
}

func (s *scheduler) enqueueExclusiveLocked() *waiter {
	t := s.nextTicketLocked()
	if !s.exclusive && s.occupied == 0 && s.queue.Len() == 0 {
		s.exclusive = true
		s.exclSince = s.now()
		s.grantLocked(t, true, -1)
		w := &waiter{manager: true, ticket: t, ready: make(chan struct{}), granted: true, slot: -1}
		close(w.ready)
		return w
	}
	return s.enqueueLocked(true, t)
}

func (s *scheduler) enqueueLocked(manager bool, t uint64) *waiter {
	w := &waiter{manager: manager, ticket: t, ready: make(chan struct{}), slot: -1}
	w.elem = s.queue.PushBack(w)
	if !manager {
		s.queuedReq++
	}
	return w
}

// wait blocks until w is granted, its timeout passes (server_busy) or ctx
// is done (ctx.Err()). A grant that races with the timeout is kept; a grant
// that races with ctx is given back, so a done ctx always wins.
func (s *scheduler) wait(ctx context.Context, w *waiter, timeout time.Duration) error {
	var expire <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		expire = tm.C
	}
	select {
	case <-w.ready:
		return nil
	case <-expire:
		s.mu.Lock()
		if w.granted {
			s.mu.Unlock()
			return nil
		}
		s.removeLocked(w)
		s.mu.Unlock()
		return apierror.Busyf("model %q is busy: timed out waiting for a slot after %d ms (busy_timeout_ms); retry later or raise busy_timeout_ms",
			s.name, timeout.Milliseconds())
	case <-ctx.Done():
		s.cancel(w)
		return ctx.Err()
	}
}

// cancel withdraws w: a queued waiter leaves the queue, a granted one gives
// its grant back.
func (s *scheduler) cancel(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.granted {
		s.removeLocked(w)
		return
	}
	if w.manager {
		s.releaseExclusiveLocked()
	} else {
		s.releaseLocked(w.slot)
	}
}

func (s *scheduler) removeLocked(w *waiter) {
	s.queue.Remove(w.elem)
	if !w.manager {
		s.queuedReq--
	}
	// The callers behind a withdrawn head (a barrier above all) may be
	// runnable now.
	s.notifyLocked()
}

// tryExclusive takes the exclusive hold only when the model is idle: nothing
// exclusive, no occupied slot, nobody queued (eviction, idle retirement).
func (s *scheduler) tryExclusive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exclusive || s.occupied > 0 || s.queue.Len() > 0 {
		return false
	}
	s.exclusive = true
	s.exclSince = s.now()
	s.grantLocked(s.nextTicketLocked(), true, -1)
	return true
}

// release frees a request slot. Releasing a free slot is a programming
// error and panics.
func (s *scheduler) release(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(slot)
}

func (s *scheduler) releaseLocked(slot int) {
	if slot < 0 || slot >= len(s.slots) || !s.slots[slot].busy {
		panic(fmt.Sprintf("parallel: release of slot %d of model %q that is not held", slot, s.name))
	}
	s.slots[slot] = slotState{}
	s.occupied--
	s.notifyLocked()
}

// releaseExclusive ends the exclusive hold.
func (s *scheduler) releaseExclusive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseExclusiveLocked()
}

func (s *scheduler) releaseExclusiveLocked() {
	if !s.exclusive {
		panic(fmt.Sprintf("parallel: release of the exclusive hold of model %q that is not held", s.name))
	}
	s.exclusive = false
	s.notifyLocked()
}

// notifyLocked grants the head of the queue as long as it fits; it stops at
// the first waiter that does not (no barging, no starvation).
func (s *scheduler) notifyLocked() {
	for {
		front := s.queue.Front()
		if front == nil {
			return
		}
		w := front.Value.(*waiter)
		if s.exclusive {
			return
		}
		if w.manager {
			if s.occupied > 0 {
				return
			}
			s.exclusive = true
			s.exclSince = s.now()
		} else {
			i := s.lowestFreeLocked()
			if i < 0 {
				return
			}
			s.takeSlotLocked(i)
			w.slot = i
			s.queuedReq--
		}
		s.queue.Remove(front)
		w.granted = true
		s.grantLocked(w.ticket, w.manager, w.slot)
		close(w.ready)
	}
}

// resize changes the number of slots. The caller holds the exclusive hold;
// it is refused while any slot is occupied.
func (s *scheduler) resize(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 1 {
		return fmt.Errorf("parallel: model %q: slot count %d is below 1", s.name, n)
	}
	if s.occupied > 0 {
		return fmt.Errorf("parallel: model %q: cannot change the slot count while %d slots are occupied", s.name, s.occupied)
	}
	s.slots = make([]slotState, n)
	s.notifyLocked()
	return nil
}
