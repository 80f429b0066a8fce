package legacy

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/audioproof/audioproof/server/apierror"
)

// TestEvictionLRU: loading beyond max_loaded_models unloads the least
// recently used resident model.
func TestEvictionLRU(t *testing.T) {
	cfg := cfgWith(0, mdl(t, "a"), mdl(t, "b"), mdl(t, "c"))
	cfg.MaxLoadedModels = 2
	rt := newRT(t, cfg)
	mustAcquire(t, rt, "a", nil).Release()
	mustAcquire(t, rt, "b", nil).Release()
	mustAcquire(t, rt, "a", nil).Release() // a is now more recent than b
	mustAcquire(t, rt, "c", nil).Release()
	if !loaded(t, rt, "a") || loaded(t, rt, "b") || !loaded(t, rt, "c") {
		t.Fatalf("loaded a=%v b=%v c=%v, want b evicted", loaded(t, rt, "a"), loaded(t, rt, "b"), loaded(t, rt, "c"))
	}
	if ctl(t, "b").Destructions.Load() != 1 || ctl(t, "a").Destructions.Load() != 0 {
		t.Error("wrong model destroyed")
	}
	// A resident model's reuse does not evict anything.
	mustAcquire(t, rt, "a", nil).Release()
	if ctl(t, "c").Destructions.Load() != 0 {
		t.Error("using a resident model evicted another")
	}
}

// TestEvictionSkipsBusyModel: the LRU model is skipped while leased; the
// next one goes.
func TestEvictionSkipsBusyModel(t *testing.T) {
	cfg := cfgWith(0, mdl(t, "a"), mdl(t, "b"), mdl(t, "c"))
	cfg.MaxLoadedModels = 2
	rt := newRT(t, cfg)
	la := mustAcquire(t, rt, "a", nil) // least recently used, but busy
	mustAcquire(t, rt, "b", nil).Release()
	select {
	case r := <-acquireAsync(context.Background(), rt, "c", nil):
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.lease.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("loading c waited for the busy model a: eviction must only try its lock")
	}
	if !loaded(t, rt, "a") || loaded(t, rt, "b") {
		t.Fatalf("a=%v b=%v: the busy model must stay and b go", loaded(t, rt, "a"), loaded(t, rt, "b"))
	}
	if runText(t, la) != fileName(t, "a") {
		t.Error("busy model's session broken")
	}
	la.Release()
}

// TestEvictionImpossibleIs503: every resident model busy -> server_busy,
// and the new model's load is never attempted.
func TestEvictionImpossibleIs503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cfgWith(0, mdl(t, "a"), mdl(t, "b"))
		cfg.MaxLoadedModels = 1
		rt := newRT(t, cfg)
		la := mustAcquire(t, rt, "a", nil)
		start := time.Now()
		_, err := rt.Acquire(context.Background(), "b", nil)
		wantType(t, err, apierror.TypeBusy, "max_loaded_models=1")
		if time.Since(start) != 0 {
			t.Errorf("eviction waited %v for a busy model; it must only try", time.Since(start))
		}
		if ctl(t, "b").Loads.Load() != 0 || loaded(t, rt, "b") || !loaded(t, rt, "a") {
			t.Error("state changed by a refused load")
		}
		la.Release()
		mustAcquire(t, rt, "b", nil).Release()
		if loaded(t, rt, "a") || !loaded(t, rt, "b") {
			t.Error("after release the load should evict a")
		}
	})
}

// TestLoadsSerialiseUnderLimit: with max_loaded_models two loads never run
// at once; without it they may.
func TestLoadsSerialiseUnderLimit(t *testing.T) {
	for _, limit := range []int{0, 3} {
		cfg := cfgWith(0, mdl(t, "a"), mdl(t, "b"))
		cfg.MaxLoadedModels = limit
		rt := newRT(t, cfg)
		ca, cb := ctl(t, "a"), ctl(t, "b")
		ca.LoadGate.Arm()
		doneA := acquireAsync(context.Background(), rt, "a", nil)
		if !ca.LoadGate.WaitSeen(5 * time.Second) {
			t.Fatal("a never started loading")
		}
		doneB := acquireAsync(context.Background(), rt, "b", nil)
		var bDone bool
		select {
		case r := <-doneB:
			bDone = true
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.lease.Release()
		case <-time.After(200 * time.Millisecond):
		}
		if limit == 0 && !bDone {
			t.Error("without max_loaded_models b waited for a's load")
		}
		if limit > 0 && bDone {
			t.Error("with max_loaded_models b loaded while a was loading")
		}
		ca.LoadGate.Release()
		if r := <-doneA; r.err != nil {
			t.Fatal(r.err)
		} else {
			r.lease.Release()
		}
		if !bDone {
			if r := <-doneB; r.err != nil {
				t.Fatal(r.err)
			} else {
				r.lease.Release()
			}
		}
		if cb.Loads.Load() != 1 {
			t.Errorf("limit %d: b Loads %d", limit, cb.Loads.Load())
		}
		rt.Close()
		ca.Loads.Store(0)
		cb.Loads.Store(0)
	}
}

// TestIdleUnload: after idle_unload_ms without activity every idle resident
// model is unloaded; a busy one is kept; the check runs every
// max(1 s, limit/10).
func TestIdleUnload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cfgWith(0, mdl(t, "a"), mdl(t, "b"))
		cfg.IdleUnloadMs = 3000 // check every 1 s
		rt := newRT(t, cfg)
		mustAcquire(t, rt, "a", nil).Release()
		lb := mustAcquire(t, rt, "b", nil) // t=0: last activity
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if !loaded(t, rt, "a") {
			t.Fatal("unloaded before the idle limit")
		}
		time.Sleep(time.Second) // the 3 s check has run
		synctest.Wait()
		if loaded(t, rt, "a") {
			t.Fatal("idle model a still loaded after the limit")
		}
		if !loaded(t, rt, "b") {
			t.Fatal("busy model b unloaded by the idle check")
		}
		lb.Release() // activity at 3.5 s
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !loaded(t, rt, "b") {
			t.Fatal("b unloaded 2 s after its last activity")
		}
		time.Sleep(2 * time.Second) // 7.5 s: idle since 3.5 s, checked at 7 s
		synctest.Wait()
		if loaded(t, rt, "b") {
			t.Fatal("b still loaded after being idle for the limit")
		}
	})
}

// TestIdleCheckInterval: with a 30 s limit the check runs every 3 s, so a
// model idle since t=1 s goes at the 33 s check, not at 31 s.
func TestIdleCheckInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cfgWith(0, mdl(t, "a"))
		cfg.IdleUnloadMs = 30000
		rt := newRT(t, cfg)
		time.Sleep(time.Second)
		mustAcquire(t, rt, "a", nil).Release() // last activity t=1 s
		time.Sleep(31*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if !loaded(t, rt, "a") {
			t.Fatal("unloaded at 32.5 s: the check must run every 3 s (30 s / 10)")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if loaded(t, rt, "a") {
			t.Fatal("still loaded after the 33 s check")
		}
	})
}
