package parallel

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/runtimes/runtimetest"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
)

const mb = 1 << 20

// realModel is a lazy fixture model whose path is a real (sparse) file of
// size bytes; require_file=true makes the fixture insist on it.
func realModel(t *testing.T, id, suffix string, slots int, size int64) config.Model {
	t.Helper()
	m := fixtureModel(id, fileName(t, suffix), slots, 4)
	m.Path = filepath.Join(t.TempDir(), fileName(t, suffix))
	runtimetest.SparseFile(t, m.Path, size)
	m.LoadOptions = map[string]string{"require_file": "true"}
	return m
}

// newGuarded builds a runtime with min_free_memory_mb=1 whose guard reads
// probe, and checks at the end that nothing leaked.
func newGuarded(t *testing.T, probe *runtimetest.MemProbe, edit func(*config.Config), models ...config.Model) *Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.BusyTimeoutMs = 0
	cfg.UIManagement = true
	cfg.MinFreeMemoryMb = 1
	cfg.Models = models
	if edit != nil {
		edit(cfg)
	}
	rt, err := New(runtimes.Options{Config: cfg, FreeMemory: probe.Read})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = rt.Close()
		for _, m := range models {
			c := ctl(t, m)
			c.ReleaseAll()
			if c.Sessions.Load() != 0 || c.PrematureModelDestruction.Load() || c.UseAfterClose.Load() {
				t.Errorf("model %s after Close: sessions %d, premature destruction %v, use after close %v", m.ID,
					c.Sessions.Load(), c.PrematureModelDestruction.Load(), c.UseAfterClose.Load())
			}
		}
	})
	return rt
}

func wantMemoryRefusal(t *testing.T, err error, id string) {
	t.Helper()
	ae := apierror.From(err)
	if ae == nil || ae.Type != apierror.TypeMemory || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("err = %v, want 503 insufficient_memory", err)
	}
	for _, want := range []string{fmt.Sprintf("cannot load model %q", id), "min_free_memory_mb=1", "MiB"} {
		if !strings.Contains(ae.Message, want) {
			t.Errorf("message %q does not mention %q", ae.Message, want)
		}
	}
}

// TestMemoryGuardRefusalPublishesNothing: at 1, 2 and 4 slots a refused
// load asks the family for nothing, publishes no pool, frees its slot and
// leaves the entry registered and unloaded; a retry with enough memory
// builds the whole pool.
func TestMemoryGuardRefusalPublishesNothing(t *testing.T) {
	for _, n := range capacities {
		t.Run(fmt.Sprintf("slots=%d", n), func(t *testing.T) {
			m := realModel(t, "a", "a", n, 2*mb) // 131 MiB + 1 MiB headroom
			probe := runtimetest.NewMemProbe(132*mb - 1)
			rt := newGuarded(t, probe, nil, m)
			_, err := infer(context.Background(), rt, "a", nil, nil)
			wantMemoryRefusal(t, err, "a")
			c := ctl(t, m)
			st := status(t, rt, "a")
			if c.Loads.Load() != 0 || c.Sessions.Load() != 0 || st.Loaded || st.Slots.MaxParallelSlots != nil || st.Slots.Active != 0 {
				t.Fatalf("refusal left state: loads %d sessions %d loaded %v max %v active %d",
					c.Loads.Load(), c.Sessions.Load(), st.Loaded, st.Slots.MaxParallelSlots, st.Slots.Active)
			}
			probe.Free.Store(132 * mb)
			text, err := infer(context.Background(), rt, "a", nil, nil)
			if err != nil || text != filepath.Base(m.Path) {
				t.Fatalf("retry: %q, %v", text, err)
			}
			if c.Sessions.Load() != int64(n) || !status(t, rt, "a").Loaded {
				t.Fatalf("retry built %d sessions, want %d", c.Sessions.Load(), n)
			}
			// A warm model is not checked again.
			probe.Free.Store(0)
			calls := probe.Calls.Load()
			if _, err := infer(context.Background(), rt, "a", nil, nil); err != nil || probe.Calls.Load() != calls {
				t.Fatalf("warm request: %v, memory checks %d", err, probe.Calls.Load()-calls)
			}
		})
	}
}

// TestMemoryGuardOffNeverRefuses: min_free_memory_mb=0 never reads memory.
func TestMemoryGuardOffNeverRefuses(t *testing.T) {
	probe := runtimetest.NewMemProbe(0)
	m := realModel(t, "a", "a", 2, 64*mb)
	rt := newGuarded(t, probe, func(c *config.Config) { c.MinFreeMemoryMb = 0 }, m)
	if _, err := infer(context.Background(), rt, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	if probe.Calls.Load() != 0 {
		t.Errorf("guard off read free memory %d times", probe.Calls.Load())
	}
}

// TestMemoryGuardRegistration: a new registration that does not fit
// answers 503 and stays registered and unloaded; retrying works. An eager
// model that does not fit is a startup error.
func TestMemoryGuardRegistration(t *testing.T) {
	eager := realModel(t, "eager", "eager", 0, 8*mb)
	eager.Lazy = false
	probe := runtimetest.NewMemProbe(100 * mb)
	rt := newGuarded(t, probe, nil, eager)
	if err := rt.Start(context.Background()); err == nil || !strings.Contains(err.Error(), `cannot load model "eager"`) {
		t.Fatalf("Start = %v, want the memory refusal", err)
	}
	m := realModel(t, "new", "new", 2, 8*mb)
	_, err := rt.Register(context.Background(), m)
	wantMemoryRefusal(t, err, "new")
	if st := status(t, rt, "new"); st.Loaded || ctl(t, m).Loads.Load() != 0 {
		t.Fatal("refused registration must stay registered and unloaded")
	}
	probe.Free.Store(1 << 40)
	if _, err := rt.Register(context.Background(), m); err != nil || !status(t, rt, "new").Loaded {
		t.Fatalf("retry: %v", err)
	}
	t.Cleanup(func() { ctl(t, m).ReleaseAll() })
}

// TestMemoryGuardAfterEviction: under max_loaded_models the LRU model is
// evicted, the guard measures only after its teardown has finished (so
// the freed memory counts), and a refusal does not bring it back.
func TestMemoryGuardAfterEviction(t *testing.T) {
	a := realModel(t, "a", "a", 2, mb)
	b := realModel(t, "b", "b", 2, 64*mb) // needs 1.5 × 64 + 128 + 1 = 225 MiB
	probe := runtimetest.NewMemProbe(1 << 40)
	rt := newGuarded(t, probe, func(c *config.Config) { c.MaxLoadedModels = 1 }, a, b)
	if _, err := infer(context.Background(), rt, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	probe.Free.Store(200 * mb)
	ctl(t, a).CloseGate.Arm()
	calls := probe.Calls.Load()
	done := make(chan error, 1)
	go func() { _, err := infer(context.Background(), rt, "b", nil, nil); done <- err }()
	if !ctl(t, a).CloseGate.WaitSeen(5 * time.Second) {
		t.Fatal("a was not evicted")
	}
	time.Sleep(50 * time.Millisecond)
	if probe.Calls.Load() != calls {
		t.Fatal("the guard measured memory before the evicted model was torn down")
	}
	ctl(t, a).CloseGate.Release()
	wantMemoryRefusal(t, <-done, "b")
	if status(t, rt, "a").Loaded || ctl(t, a).Destructions.Load() != 1 {
		t.Error("a must stay evicted after b's refusal")
	}
	if status(t, rt, "b").Loaded || ctl(t, b).Loads.Load() != 0 {
		t.Error("b loaded despite the refusal")
	}
	probe.Free.Store(225 * mb)
	if _, err := infer(context.Background(), rt, "b", nil, nil); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// TestMemoryGuardReconfigureProbe: a reconfiguration to more slots with new
// inputs probes capacity with privately loaded assets; the guard checks that
// load first and a refusal keeps the current model serving.
func TestMemoryGuardReconfigureProbe(t *testing.T) {
	old := realModel(t, "m", "old", 1, mb)
	repl := realModel(t, "m", "new", 2, 64*mb)
	probe := runtimetest.NewMemProbe(200 * mb)
	rt := newGuarded(t, probe, nil, old)
	t.Cleanup(func() { ctl(t, repl).ReleaseAll() })
	if _, err := infer(context.Background(), rt, "m", nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err := rt.Register(context.Background(), repl)
	wantMemoryRefusal(t, err, "m")
	if !strings.Contains(err.Error(), "the current model is kept") {
		t.Errorf("refusal does not say the model is kept: %v", err)
	}
	if ctl(t, repl).Loads.Load() != 0 {
		t.Error("the probe loaded despite the refusal")
	}
	if text, err := infer(context.Background(), rt, "m", nil, nil); err != nil || text != filepath.Base(old.Path) {
		t.Fatalf("old model not serving after a refused reconfiguration: %q %v", text, err)
	}
	probe.Free.Store(1 << 40)
	if re, err := rt.Register(context.Background(), repl); err != nil || !re {
		t.Fatalf("retry: reconfigured=%v err=%v", re, err)
	}
	if text, err := infer(context.Background(), rt, "m", nil, nil); err != nil || text != filepath.Base(repl.Path) {
		t.Fatalf("new model not serving: %q %v", text, err)
	}
	// The probe's assets became the pool: checked once, loaded once.
	if ctl(t, repl).Loads.Load() != 1 {
		t.Errorf("replacement loaded %d times, want 1", ctl(t, repl).Loads.Load())
	}
}

// TestMemoryGuardSerialisesLoads: with the guard on, another model's load
// and memory check wait for a load in progress, while a warm model keeps
// serving.
func TestMemoryGuardSerialisesLoads(t *testing.T) {
	a := realModel(t, "a", "a", 2, mb)
	b := realModel(t, "b", "b", 2, mb)
	w := realModel(t, "w", "w", 2, mb)
	probe := runtimetest.NewMemProbe(1 << 40)
	rt := newGuarded(t, probe, nil, a, b, w)
	if _, err := infer(context.Background(), rt, "w", nil, nil); err != nil {
		t.Fatal(err)
	}
	ctl(t, a).LoadGate.Arm()
	defer ctl(t, a).LoadGate.Release()
	first := make(chan error, 1)
	go func() { _, err := infer(context.Background(), rt, "a", nil, nil); first <- err }()
	if !ctl(t, a).LoadGate.WaitSeen(5 * time.Second) {
		t.Fatal("a's load never started")
	}
	calls := probe.Calls.Load()
	second := make(chan error, 1)
	go func() { _, err := infer(context.Background(), rt, "b", nil, nil); second <- err }()
	if _, err := infer(context.Background(), rt, "w", nil, nil); err != nil {
		t.Fatalf("warm model blocked by a guarded load: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if ctl(t, b).Loads.Load() != 0 || probe.Calls.Load() != calls {
		t.Fatal("b's load or memory check ran while a was loading")
	}
	ctl(t, a).LoadGate.Release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if probe.Calls.Load() != calls+1 {
		t.Errorf("memory checks for b: %d, want 1", probe.Calls.Load()-calls)
	}
}
