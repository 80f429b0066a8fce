package legacy

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/families/fixture"
	"github.com/audioproof/audioproof/server/session"
)

// TestLazyLoadOnceUnderConcurrentFirstRequests: cold requests arriving
// together load the model once and share its one session.
func TestLazyLoadOnceUnderConcurrentFirstRequests(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	c := ctl(t, "m")
	c.LoadGate.Arm()
	defer c.LoadGate.Release()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			l, err := rt.Acquire(context.Background(), "m", nil)
			if err != nil {
				errs <- err
				return
			}
			if runText(t, l) != fileName(t, "m") {
				t.Error("wrong session")
			}
			l.Release()
		})
	}
	if !c.LoadGate.WaitSeen(5 * time.Second) {
		t.Fatal("no request reached the load")
	}
	if loaded(t, rt, "m") {
		t.Error("Loaded reported while the load is held")
	}
	c.LoadGate.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c.Loads.Load() != 1 {
		t.Errorf("Loads = %d, want 1", c.Loads.Load())
	}
	if c.Runs.Load() != 8 || !loaded(t, rt, "m") {
		t.Errorf("Runs = %d, loaded %v", c.Runs.Load(), loaded(t, rt, "m"))
	}
}

// TestStartLoadsNonLazyInOrderUpToLimit: Start loads the non-lazy models in
// order, only the first max_loaded_models of them.
func TestStartLoadsNonLazyInOrderUpToLimit(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want []string
	}{{0, []string{"b", "c", "d"}}, {2, []string{"b", "c"}}} {
		a, b, c, d := mdl(t, "a"), mdl(t, "b"), mdl(t, "c"), mdl(t, "d")
		b.Lazy, c.Lazy, d.Lazy = false, false, false
		cfg := cfgWith(0, a, b, c, d)
		cfg.MaxLoadedModels = tc.max
		rt := newRT(t, cfg)
		if err := rt.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range rt.Models() {
			if st.Loaded {
				got = append(got, st.Model.ID)
			}
			if st.Slots != nil {
				t.Errorf("%s: legacy reported slot fields", st.Model.ID)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("max %d: loaded %v, want %v", tc.max, got, tc.want)
		}
		rt.Close()
	}
}

func TestStartFailureNamesModel(t *testing.T) {
	m := mdl(t, "broken")
	m.Lazy = false
	ctl(t, "broken").FailLoad.Store(true)
	rt := newRT(t, cfgWith(0, m))
	err := rt.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Start: %v, want an error naming the model", err)
	}
}

// TestLoadFailureThenRetry: a failed load leaves the model unloaded with its
// server error type, and the next request loads it.
func TestLoadFailureThenRetry(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	c := ctl(t, "m")
	c.FailLoad.Store(true)
	_, err := rt.Acquire(context.Background(), "m", nil)
	wantType(t, err, apierror.TypeInternal, "loading model m failed", "injected load failure")
	if loaded(t, rt, "m") {
		t.Fatal("a failed load is reported loaded")
	}
	c.FailLoad.Store(false)
	l := mustAcquire(t, rt, "m", nil)
	l.Release()
	if c.Loads.Load() != 2 || !loaded(t, rt, "m") {
		t.Errorf("Loads=%d loaded=%v after retry", c.Loads.Load(), loaded(t, rt, "m"))
	}
}

// TestNullSessionClosesAssets: no primary session is a 500 and the assets
// are freed; a client-error load keeps its 400.
func TestLoadFailureKinds(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "null")))
	c := ctl(t, "null")
	c.NullSession.Store(true)
	_, err := rt.Acquire(context.Background(), "null", nil)
	wantType(t, err, apierror.TypeInternal, "no session")
	if c.Destructions.Load() != 1 || loaded(t, rt, "null") {
		t.Errorf("assets of a failed load not freed: destructions %d", c.Destructions.Load())
	}

	bad := mdl(t, "bad")
	bad.SessionOptions = map[string]string{"fixture_capacity": "99"}
	if _, err := rt.Register(context.Background(), bad); !apierror.Is(err, apierror.TypeInvalid) {
		t.Errorf("client-error load: %v, want invalid_request_error", err)
	}
	if _, ok := rt.Lookup("bad"); !ok {
		t.Error("a registration whose load failed must stay registered")
	}
}

// TestUnloadOrderAndIdempotence: unload closes the session before the
// assets, twice is fine, unknown is 404.
func TestUnloadOrderAndIdempotence(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	c := ctl(t, "m")
	mustAcquire(t, rt, "m", nil).Release()
	for i := range 2 {
		if err := rt.Unload(context.Background(), "m"); err != nil {
			t.Fatalf("unload %d: %v", i, err)
		}
	}
	if loaded(t, rt, "m") || c.Destructions.Load() != 1 || c.Sessions.Load() != 0 {
		t.Errorf("loaded=%v destructions=%d sessions=%d", loaded(t, rt, "m"), c.Destructions.Load(), c.Sessions.Load())
	}
	if c.PrematureModelDestruction.Load() {
		t.Error("assets closed before their session")
	}
	wantType(t, rt.Unload(context.Background(), "ghost"), apierror.TypeNotFound, "ghost")
	// Reload after unload uses a fresh session.
	l := mustAcquire(t, rt, "m", nil)
	runText(t, l)
	l.Release()
	if c.Loads.Load() != 2 || c.UseAfterClose.Load() {
		t.Errorf("Loads=%d UseAfterClose=%v", c.Loads.Load(), c.UseAfterClose.Load())
	}
}

// TestUnloadUsesPolicyTimeout: management unload waits under the busy
// timeout like a request and answers 503 when the run does not end.
func TestUnloadUsesPolicyTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(100, mdl(t, "m")))
		l := mustAcquire(t, rt, "m", nil)
		start := time.Now()
		wantType(t, rt.Unload(context.Background(), "m"), apierror.TypeBusy, "inference lock")
		if time.Since(start) != 100*time.Millisecond {
			t.Errorf("unload waited %v, want 100ms", time.Since(start))
		}
		if !loaded(t, rt, "m") {
			t.Error("a refused unload unloaded the model")
		}
		l.Release()
		if err := rt.Unload(context.Background(), "m"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBulkUnloadListsOnlyResident: only resident models are reported;
// unknown ids go to not_found; bulk unload waits without limit.
func TestBulkUnloadListsOnlyResident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(10, mdl(t, "a"), mdl(t, "b"), mdl(t, "c")))
		mustAcquire(t, rt, "a", nil).Release()
		mustAcquire(t, rt, "c", nil).Release()
		unloaded, notFound, err := rt.UnloadModels(context.Background(), []string{"c", "x", "b", "a", "a"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(unloaded, []string{"c", "a"}) || !slices.Equal(notFound, []string{"x"}) {
			t.Errorf("unloaded %v not_found %v, want [c a] [x]", unloaded, notFound)
		}
		all, err := rt.UnloadAll(context.Background())
		if err != nil || all == nil || len(all) != 0 {
			t.Errorf("UnloadAll on nothing resident: %v %v, want an empty list", all, err)
		}

		// A busy model: bulk unload waits past the 10 ms busy timeout.
		l := mustAcquire(t, rt, "b", nil)
		done := make(chan []string, 1)
		go func() {
			u, err := rt.UnloadAll(context.Background())
			if err != nil {
				t.Error(err)
			}
			done <- u
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case u := <-done:
			t.Fatalf("bulk unload did not wait for the busy model: %v", u)
		default:
		}
		l.Release()
		if u := <-done; !slices.Equal(u, []string{"b"}) {
			t.Errorf("unloaded %v, want [b]", u)
		}
	})
}

func TestBulkUnloadHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(0, mdl(t, "a"), mdl(t, "b")))
		mustAcquire(t, rt, "a", nil).Release()
		l := mustAcquire(t, rt, "b", nil)
		defer l.Release()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		u, _, err := rt.UnloadModels(ctx, []string{"a", "b"})
		if !strings.Contains(errString(err), "deadline") || !slices.Equal(u, []string{"a"}) {
			t.Errorf("unloaded %v err %v, want [a] and a deadline error", u, err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestReleaseIdempotentAndAfterClose: a second Release does nothing; a lease
// released after Close unloads its model; Acquire after Close is 503.
func TestReleaseIdempotentAndAfterClose(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "a"), mdl(t, "b")))
	ca, cb := ctl(t, "a"), ctl(t, "b")
	mustAcquire(t, rt, "b", nil).Release()
	l := mustAcquire(t, rt, "a", nil)
	l.Release()
	l.Release() // must not unlock someone else's hold
	l2 := mustAcquire(t, rt, "a", ptr(1))
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if cb.Destructions.Load() != 1 {
		t.Error("Close did not unload the idle model")
	}
	if ca.Destructions.Load() != 0 {
		t.Error("Close destroyed a model under a live lease")
	}
	l2.Release()
	l2.Release()
	l.Release()
	if ca.Destructions.Load() != 1 || ca.PrematureModelDestruction.Load() || ca.Sessions.Load() != 0 {
		t.Errorf("after release: destructions %d premature %v sessions %d", ca.Destructions.Load(), ca.PrematureModelDestruction.Load(), ca.Sessions.Load())
	}
	_, err := rt.Acquire(context.Background(), "a", nil)
	wantType(t, err, apierror.TypeBusy, "shutting down")
	if err := rt.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// legacyStacks returns the stacks of live goroutines that run code of this
// package (the idle checker, lock waiters, test helpers).
func legacyStacks() []string {
	buf := make([]byte, 1<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "runtimes/legacy.") && !strings.Contains(g, "legacyStacks") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return out
}

// TestNoGoroutineLeakAfterClose: the idle checker and every waiter are gone
// after Close.
func TestNoGoroutineLeakAfterClose(t *testing.T) {
	cfg := cfgWith(0, mdl(t, "a"), mdl(t, "b"))
	cfg.IdleUnloadMs = 20
	cfg.MaxLoadedModels = 1
	rt, err := New(runtimes.Options{Config: cfg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	for range 3 {
		mustAcquire(t, rt, "a", nil).Release()
		mustAcquire(t, rt, "b", nil).Release()
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := mustAcquire(t, rt, "a", nil)
	ch := acquireAsync(ctx, rt, "a", nil)
	cancel()
	<-ch
	l.Release()
	// A goroutine that has not run yet may show only its creator: poll.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(strings.Join(legacyStacks(), "\n"), "idleLoop"); {
		if time.Now().After(deadline) {
			t.Fatal("the idle checker is not running before Close")
		}
		time.Sleep(time.Millisecond)
	}
	rt.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := legacyStacks()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestModelsAndLookup: registration order, Loaded, no slot fields, copies.
func TestModelsAndLookup(t *testing.T) {
	m := mdl(t, "z")
	m.LoadOptions = map[string]string{"k": "v"}
	rt := newRT(t, cfgWith(0, m, mdl(t, "a")))
	mustAcquire(t, rt, "a", nil).Release()
	st := rt.Models()
	if len(st) != 2 || st[0].Model.ID != "z" || st[1].Model.ID != "a" || st[0].Loaded || !st[1].Loaded {
		t.Fatalf("Models() = %+v", st)
	}
	st[0].Model.LoadOptions["k"] = "changed"
	got, _ := rt.Lookup("z")
	if got.LoadOptions["k"] != "v" {
		t.Error("Models() exposed the runtime's own map")
	}
	if rt.Name() != "legacy" || rt.LeaseBeforeStream() {
		t.Error("Name/LeaseBeforeStream")
	}
}

// TestConstructionValidation: unknown families and unsupported tasks fail in
// New with the model and family named.
func TestConstructionValidation(t *testing.T) {
	m := mdl(t, "m")
	m.Family = "nosuch"
	_, err := New(runtimes.Options{Config: cfgWith(0, m), Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "model m") || !strings.Contains(err.Error(), `"nosuch"`) || !strings.Contains(err.Error(), "fixture") {
		t.Errorf("unknown family: %v", err)
	}
	ttsOnly := func(name string) (session.Family, bool) {
		if name == "tts_only" {
			return ttsOnlyFamily{}, true
		}
		return nil, false
	}
	m = mdl(t, "m")
	m.Family, m.Task = "tts_only", session.TaskASR
	_, err = New(runtimes.Options{Config: cfgWith(0, m), Logger: quiet, Family: ttsOnly})
	if err == nil || !strings.Contains(err.Error(), "does not support task") {
		t.Errorf("unsupported task: %v", err)
	}
	if _, err := New(runtimes.Options{Logger: quiet}); err == nil {
		t.Error("New without a config succeeded")
	}
}

// ttsOnlyFamily serves tts offline only, by wrapping the fixture.
type ttsOnlyFamily struct{ fixture.Family }

func (ttsOnlyFamily) Name() string { return "tts_only" }
func (ttsOnlyFamily) Supports(task session.Task, mode session.Mode) bool {
	return task == session.TaskTTS && mode == session.ModeOffline
}
