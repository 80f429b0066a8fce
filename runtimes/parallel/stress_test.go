package parallel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// TestStressRandomized runs several models under concurrent requests,
// reconfigurations, unloads and bulk unloads for a bounded time, from a
// seed (PARALLEL_STRESS_SEED to replay one; PARALLEL_STRESS_SECONDS to run
// longer). After the run it checks that no slot was held by two requests,
// grants were FIFO per model, every counter is back to zero, every session
// and asset was closed and no goroutine was left behind. A watchdog fails
// the test with all goroutine stacks if the run deadlocks.
func TestStressRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PARALLEL_STRESS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PARALLEL_STRESS_SEED: %v", err)
		}
		seed = v
	}
	dur := 4 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	if s := os.Getenv("PARALLEL_STRESS_SECONDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("PARALLEL_STRESS_SECONDS: %v", err)
		}
		dur = time.Duration(v) * time.Second
	}
	t.Logf("seed %d (replay with PARALLEL_STRESS_SEED=%d), %v", seed, seed, dur)
	goroutinesBefore := runtime.NumGoroutine()

	const nModels = 4
	ids := make([]string, nModels)
	files := [][2]string{}
	var models []config.Model
	for i := range nModels {
		ids[i] = fmt.Sprintf("s%d", i)
		files = append(files, [2]string{fileName(t, ids[i]+"a"), fileName(t, ids[i]+"b")})
		models = append(models, fixtureModel(ids[i], files[i][0], 1+i%4, 0))
	}
	cfg := config.Default()
	cfg.BusyTimeoutMs = 0
	cfg.MaxLoadedModels = 3
	cfg.Models = models
	rt, err := New(runtimesOptions(cfg))
	if err != nil {
		t.Fatal(err)
	}

	// Grant order per model, through the scheduler's hook.
	var fifoErr atomic.Value
	for _, id := range ids {
		e, _ := rt.lookup(id)
		var last uint64
		e.sched.onGrant = func(ticket uint64, _ bool, _ int) {
			if ticket <= last {
				fifoErr.CompareAndSwap(nil, fmt.Sprintf("model %s: ticket %d granted after %d", id, ticket, last))
			}
			last = ticket
		}
	}
	owners := make([][config.MaxSlots]atomic.Int64, nModels)
	var sharedErr atomic.Value
	var ops, busy, runs atomic.Int64

	ctx := t.Context()
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	const workers = 10
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			me := int64(w + 1)
			for time.Now().Before(stop) {
				ops.Add(1)
				mi := rng.IntN(nModels)
				id := ids[mi]
				switch p := rng.IntN(100); {
				case p < 78:
					var busyMs *int64
					if rng.IntN(3) == 0 {
						busyMs = ms(int64(1 + rng.IntN(20)))
					}
					l, err := rt.Acquire(ctx, id, busyMs)
					if err != nil {
						if !apierror.Is(err, apierror.TypeBusy) {
							t.Errorf("acquire %s: %v", id, err)
						}
						busy.Add(1)
						continue
					}
					slot := l.(*lease).slot
					if !owners[mi][slot].CompareAndSwap(0, me) {
						sharedErr.CompareAndSwap(nil, fmt.Sprintf("model %s slot %d held by %d and %d", id, slot, owners[mi][slot].Load(), me))
					}
					opts := map[string]string{"fixture_delay_ms": strconv.Itoa(rng.IntN(3))}
					if _, err := l.Session().Run(ctx, &session.Request{Input: "x", Options: opts}, nil); err != nil {
						t.Errorf("run %s: %v", id, err)
					}
					runs.Add(1)
					owners[mi][slot].Store(0)
					l.Release()
					if rng.IntN(10) == 0 {
						l.Release() // idempotent
					}
				case p < 85:
					m := fixtureModel(id, files[mi][rng.IntN(2)], 1+rng.IntN(4), 0)
					if rng.IntN(8) == 0 {
						m.Slots = config.Slots{Set: true, Raw: "5"} // above capacity: 400 or 500
					}
					if _, err := rt.Register(ctx, m); err != nil && !apierror.Is(err, apierror.TypeBusy) &&
						!containsStr(err.Error(), "capacity=4") {
						t.Errorf("register %s: %v", id, err)
					}
				case p < 92:
					if err := rt.Unload(ctx, id); err != nil && !apierror.Is(err, apierror.TypeBusy) {
						t.Errorf("unload %s: %v", id, err)
					}
				case p < 98:
					sel := []string{id, ids[rng.IntN(nModels)], id, "missing"}
					if _, nf, err := rt.UnloadModels(ctx, sel); err != nil || len(nf) != 1 {
						t.Errorf("bulk %v: %v %v", sel, nf, err)
					}
				default:
					if _, err := rt.UnloadAll(ctx); err != nil {
						t.Errorf("unload all: %v", err)
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(dur + 15*time.Second):
		t.Fatalf("deadlock: workers did not finish (seed %d)\n%s", seed, allStacks())
	}
	if v := sharedErr.Load(); v != nil {
		t.Fatalf("seed %d: %s", seed, v)
	}
	if v := fifoErr.Load(); v != nil {
		t.Fatalf("seed %d: FIFO violated: %s", seed, v)
	}
	checkDrained(t, rt)
	loadedNow := 0
	for _, st := range rt.Models() {
		if st.Loaded {
			loadedNow++
		}
	}
	if loadedNow > cfg.MaxLoadedModels {
		t.Fatalf("%d models loaded, max_loaded_models %d", loadedNow, cfg.MaxLoadedModels)
	}
	closed := make(chan struct{})
	go func() { _ = rt.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close deadlocked (seed %d)\n%s", seed, allStacks())
	}
	for i := range nModels {
		for _, f := range files[i] {
			c := ctl(t, fixtureModel("x", f, 1, 0))
			if c.Sessions.Load() != 0 || c.Loads.Load() != c.Destructions.Load() ||
				c.PrematureModelDestruction.Load() || c.UseAfterClose.Load() {
				t.Fatalf("seed %d: %s: live sessions %d, loads %d, destructions %d, premature %v, use after close %v",
					seed, f, c.Sessions.Load(), c.Loads.Load(), c.Destructions.Load(),
					c.PrematureModelDestruction.Load(), c.UseAfterClose.Load())
			}
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > goroutinesBefore {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left behind: %d before, %d after\n%s", goroutinesBefore, runtime.NumGoroutine(), allStacks())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d operations, %d runs, %d busy answers", ops.Load(), runs.Load(), busy.Load())
	if runs.Load() == 0 {
		t.Fatal("no request ran")
	}
}
