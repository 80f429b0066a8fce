package legacy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
)

// modelLock is the per-model inference lock: a mutex that can be acquired
// with a timeout, that remembers since when its holder has held it (for the
// overdue check) and that can be tried without waiting. It makes no FIFO
// promise: whichever waiter the Go scheduler wakes first gets it.
type modelLock struct {
	ch chan struct{} // one token: holding the lock = having sent into ch

	mu    sync.Mutex
	since time.Time // when the current holder acquired it; zero while free
}

func newModelLock() *modelLock { return &modelLock{ch: make(chan struct{}, 1)} }

func (l *modelLock) acquired() {
	l.mu.Lock()
	l.since = time.Now()
	l.mu.Unlock()
}

// heldSince is when the current holder took the lock (zero when free or
// while the hand-over is in progress).
func (l *modelLock) heldSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
}

// TryLock takes the lock if it is free.
func (l *modelLock) TryLock() bool {
	select {
	case l.ch <- struct{}{}:
		l.acquired()
		return true
	default:
		return false
	}
}

// Lock takes the lock for model id under the busy-timeout rules: a zero
// timeout waits without limit; with a positive timeout an overdue holder
// makes the call fail at once with 503 server_busy, otherwise it waits up to
// timeout and then fails with 503. A done ctx ends the wait with its error.
func (l *modelLock) Lock(ctx context.Context, id string, timeout time.Duration) error {
	if l.TryLock() {
		return nil
	}
	if timeout > 0 {
		since := l.heldSince()
		now := time.Now()
		if !since.IsZero() && runtimes.Overdue(since, timeout, now) {
			return apierror.Busyf("current inference has run for %d ms, longer than the busy timeout of %d ms, on model %s; retry later or raise busy_timeout_ms",
				now.Sub(since).Milliseconds(), timeout.Milliseconds(), id)
		}
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case l.ch <- struct{}{}:
		l.acquired()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the inference lock of model %s: %w", id, ctx.Err())
	case <-expired:
		// A release racing the deadline may still have freed the lock.
		if l.TryLock() {
			return nil
		}
		return apierror.Busyf("timed out after %d ms waiting for the inference lock of model %s; retry later or raise busy_timeout_ms",
			timeout.Milliseconds(), id)
	}
}

// Unlock releases the lock. Unlocking a free lock is a programming error.
func (l *modelLock) Unlock() {
	l.mu.Lock()
	l.since = time.Time{}
	l.mu.Unlock()
	select {
	case <-l.ch:
	default:
		panic("legacy: unlock of an unlocked model lock")
	}
}
