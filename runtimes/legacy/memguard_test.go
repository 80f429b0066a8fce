package legacy

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/runtimes/runtimetest"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/families/fixture"
)

const mb = 1 << 20

// fileModel is a lazy fixture model whose path is a real file of size bytes;
// require_file=true makes the fixture insist on it.
func fileModel(t *testing.T, id string, size int64) config.Model {
	m := mdl(t, id)
	m.Path = filepath.Join(t.TempDir(), fileName(t, id))
	runtimetest.SparseFile(t, m.Path, size)
	m.LoadOptions = map[string]string{"require_file": "true"}
	return m
}

// newGuardedRT builds a runtime whose memory guard reads probe.
func newGuardedRT(t *testing.T, cfg *config.Config, probe *runtimetest.MemProbe) *Runtime {
	t.Helper()
	rt, err := New(runtimes.Options{Config: cfg, Logger: quiet, FreeMemory: probe.Read})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// wantMemoryRefusal fails unless err is the guard's 503 for model id.
func wantMemoryRefusal(t *testing.T, err error, id string) {
	t.Helper()
	wantType(t, err, apierror.TypeMemory, `cannot load model "`+id+`"`, "min_free_memory_mb=", "MiB")
	if st := apierror.From(err).Status; st != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", st)
	}
}

// TestMemoryGuardRefusesThenRetries: a load that does not fit is refused
// with 503 insufficient_memory before the family is asked, leaves nothing
// loaded or held, and loads once memory frees up.
func TestMemoryGuardRefusesThenRetries(t *testing.T) {
	m := fileModel(t, "a", 2*mb) // estimate 131 MiB
	cfg := cfgWith(0, m)
	cfg.MinFreeMemoryMb = 1 // need 132 MiB
	probe := runtimetest.NewMemProbe(132*mb - 1)
	rt := newGuardedRT(t, cfg, probe)

	_, err := rt.Acquire(context.Background(), "a", nil)
	wantMemoryRefusal(t, err, "a")
	c := ctl(t, "a")
	if c.Loads.Load() != 0 || c.Sessions.Load() != 0 || c.Destructions.Load() != 0 || loaded(t, rt, "a") {
		t.Fatalf("refused load left state: loads=%d sessions=%d destructions=%d loaded=%v",
			c.Loads.Load(), c.Sessions.Load(), c.Destructions.Load(), loaded(t, rt, "a"))
	}
	// Refused again, at once: the model's lock was released.
	_, err = rt.Acquire(context.Background(), "a", ptr(1000))
	wantMemoryRefusal(t, err, "a")

	probe.Free.Store(132 * mb)
	l := mustAcquire(t, rt, "a", nil)
	if runText(t, l) != fileName(t, "a") {
		t.Error("wrong session after retry")
	}
	l.Release()
	if c.Loads.Load() != 1 || !loaded(t, rt, "a") {
		t.Fatalf("retry: loads=%d loaded=%v", c.Loads.Load(), loaded(t, rt, "a"))
	}
	// A resident model is not checked again.
	probe.Free.Store(0)
	calls := probe.Calls.Load()
	mustAcquire(t, rt, "a", nil).Release()
	if probe.Calls.Load() != calls {
		t.Error("the guard measured memory for a model already loaded")
	}
}

// TestMemoryGuardOffNeverRefuses: min_free_memory_mb=0 never reads memory
// and never refuses.
func TestMemoryGuardOffNeverRefuses(t *testing.T) {
	cfg := cfgWith(0, fileModel(t, "a", 64*mb))
	probe := runtimetest.NewMemProbe(0)
	rt := newGuardedRT(t, cfg, probe)
	mustAcquire(t, rt, "a", nil).Release()
	if probe.Calls.Load() != 0 {
		t.Errorf("guard off read free memory %d times", probe.Calls.Load())
	}
}

// TestMemoryGuardEvictionNotUndone: with max_loaded_models the LRU model is
// evicted first; a memory refusal after that does not bring it back.
func TestMemoryGuardEvictionNotUndone(t *testing.T) {
	cfg := cfgWith(0, fileModel(t, "a", mb), fileModel(t, "b", 64*mb))
	cfg.MaxLoadedModels = 1
	cfg.MinFreeMemoryMb = 1
	probe := runtimetest.NewMemProbe(1 << 40)
	rt := newGuardedRT(t, cfg, probe)
	mustAcquire(t, rt, "a", nil).Release()

	probe.Free.Store(200 * mb) // b needs 1.5 × 64 + 128 + 1 = 225 MiB
	_, err := rt.Acquire(context.Background(), "b", nil)
	wantMemoryRefusal(t, err, "b")
	if loaded(t, rt, "a") || ctl(t, "a").Destructions.Load() != 1 {
		t.Error("a must stay evicted after b's refusal")
	}
	if loaded(t, rt, "b") || ctl(t, "b").Loads.Load() != 0 {
		t.Error("b was loaded despite the refusal")
	}
	probe.Free.Store(225 * mb)
	mustAcquire(t, rt, "b", nil).Release()
	if !loaded(t, rt, "b") {
		t.Error("b not loaded on retry")
	}
}

// TestMemoryGuardFolders: the weights of a folder are model.gguf, else the
// only *.gguf, else the whole tree; several *.gguf without model.gguf are
// not guessed at (no refusal).
func TestMemoryGuardFolders(t *testing.T) {
	root := t.TempDir()
	folder := func(id string, files map[string]int64) config.Model {
		m := mdl(t, id)
		m.Path = filepath.Join(root, fileName(t, id))
		for name, size := range files {
			runtimetest.SparseFile(t, filepath.Join(m.Path, name), size)
		}
		m.LoadOptions = map[string]string{"require_file": "true"}
		return m
	}
	// 200 MiB free, 1 MiB headroom: weights up to 47.3 MiB fit.
	models := []struct {
		m      config.Model
		refuse bool
	}{
		{folder("named-big", map[string]int64{"model.gguf": 64 * mb, "extra.gguf": 1}), true},
		{folder("named-small", map[string]int64{"model.gguf": mb, "extra.gguf": 64 * mb}), false},
		{folder("sole-big", map[string]int64{"w.gguf": 64 * mb, "README": 1}), true},
		{folder("sole-small", map[string]int64{"w.gguf": mb, "big.bin": 64 * mb}), false},
		{folder("ambiguous", map[string]int64{"a.gguf": 64 * mb, "b.gguf": 64 * mb}), false},
		{folder("tree-big", map[string]int64{"x.bin": 30 * mb, "sub/y.bin": 30 * mb}), true},
		{folder("tree-small", map[string]int64{"x.bin": 10 * mb, "sub/y.bin": 10 * mb}), false},
	}
	cfg := cfgWith(0)
	cfg.MinFreeMemoryMb = 1
	for _, c := range models {
		cfg.Models = append(cfg.Models, c.m)
	}
	rt := newGuardedRT(t, cfg, runtimetest.NewMemProbe(200*mb))
	for _, c := range models {
		l, err := rt.Acquire(context.Background(), c.m.ID, nil)
		if c.refuse {
			wantMemoryRefusal(t, err, c.m.ID)
			if fixture.Control(filepath.Base(c.m.Path)).Loads.Load() != 0 {
				t.Errorf("%s: family asked to load a refused model", c.m.ID)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.m.ID, err)
			continue
		}
		l.Release()
	}
}

// TestMemoryGuardAtStartupAndRegister: an eager model that does not fit is
// a startup error; a registration that does not fit answers 503 and leaves
// the entry registered and unloaded, ready for a retry.
func TestMemoryGuardAtStartupAndRegister(t *testing.T) {
	eager := fileModel(t, "eager", 8*mb)
	eager.Lazy = false
	cfg := cfgWith(0, eager)
	cfg.MinFreeMemoryMb = 1
	probe := runtimetest.NewMemProbe(100 * mb)
	rt := newGuardedRT(t, cfg, probe)
	err := rt.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), `cannot load model "eager"`) {
		t.Fatalf("Start = %v, want the memory refusal", err)
	}

	m := fileModel(t, "new", 8*mb)
	_, err = rt.Register(context.Background(), m)
	wantMemoryRefusal(t, err, "new")
	if _, ok := rt.Lookup("new"); !ok || loaded(t, rt, "new") || ctl(t, "new").Loads.Load() != 0 {
		t.Fatal("refused registration must stay registered and unloaded")
	}
	probe.Free.Store(1 << 40)
	if _, err := rt.Register(context.Background(), m); err != nil || !loaded(t, rt, "new") {
		t.Fatalf("retry: %v", err)
	}
}

// TestMemoryGuardDeviceMemory: the device's free memory is checked as well.
func TestMemoryGuardDeviceMemory(t *testing.T) {
	cfg := cfgWith(0, fileModel(t, "a", 2*mb))
	cfg.MinFreeMemoryMb = 1
	dev := runtimetest.NewMemProbe(100 * mb)
	rt, err := New(runtimes.Options{Config: cfg, Logger: quiet, FreeMemory: runtimetest.NewMemProbe(1 << 40).Read,
		FreeDeviceMemory: func() (uint64, bool, error) { f, err := dev.Read(); return f, true, err }})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, err = rt.Acquire(context.Background(), "a", nil)
	wantMemoryRefusal(t, err, "a")
	if !strings.Contains(err.Error(), "memory on the compute device") {
		t.Errorf("refusal does not say the device is short: %v", err)
	}
	dev.Free.Store(132 * mb)
	mustAcquire(t, rt, "a", nil).Release()
}

// TestMemoryGuardSerialisesLoads: with the guard on, a second model's load
// (and memory check) waits for the first load to finish, so two loads never
// both count the same free memory.
func TestMemoryGuardSerialisesLoads(t *testing.T) {
	cfg := cfgWith(0, fileModel(t, "a", mb), fileModel(t, "b", mb))
	cfg.MinFreeMemoryMb = 1
	probe := runtimetest.NewMemProbe(1 << 40)
	rt := newGuardedRT(t, cfg, probe)
	ca, cb := ctl(t, "a"), ctl(t, "b")
	ca.LoadGate.Arm()
	defer ca.LoadGate.Release()
	first := acquireAsync(context.Background(), rt, "a", nil)
	if !ca.LoadGate.WaitSeen(5 * time.Second) {
		t.Fatal("a's load never started")
	}
	calls := probe.Calls.Load()
	second := acquireAsync(context.Background(), rt, "b", nil)
	time.Sleep(50 * time.Millisecond)
	if cb.Loads.Load() != 0 || probe.Calls.Load() != calls {
		t.Fatal("b's load or memory check ran while a was loading")
	}
	ca.LoadGate.Release()
	for _, ch := range []<-chan acquired{first, second} {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.lease.Release()
	}
	if cb.Loads.Load() != 1 || probe.Calls.Load() != calls+1 {
		t.Errorf("b: loads=%d, memory checks=%d", cb.Loads.Load(), probe.Calls.Load()-calls)
	}
}
