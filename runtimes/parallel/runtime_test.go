package parallel

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
)

var _ runtimes.Runtime = (*Runtime)(nil)

func TestStartupWarningNamesExperimentalScope(t *testing.T) {
	if strings.Contains(StartupWarning, "\n") || !strings.Contains(StartupWarning, "--parallel-jobs") ||
		!strings.Contains(StartupWarning, "experimental") {
		t.Fatalf("StartupWarning must be one line naming --parallel-jobs and its experimental scope: %q", StartupWarning)
	}
	rt := newRuntime(t, nil)
	if rt.Name() != "parallel" || !rt.LeaseBeforeStream() {
		t.Fatalf("Name %q LeaseBeforeStream %v", rt.Name(), rt.LeaseBeforeStream())
	}
}

func TestStartupSelectionRejectsInvalidSlots(t *testing.T) {
	for _, raw := range []string{`"2"`, "true", "null", "1.5", "0", "17", "-1"} {
		m := fixtureModel("m", fileName(t, "a"), 1, 0)
		m.Slots = config.Slots{Set: true, Raw: raw}
		cfg := config.Default()
		cfg.Models = []config.Model{m}
		_, err := New(runtimes.Options{Config: cfg})
		if err == nil || !strings.Contains(err.Error(), raw) {
			t.Fatalf("slots %s: %v, want a startup error naming the value", raw, err)
		}
	}
	for _, n := range []int{-1, 1, 16} { // absent, 1, 16
		cfg := config.Default()
		cfg.Models = []config.Model{fixtureModel("m", fileName(t, "b"), n, 0)}
		if _, err := New(runtimes.Options{Config: cfg}); err != nil {
			t.Fatalf("slots %d: %v", n, err)
		}
	}
	cfg := config.Default()
	cfg.Models = []config.Model{{ID: "m", Family: "no-such-family", Task: "tts", Mode: "offline"}}
	if _, err := New(runtimes.Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "no-such-family") {
		t.Fatalf("unknown family: %v", err)
	}
	if _, err := New(runtimes.Options{}); err == nil {
		t.Fatal("New without a config")
	}
}

func TestStartLoadsEagerModelsUpToTheResidentLimit(t *testing.T) {
	var models []config.Model
	for _, n := range []string{"a", "b", "c"} {
		m := fixtureModel(n, fileName(t, n), 2, 0)
		m.Lazy = false
		models = append(models, m)
	}
	lazy := fixtureModel("lazy", fileName(t, "lazy"), 1, 0)
	rt := newRuntime(t, func(c *config.Config) { c.MaxLoadedModels = 2 }, append(models, lazy)...)
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": true, "b": true, "c": false, "lazy": false}
	for _, st := range rt.Models() {
		if st.Loaded != want[st.Model.ID] {
			t.Fatalf("%s loaded %v, want %v", st.Model.ID, st.Loaded, want[st.Model.ID])
		}
	}
}

func TestUnknownModelIsNotFound(t *testing.T) {
	rt := newRuntime(t, nil)
	if _, err := rt.Acquire(t.Context(), "nope", nil); !apierror.Is(err, apierror.TypeNotFound) {
		t.Fatalf("Acquire: %v", err)
	}
	if _, ok := rt.Lookup("nope"); ok {
		t.Fatal("Lookup found an unknown model")
	}
	_, nf, _ := rt.UnloadModels(t.Context(), []string{"nope", "nope"})
	if len(nf) != 1 {
		t.Fatalf("not_found %v, want de-duplicated", nf)
	}
}

func TestIdleRetirementTriesOnly(t *testing.T) {
	old := minIdleTick
	minIdleTick = 10 * time.Millisecond
	defer func() { minIdleTick = old }()
	ctx := testCtx(t)
	a := fixtureModel("a", fileName(t, "a"), 2, 0)
	b := fixtureModel("b", fileName(t, "b"), 2, 0)
	rt := newRuntime(t, func(c *config.Config) { c.IdleUnloadMs = 60 }, a, b)
	for _, id := range []string{"a", "b"} {
		if _, err := infer(ctx, rt, id, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// b stays busy past the idle limit: it is skipped, a is retired.
	l, err := rt.Acquire(ctx, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "idle a retired", func() bool { return !status(t, rt, "a").Loaded })
	time.Sleep(100 * time.Millisecond)
	if !status(t, rt, "b").Loaded {
		t.Fatal("a busy model was retired")
	}
	l.Release()
	eventually(t, "b retired once idle", func() bool { return !status(t, rt, "b").Loaded })
	if ctl(t, a).Sessions.Load() != 0 || ctl(t, b).Sessions.Load() != 0 {
		t.Fatal("retired models kept sessions")
	}
	if _, err := infer(ctx, rt, "a", nil, nil); err != nil {
		t.Fatalf("reload after idle retirement: %v", err)
	}
}

func TestCloseRefusesNewWork(t *testing.T) {
	a := fixtureModel("a", fileName(t, "a"), 2, 0)
	rt := newRuntime(t, nil, a)
	if _, err := infer(t.Context(), rt, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if ctl(t, a).Sessions.Load() != 0 || ctl(t, a).Destructions.Load() != 1 {
		t.Fatal("Close did not unload")
	}
	if _, err := rt.Acquire(t.Context(), "a", nil); err == nil {
		t.Fatal("Acquire after Close succeeded")
	}
	if err := rt.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestLeaseCarriesBoundConfigAndReleasesOnce(t *testing.T) {
	ctx := testCtx(t)
	a := fixtureModel("m", fileName(t, "a"), 2, 0)
	a.BusyTimeoutMs = ms(1000)
	rt := newRuntime(t, nil, a)
	l, err := rt.Acquire(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Model().Path != a.Path || l.Session() == nil {
		t.Fatalf("lease model %+v", l.Model())
	}
	// Reconfiguration waits for the lease; the lease keeps its config.
	done := make(chan error, 1)
	goT(t, func() { _, err := rt.Register(ctx, fixtureModel("m", fileName(t, "b"), 2, 0)); done <- err })
	waitQueue(t, rt, "m", 0, 1)
	if l.Model().Path != a.Path {
		t.Fatal("lease config changed under it")
	}
	l.Release()
	l.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkDrained(t, rt)
	ctl(t, fixtureModel("m", fileName(t, "b"), 1, 0)).ReleaseAll()
}

func TestBusyTimeoutLayers(t *testing.T) {
	ctx := testCtx(t)
	a := fixtureModel("m", fileName(t, "a"), 2, 0)
	a.BusyTimeoutMs = ms(40) // model ceiling
	b := fixtureModel("n", fileName(t, "b"), 1, 0)
	rt := newRuntime(t, func(c *config.Config) { c.BusyTimeoutMs = 10_000 }, a, b)
	l, err := rt.Acquire(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := rt.Acquire(ctx, "m", nil) // both slots held: a third caller must queue
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond) // both holders are now overdue for the model's 40 ms
	start := time.Now()
	if _, err := rt.Acquire(ctx, "m", nil); !apierror.Is(err, apierror.TypeBusy) || !strings.Contains(err.Error(), "more than 40 ms") {
		t.Fatalf("request behind an overdue holder: %v", err)
	}
	if time.Since(start) > 30*time.Millisecond {
		t.Fatal("overdue rejection waited")
	}
	// A request override above the ceiling is capped by it.
	if _, err := rt.Acquire(ctx, "m", ms(5000)); !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("override above the ceiling: %v", err)
	}
	if err := rt.Unload(ctx, "m"); !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("unload with an overdue holder: %v", err)
	}
	// Bulk unload waits without limit for the overdue holder.
	bulk := make(chan []string, 1)
	goT(t, func() { u, _, _ := rt.UnloadModels(ctx, []string{"m"}); bulk <- u })
	waitQueue(t, rt, "m", 0, 1)
	l.Release()
	lb.Release()
	if u := <-bulk; len(u) != 1 || status(t, rt, "m").Loaded {
		t.Fatalf("bulk: %v", u)
	}
	// Server default applies to a model without a ceiling; a smaller
	// request override wins.
	l2, err := rt.Acquire(ctx, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := rt.Acquire(ctx, "n", ms(30)); !apierror.Is(err, apierror.TypeBusy) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("override: %v", err)
	}
	if el := time.Since(start); el < 30*time.Millisecond || el > 2*time.Second {
		t.Fatalf("override waited %v, want about 30 ms", el)
	}
	l2.Release()
	checkDrained(t, rt)
}
