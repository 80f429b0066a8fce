package parallel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// forSlots runs scenario as one subtest per pool size in slots, named
// "slots=<n>" as the scenarios have always been.
func forSlots(t *testing.T, slots []int, scenario func(t *testing.T, c int)) {
	for _, c := range slots {
		t.Run(fmt.Sprintf("slots=%d", c), func(t *testing.T) { scenario(t, c) })
	}
}

// singleModel builds a runtime over one lazy fixture model "m" (the test's
// file "a") with the given slots, and returns the runtime, the model and
// its fixture control.
func singleModel(t *testing.T, slots int) (*Runtime, config.Model, *ctlT) {
	t.Helper()
	a := fixtureModel("m", fileName(t, "a"), slots, 0)
	rt := newRuntime(t, nil, a)
	return rt, a, ctl(t, a)
}

// runHeld acquires id and runs one request, logging "<name>:<text>" before
// it releases the lease.
func runHeld(ctx context.Context, rt *Runtime, id, name string, log *events) error {
	l, err := rt.Acquire(ctx, id, nil)
	if err != nil {
		log.add("%s:err", name)
		return err
	}
	defer l.Release()
	res, err := l.Session().Run(ctx, &session.Request{Input: "x"}, nil)
	if err != nil {
		log.add("%s:err", name)
		return err
	}
	log.add("%s:%s", name, res.Text)
	return nil
}

func TestOlderWorkBeforeManagement(t *testing.T) {
	for _, c := range capacities {
		for _, op := range []string{"unload", "reconfigure"} {
			t.Run(fmt.Sprintf("slots=%d/%s", c, op), func(t *testing.T) {
				ctx := testCtx(t)
				rt, a, ca := singleModel(t, c)
				b := fixtureModel("m", fileName(t, "b"), c, 0)
				if _, err := infer(ctx, rt, "m", nil, nil); err != nil {
					t.Fatal(err)
				}
				ca.RunGate.Arm()
				var log events
				var wg sync.WaitGroup
				older := c + 2
				for i := 0; i < older; i++ {
					wg.Add(1)
					goT(t, func() { defer wg.Done(); _ = runHeld(ctx, rt, "m", fmt.Sprintf("old%d", i), &log) })
					if i < c {
						eventually(t, "running requests", func() bool { return ca.Running() == int64(i+1) })
					} else {
						waitQueue(t, rt, "m", i+1-c, 0)
					}
				}
				wg.Add(1)
				goT(t, func() {
					defer wg.Done()
					var err error
					if op == "unload" {
						err = rt.Unload(ctx, "m")
					} else {
						var re bool
						re, err = rt.Register(ctx, b)
						if !re {
							t.Errorf("reconfigured = false")
						}
					}
					if err != nil {
						t.Errorf("%s: %v", op, err)
					}
					log.add("manager")
				})
				waitQueue(t, rt, "m", older-c, 1)
				wg.Add(1)
				goT(t, func() { defer wg.Done(); _ = runHeld(ctx, rt, "m", "late", &log) })
				waitQueue(t, rt, "m", older-c+1, 1)
				if got := status(t, rt, "m").Slots.Queued; got != older-c+1 {
					t.Fatalf("queued_requests = %d, want %d (managers excluded)", got, older-c+1)
				}
				ca.RunGate.Release()
				wg.Wait()
				got := log.get()
				// The manager returns after every older request; the late
				// request may log before the manager does (it is granted
				// when the barrier releases), but it sees the manager's
				// effect: the new config, or a reload.
				mi := log.index("manager")
				if mi < older {
					t.Fatalf("manager finished at %d, before all %d older requests: %v", mi, older, got)
				}
				for i := 0; i < older; i++ {
					if log.index(fmt.Sprintf("old%d:%s", i, ctl(t, a).Name())) < 0 {
						t.Fatalf("older request %d did not run on the old config: %v", i, got)
					}
				}
				want := "late:" + ctl(t, a).Name()
				if op == "reconfigure" {
					want = "late:" + ctl(t, b).Name()
				}
				if li := log.index(want); li < older {
					t.Fatalf("late request: want %q after the older requests: %v", want, got)
				}
				if op == "unload" && ca.Loads.Load() != 2 {
					t.Fatalf("loads = %d, want 2 (the late request reloads)", ca.Loads.Load())
				}
				checkDrained(t, rt)
			})
		}
	}
}

func TestOverlappingManagers(t *testing.T) {
	forSlots(t, capacities, func(t *testing.T, c int) {
		ctx := testCtx(t)
		rt, _, ca := singleModel(t, c)
		ca.RunGate.Arm()
		var log events
		var wg sync.WaitGroup
		wg.Add(1)
		goT(t, func() { defer wg.Done(); _ = runHeld(ctx, rt, "m", "first", &log) })
		eventually(t, "running", func() bool { return ca.Running() == 1 })
		names := []string{"b", "c", "d"}
		for i, n := range names {
			m := fixtureModel("m", fileName(t, n), c, 0)
			wg.Add(1)
			goT(t, func() {
				defer wg.Done()
				if _, err := rt.Register(ctx, m); err != nil {
					t.Errorf("register %s: %v", n, err)
				}
				log.add("register-%s", n)
			})
			waitQueue(t, rt, "m", 0, i+1)
		}
		ca.RunGate.Release()
		wg.Wait()
		// Each manager returns when its successor may already run, so
		// the log shows only that the older request went first; the
		// order of the managers shows in their effect: b and c were
		// each loaded once and replaced, d serves.
		got := log.get()
		if len(got) != 4 || got[0] != "first:"+ca.Name() {
			t.Fatalf("order %v: the running request must finish before any manager", got)
		}
		text, err := infer(ctx, rt, "m", nil, nil)
		if err != nil || text != fileName(t, "d") {
			t.Fatalf("after the managers: %q, %v; want the last registration %q", text, err, fileName(t, "d"))
		}
		for _, n := range []string{"b", "c"} {
			c := ctl(t, fixtureModel("m", fileName(t, n), 1, 0))
			if c.Sessions.Load() != 0 || c.Destructions.Load() != 1 {
				t.Fatalf("config %s: %d live sessions, %d destructions; want replaced once", n, c.Sessions.Load(), c.Destructions.Load())
			}
		}
		checkDrained(t, rt)
	})
}

func TestBulkReleasesIdleFirst(t *testing.T) {
	forSlots(t, capacities, func(t *testing.T, c int) {
		ctx := testCtx(t)
		a := fixtureModel("a", fileName(t, "a"), c, 0)
		b := fixtureModel("b", fileName(t, "b"), c, 0)
		rt := newRuntime(t, nil, a, b)
		ca, cb := ctl(t, a), ctl(t, b)
		if _, err := infer(ctx, rt, "b", nil, nil); err != nil {
			t.Fatal(err)
		}
		ca.LoadGate.Arm()
		reqErr := make(chan error, 1)
		goT(t, func() { _, err := infer(ctx, rt, "a", nil, nil); reqErr <- err })
		if !ca.LoadGate.WaitSeen(2 * time.Second) {
			t.Fatal("load of a never started")
		}
		type bulk struct {
			unloaded, notFound []string
		}
		res := make(chan bulk, 1)
		goT(t, func() {
			u, nf, err := rt.UnloadModels(ctx, []string{"a", "b", "a", "nope", "b"})
			if err != nil {
				t.Errorf("bulk: %v", err)
			}
			res <- bulk{u, nf}
		})
		eventually(t, "idle model b unloaded first", func() bool { return cb.Destructions.Load() == 1 })
		if ca.LoadGate.Waiting() != 1 || status(t, rt, "b").Loaded {
			t.Fatalf("b not released while a loads (a waiting %d, b loaded %v)", ca.LoadGate.Waiting(), status(t, rt, "b").Loaded)
		}
		ca.LoadGate.Release()
		if err := <-reqErr; err != nil {
			t.Fatalf("request older than the bulk unload: %v", err)
		}
		r := <-res
		if !slices.Equal(r.unloaded, []string{"a", "b"}) || !slices.Equal(r.notFound, []string{"nope"}) {
			t.Fatalf("unloaded %v not_found %v", r.unloaded, r.notFound)
		}
		if status(t, rt, "a").Loaded || ca.Destructions.Load() != 1 || ca.Sessions.Load() != 0 {
			t.Fatal("a not unloaded after its load")
		}
		// Already unloaded models are still listed (parallel semantics).
		u, _, _ := rt.UnloadModels(ctx, []string{"b"})
		if !slices.Equal(u, []string{"b"}) {
			t.Fatalf("second bulk: %v", u)
		}
		checkDrained(t, rt)
	})
}

func TestRetiringResident(t *testing.T) {
	for _, limit := range []int{1, 2} {
		for _, c := range capacities {
			t.Run(fmt.Sprintf("max_loaded_models=%d/slots=%d", limit, c), func(t *testing.T) {
				ctx := testCtx(t)
				var models []config.Model
				for i := 0; i <= limit; i++ {
					models = append(models, fixtureModel(fmt.Sprintf("m%d", i), fileName(t, fmt.Sprint(i)), c, 0))
				}
				rt := newRuntime(t, func(cfg *config.Config) { cfg.MaxLoadedModels = limit }, models...)
				for i := 0; i < limit; i++ {
					if _, err := infer(ctx, rt, models[i].ID, nil, nil); err != nil {
						t.Fatal(err)
					}
					time.Sleep(2 * time.Millisecond) // distinct last-use times
				}
				c0 := ctl(t, models[0])
				c0.CloseGate.Arm()
				// Loading one more retires the least recently used (m0); its
				// slow teardown does not block the load.
				if _, err := infer(ctx, rt, models[limit].ID, nil, nil); err != nil {
					t.Fatalf("load under the resident limit: %v", err)
				}
				if !c0.CloseGate.WaitSeen(2 * time.Second) {
					t.Fatal("m0 was not retired")
				}
				loaded := 0
				for _, st := range rt.Models() {
					if st.Loaded {
						loaded++
					}
				}
				if loaded != limit || status(t, rt, "m0").Loaded {
					t.Fatalf("%d loaded (m0 loaded %v), want %d with m0 retired", loaded, status(t, rt, "m0").Loaded, limit)
				}
				if limit == 2 && !status(t, rt, "m1").Loaded {
					t.Fatal("over-eviction: m1 was retired too")
				}
				if st := status(t, rt, "m0"); st.Slots.MaxParallelSlots != nil {
					t.Fatal("retiring m0 still advertises capacity")
				}
				// Every resident busy: the next load cannot evict and gets 503.
				var holds []runtimes.Lease
				for i := 1; i <= limit; i++ {
					l, err := rt.Acquire(ctx, models[i].ID, nil)
					if err != nil {
						t.Fatal(err)
					}
					holds = append(holds, l)
				}
				c0.CloseGate.Release()
				eventually(t, "m0 destroyed", func() bool { return c0.Destructions.Load() == 1 })
				_, err := infer(ctx, rt, "m0", nil, nil)
				if !apierror.Is(err, apierror.TypeBusy) || !strings.Contains(err.Error(), "max_loaded_models") {
					t.Fatalf("load with every resident busy: %v, want server_busy", err)
				}
				for _, l := range holds {
					l.Release()
				}
				if _, err := infer(ctx, rt, "m0", nil, nil); err != nil {
					t.Fatalf("reload once a resident is idle: %v", err)
				}
				checkDrained(t, rt)
			})
		}
	}
}

func TestRejectedPreparationReleasesLease(t *testing.T) {
	forSlots(t, capacities, func(t *testing.T, c int) {
		ctx := testCtx(t)
		rt, _, ca := singleModel(t, c)
		ca.FailPrepare.Store(true)
		for i := 0; i < c+2; i++ {
			_, err := infer(ctx, rt, "m", ms(100), nil)
			if !apierror.Is(err, apierror.TypeInvalid) {
				t.Fatalf("rejected preparation: %v, want invalid_request_error", err)
			}
		}
		checkDrained(t, rt)
		ca.FailPrepare.Store(false)
		if _, err := infer(ctx, rt, "m", ms(100), nil); err != nil {
			t.Fatal(err)
		}
		if err := rt.Unload(ctx, "m"); err != nil {
			t.Fatalf("unload after rejected preparations: %v", err)
		}
	})
}

func TestLoadingAndInferenceFailuresReleaseOwnership(t *testing.T) {
	type fault struct {
		name    string
		set     func(c *ctlT, on bool)
		minSlot int
		atLoad  bool
	}
	faults := []fault{
		{"fail_load", func(c *ctlT, on bool) { c.FailLoad.Store(on) }, 1, true},
		{"null_session", func(c *ctlT, on bool) { c.NullSession.Store(on) }, 1, true},
		{"fail_clone", func(c *ctlT, on bool) { c.FailClone.Store(on) }, 3, true},
		{"fail_run", func(c *ctlT, on bool) { c.FailRun.Store(on) }, 1, false},
	}
	for _, c := range capacities {
		for _, f := range faults {
			if c < f.minSlot {
				continue
			}
			t.Run(fmt.Sprintf("slots=%d/%s", c, f.name), func(t *testing.T) {
				ctx := testCtx(t)
				rt, _, ca := singleModel(t, c)
				f.set(ca, true)
				var wg sync.WaitGroup
				for i := 0; i < c; i++ {
					wg.Add(1)
					goT(t, func() {
						defer wg.Done()
						if _, err := infer(ctx, rt, "m", nil, nil); err == nil {
							t.Errorf("request succeeded with %s", f.name)
						} else if apierror.From(err).Status != 500 {
							t.Errorf("%s: status %d, want 500: %v", f.name, apierror.From(err).Status, err)
						}
					})
				}
				wg.Wait()
				checkDrained(t, rt)
				if f.atLoad {
					if status(t, rt, "m").Loaded || ca.Sessions.Load() != 0 {
						t.Fatalf("partial pool after %s: loaded %v, live sessions %d", f.name, status(t, rt, "m").Loaded, ca.Sessions.Load())
					}
					if ca.Destructions.Load() != ca.Loads.Load() && f.name != "fail_load" {
						t.Fatalf("assets leaked: %d loads, %d destructions", ca.Loads.Load(), ca.Destructions.Load())
					}
				}
				f.set(ca, false)
				if text, err := infer(ctx, rt, "m", nil, nil); err != nil || text != ca.Name() {
					t.Fatalf("retry: %q, %v", text, err)
				}
				// A replacement that fails after the commit leaves the new
				// config registered and unloaded; retrying it loads it.
				b := fixtureModel("m", fileName(t, "b"), c, 0)
				cb := ctl(t, b)
				f.set(cb, true)
				_, err := rt.Register(ctx, b)
				if f.atLoad {
					if err == nil {
						t.Fatalf("replacement with %s succeeded", f.name)
					}
					if cfg, _ := rt.Lookup("m"); cfg.Path != b.Path && c == 1 {
						t.Fatalf("post-commit failure did not keep the new config: %s", cfg.Path)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				f.set(cb, false)
				if _, err := rt.Register(ctx, b); err != nil {
					t.Fatalf("replacement retry: %v", err)
				}
				if text, err := infer(ctx, rt, "m", nil, nil); err != nil || text != cb.Name() {
					t.Fatalf("after replacement: %q, %v", text, err)
				}
				checkDrained(t, rt)
			})
		}
	}
}

func TestOverlappingBulkOperations(t *testing.T) {
	forSlots(t, capacities, func(t *testing.T, c int) {
		ctx := testCtx(t)
		var models []config.Model
		for _, n := range []string{"a", "b", "c"} {
			models = append(models, fixtureModel(n, fileName(t, n), c, 0))
		}
		rt := newRuntime(t, nil, models...)
		var wg sync.WaitGroup
		for _, m := range models {
			ctl(t, m).RunGate.Arm()
			wg.Add(1)
			goT(t, func() { defer wg.Done(); _, _ = infer(ctx, rt, m.ID, nil, nil) })
			eventually(t, "running", func() bool { return ctl(t, m).Running() == 1 })
		}
		results := make(chan []string, 2)
		for _, sel := range [][]string{{"a", "b", "c", "a"}, {"c", "b", "a", "c", "b"}} {
			wg.Add(1)
			goT(t, func() {
				defer wg.Done()
				u, nf, err := rt.UnloadModels(ctx, sel)
				if err != nil || len(nf) != 0 {
					t.Errorf("bulk %v: %v %v", sel, nf, err)
				}
				results <- u
			})
		}
		for _, m := range models {
			waitQueue(t, rt, m.ID, 0, 2)
		}
		for _, m := range models {
			ctl(t, m).RunGate.Release()
		}
		done := make(chan struct{})
		goT(t, func() { wg.Wait(); close(done) })
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("overlapping bulk unloads deadlocked\n%s", allStacks())
		}
		got := []string{strings.Join(<-results, ","), strings.Join(<-results, ",")}
		slices.Sort(got)
		if !slices.Equal(got, []string{"a,b,c", "c,b,a"}) {
			t.Fatalf("results %v, want de-duplicated selections in order", got)
		}
		for _, m := range models {
			if status(t, rt, m.ID).Loaded || ctl(t, m).Destructions.Load() != 1 {
				t.Fatalf("%s not unloaded exactly once", m.ID)
			}
		}
		checkDrained(t, rt)
	})
}

func TestBulkPublicationExcludesOnlyOtherBulkCalls(t *testing.T) {
	ctx := testCtx(t)
	var models []config.Model
	for _, n := range []string{"a", "b", "c"} {
		models = append(models, fixtureModel(n, fileName(t, n), 2, 0))
	}
	rt := newRuntime(t, nil, models...)
	for _, m := range models {
		if _, err := infer(ctx, rt, m.ID, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	ca := ctl(t, models[0])
	ca.RunGate.Arm()
	held := make(chan error, 1)
	goT(t, func() { _, err := infer(ctx, rt, "a", nil, nil); held <- err })
	eventually(t, "a running", func() bool { return ca.Running() == 1 })
	bulkDone := make(chan struct{})
	goT(t, func() { _, _, _ = rt.UnloadModels(ctx, []string{"a"}); close(bulkDone) })
	waitQueue(t, rt, "a", 0, 1)
	// While that bulk waits for a: other work and another bulk proceed.
	if err := rt.Unload(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := infer(ctx, rt, "c", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Register(ctx, fixtureModel("d", fileName(t, "d"), 1, 0)); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := rt.UnloadModels(ctx, []string{"c", "d"}); !slices.Equal(u, []string{"c", "d"}) {
		t.Fatalf("second bulk: %v", u)
	}
	select {
	case <-bulkDone:
		t.Fatal("bulk unload of a finished while a was running")
	default:
	}
	ca.RunGate.Release()
	<-bulkDone
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	checkDrained(t, rt)
	ctl(t, fixtureModel("d", fileName(t, "d"), 1, 0)).ReleaseAll()
}

func TestGuardedLoadingDoesNotBlockWarmModel(t *testing.T) {
	for _, limit := range []int{0, 2} {
		t.Run(fmt.Sprintf("max_loaded_models=%d", limit), func(t *testing.T) {
			ctx := testCtx(t)
			a := fixtureModel("warm", fileName(t, "warm"), 2, 0)
			b := fixtureModel("cold", fileName(t, "cold"), 2, 0)
			rt := newRuntime(t, func(cfg *config.Config) { cfg.MaxLoadedModels = limit }, a, b)
			if _, err := infer(ctx, rt, "warm", nil, nil); err != nil {
				t.Fatal(err)
			}
			cb := ctl(t, b)
			cb.LoadGate.Arm()
			coldErr := make(chan error, 1)
			goT(t, func() { _, err := infer(ctx, rt, "cold", nil, nil); coldErr <- err })
			if !cb.LoadGate.WaitSeen(2 * time.Second) {
				t.Fatal("cold load did not start")
			}
			for i := 0; i < 5; i++ {
				if _, err := infer(ctx, rt, "warm", ms(500), nil); err != nil {
					t.Fatalf("warm model blocked by a cold load: %v", err)
				}
			}
			_ = rt.Models()
			if _, ok := rt.Lookup("cold"); !ok {
				t.Fatal("lookup")
			}
			cb.LoadGate.Release()
			if err := <-coldErr; err != nil {
				t.Fatal(err)
			}
			checkDrained(t, rt)
		})
	}
}

func TestInvalidReconfigurationPreservesLiveState(t *testing.T) {
	ctx := testCtx(t)
	rt, a, ca := singleModel(t, 2)
	if _, err := infer(ctx, rt, "m", nil, nil); err != nil {
		t.Fatal(err)
	}
	bad := func(edit func(*config.Model)) config.Model {
		m := fixtureModel("m", fileName(t, "b"), 2, 0)
		edit(&m)
		return m
	}
	cases := map[string]config.Model{
		"unknown family": bad(func(m *config.Model) { m.Family = "no-such-family" }),
		"slots string":   bad(func(m *config.Model) { m.Slots = config.Slots{Set: true, Raw: `"2"`} }),
		"slots true":     bad(func(m *config.Model) { m.Slots = config.Slots{Set: true, Raw: "true"} }),
		"slots null":     bad(func(m *config.Model) { m.Slots = config.Slots{Set: true, Raw: "null"} }),
		"slots 1.5":      bad(func(m *config.Model) { m.Slots = config.Slots{Set: true, Raw: "1.5"} }),
		"slots 0":        bad(func(m *config.Model) { m.Slots = config.Slots{Set: true, Raw: "0"} }),
		"slots 17":       bad(func(m *config.Model) { m.Slots = config.Slots{Set: true, Raw: "17"} }),
		"bad capacity option": bad(func(m *config.Model) {
			m.SessionOptions = map[string]string{"fixture_capacity": "many"}
		}),
	}
	for name, m := range cases {
		_, err := rt.Register(ctx, m)
		if e := apierror.From(err); err == nil || e.Status != 400 {
			t.Fatalf("%s: %v, want 400", name, err)
		}
		if name == "unknown family" && !strings.Contains(err.Error(), "no-such-family") {
			t.Fatalf("error does not name the family: %v", err)
		}
		if strings.HasPrefix(name, "slots ") && !strings.Contains(err.Error(), m.Slots.Raw) {
			t.Fatalf("error does not name the value %s: %v", m.Slots.Raw, err)
		}
		st := status(t, rt, "m")
		if !st.Loaded || st.Model.Path != a.Path || st.Slots.Configured != 2 {
			t.Fatalf("%s changed live state: %+v", name, st)
		}
	}
	// A replacement whose private load fails before the commit keeps the
	// old pool.
	b := fixtureModel("m", fileName(t, "b"), 2, 0)
	ctl(t, b).FailLoad.Store(true)
	if _, err := rt.Register(ctx, b); err == nil {
		t.Fatal("failing replacement accepted")
	}
	ctl(t, b).ReleaseAll()
	if st := status(t, rt, "m"); !st.Loaded || st.Model.Path != a.Path || ca.Destructions.Load() != 0 || ca.Loads.Load() != 1 {
		t.Fatalf("failed probe touched the live model: %+v destructions %d", st, ca.Destructions.Load())
	}
	if text, err := infer(ctx, rt, "m", nil, nil); err != nil || text != ca.Name() {
		t.Fatalf("live model: %q %v", text, err)
	}
	checkDrained(t, rt)
}

func TestRegistrationIsVisibleWhileLoading(t *testing.T) {
	ctx := testCtx(t)
	rt := newRuntime(t, nil)
	x := fixtureModel("x", fileName(t, "x"), 2, 0)
	cx := ctl(t, x)
	defer cx.ReleaseAll()
	cx.LoadGate.Arm()
	first := make(chan error, 1)
	goT(t, func() { _, err := rt.Register(ctx, x); first <- err })
	if !cx.LoadGate.WaitSeen(2 * time.Second) {
		t.Fatal("registration load did not start")
	}
	st := status(t, rt, "x")
	if st.Loaded || st.Slots.MaxParallelSlots != nil {
		t.Fatalf("loading model reported loaded: %+v", st)
	}
	second := make(chan error, 1)
	goT(t, func() { _, err := rt.Register(ctx, x); second <- err })
	waitQueue(t, rt, "x", 0, 1)
	reqErr := make(chan error, 1)
	goT(t, func() { _, err := infer(ctx, rt, "x", nil, nil); reqErr <- err })
	waitQueue(t, rt, "x", 1, 1)
	cx.LoadGate.Release()
	for _, c := range []chan error{first, second, reqErr} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if cx.Loads.Load() != 1 {
		t.Fatalf("loads = %d, want one shared load", cx.Loads.Load())
	}
	if st := status(t, rt, "x"); !st.Loaded || st.Slots.MaxParallelSlots == nil || *st.Slots.MaxParallelSlots != 4 {
		t.Fatalf("after load: %+v", st)
	}
	checkDrained(t, rt)
}

func TestLivePolicyDoesNotHoldRegistryLock(t *testing.T) {
	ctx := testCtx(t)
	a := fixtureModel("a", fileName(t, "a"), 2, 0)
	b := fixtureModel("b", fileName(t, "b"), 2, 0)
	rt := newRuntime(t, nil, a, b)
	if _, err := infer(ctx, rt, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	ca := ctl(t, a)
	ca.CloseGate.Arm()
	unloaded := make(chan error, 1)
	goT(t, func() { unloaded <- rt.Unload(ctx, "a") })
	if !ca.CloseGate.WaitSeen(2 * time.Second) {
		t.Fatal("teardown did not start")
	}
	if status(t, rt, "a").Loaded {
		t.Fatal("residency not cleared before teardown")
	}
	if _, err := infer(ctx, rt, "b", ms(500), nil); err != nil {
		t.Fatalf("other model blocked by a slow teardown: %v", err)
	}
	if _, err := infer(ctx, rt, "a", ms(30), nil); !apierror.Is(err, apierror.TypeBusy) {
		t.Fatalf("request during teardown: %v, want a busy timeout", err)
	}
	if _, err := rt.Register(ctx, fixtureModel("c", fileName(t, "c"), 1, 0)); err != nil {
		t.Fatal(err)
	}
	ca.CloseGate.Release()
	if err := <-unloaded; err != nil {
		t.Fatal(err)
	}
	ctl(t, fixtureModel("c", fileName(t, "c"), 1, 0)).ReleaseAll()
	checkDrained(t, rt)
}

func TestUnsupportedCapacityPreservesRegistration(t *testing.T) {
	ctx := testCtx(t)
	rt, a, ca := singleModel(t, 2)
	if _, err := infer(ctx, rt, "m", nil, nil); err != nil {
		t.Fatal(err)
	}
	check := func(what string, m config.Model, capacity int) {
		t.Helper()
		_, err := rt.Register(ctx, m)
		e := apierror.From(err)
		if err == nil || e.Status != 400 || !strings.Contains(err.Error(), fmt.Sprintf("capacity=%d", capacity)) {
			t.Fatalf("%s: %v, want 400 mentioning capacity=%d", what, err, capacity)
		}
		st := status(t, rt, "m")
		// The live pool (2 sessions of a) survives; a probe of the same
		// file may have loaded and closed its own private assets.
		if !st.Loaded || st.Model.Path != a.Path || st.Slots.Configured != 2 || ca.Sessions.Load() != 2 {
			t.Fatalf("%s: live state changed: %+v, live sessions %d", what, st, ca.Sessions.Load())
		}
	}
	check("slots=5", fixtureModel("m", fileName(t, "a"), 5, 0), 4)
	check("other checkpoint", fixtureModel("m", fileName(t, "other"), 2, 1), 1)
	check("fixture_capacity=1", fixtureModel("m", fileName(t, "a"), 2, 1), 1)
	if ctl(t, fixtureModel("m", fileName(t, "other"), 1, 0)).Sessions.Load() != 0 {
		t.Fatal("capacity probe left a session alive")
	}
	if text, err := infer(ctx, rt, "m", nil, nil); err != nil || text != ca.Name() {
		t.Fatalf("kept pool: %q %v", text, err)
	}

	// A fresh registration asking too much stays registered and unloaded
	// (500), and works once corrected.
	f := fixtureModel("fresh", fileName(t, "fresh"), 3, 2)
	_, err := rt.Register(ctx, f)
	if e := apierror.From(err); err == nil || e.Status != 500 || !strings.Contains(err.Error(), "capacity=2") {
		t.Fatalf("fresh entry: %v", err)
	}
	if st := status(t, rt, "fresh"); st.Loaded || st.Slots.Configured != 3 {
		t.Fatalf("fresh entry: %+v", st)
	}
	if _, err := infer(ctx, rt, "fresh", nil, nil); err == nil || apierror.From(err).Status != 500 {
		t.Fatalf("lazy load of an unsupported count: %v", err)
	}
	if _, err := rt.Register(ctx, fixtureModel("fresh", fileName(t, "fresh"), 2, 2)); err != nil {
		t.Fatalf("corrected: %v", err)
	}
	ctl(t, f).ReleaseAll()

	// An eager startup model asking too much is a startup error.
	e := fixtureModel("eager", fileName(t, "eager"), 5, 0)
	e.Lazy = false
	rt2 := newRuntime(t, nil, e)
	if err := rt2.Start(ctx); err == nil || !strings.Contains(err.Error(), "capacity=4") {
		t.Fatalf("Start: %v, want an error mentioning capacity=4", err)
	}
	checkDrained(t, rt)
}

func TestDynamicCapacityChangesUseParallelLifecycle(t *testing.T) {
	ctx := testCtx(t)
	rt, _, ca := singleModel(t, -1)
	if _, err := infer(ctx, rt, "m", nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 1, 4, 1} {
		re, err := rt.Register(ctx, fixtureModel("m", fileName(t, "a"), n, 0))
		if err != nil {
			t.Fatalf("slots=%d: %v", n, err)
		}
		if st := status(t, rt, "m"); !st.Loaded || st.Slots.Configured != n {
			t.Fatalf("slots=%d: %+v (reconfigured %v)", n, st, re)
		}
		// Exactly n requests run at once.
		ca.RunGate.Arm()
		ca.ResetMax()
		var wg sync.WaitGroup
		for i := 0; i < n+1; i++ {
			wg.Add(1)
			goT(t, func() {
				defer wg.Done()
				if _, err := infer(ctx, rt, "m", nil, nil); err != nil {
					t.Error(err)
				}
			})
		}
		eventually(t, fmt.Sprintf("%d running", n), func() bool { return ca.Running() == int64(n) })
		waitQueue(t, rt, "m", 1, 0)
		if st := status(t, rt, "m"); st.Slots.Active != n {
			t.Fatalf("active_slots = %d, want %d", st.Slots.Active, n)
		}
		ca.RunGate.Release()
		wg.Wait()
		if got := ca.MaxConcurrentRuns(); got != int64(n) {
			t.Fatalf("slots=%d: %d concurrent runs", n, got)
		}
		for _, raw := range []string{`"2"`, "true", "null", "1.5", "0", "17"} {
			m := fixtureModel("m", fileName(t, "a"), n, 0)
			m.Slots = config.Slots{Set: true, Raw: raw}
			if _, err := rt.Register(ctx, m); apierror.From(err).Status != 400 {
				t.Fatalf("slots %s: %v, want 400", raw, err)
			}
			if st := status(t, rt, "m"); !st.Loaded || st.Slots.Configured != n {
				t.Fatalf("invalid slots %s changed the model: %+v", raw, st)
			}
		}
	}
	if sess := ca.Sessions.Load(); sess != 1 {
		t.Fatalf("%d live sessions at slots=1", sess)
	}
	checkDrained(t, rt)
}

func TestUnloadIsIdempotentAndWaitsForLazyLoad(t *testing.T) {
	forSlots(t, capacities, func(t *testing.T, c int) {
		ctx := testCtx(t)
		rt, _, ca := singleModel(t, c)
		ca.LoadGate.Arm()
		var log events
		reqDone := make(chan struct{})
		goT(t, func() { _ = runHeld(ctx, rt, "m", "req", &log); close(reqDone) })
		if !ca.LoadGate.WaitSeen(2 * time.Second) {
			t.Fatal("lazy load did not start")
		}
		unloadDone := make(chan error, 1)
		goT(t, func() { err := rt.Unload(ctx, "m"); log.add("unload"); unloadDone <- err })
		waitQueue(t, rt, "m", 0, 1)
		ca.LoadGate.Release()
		if err := <-unloadDone; err != nil {
			t.Fatal(err)
		}
		<-reqDone
		if got := log.get(); !slices.Equal(got, []string{"req:" + ca.Name(), "unload"}) {
			t.Fatalf("order %v", got)
		}
		if err := rt.Unload(ctx, "m"); err != nil {
			t.Fatalf("second unload: %v", err)
		}
		if status(t, rt, "m").Loaded || ca.Destructions.Load() != 1 {
			t.Fatal("not unloaded exactly once")
		}
		if err := rt.Unload(ctx, "nope"); !apierror.Is(err, apierror.TypeNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	})
}

// TestBarrierBlocksLaterRequestsWithFreeSlots: a waiting manager blocks
// every later request even while slots are free (nothing overtakes the head
// of the queue).
func TestBarrierBlocksLaterRequestsWithFreeSlots(t *testing.T) {
	forSlots(t, []int{2, 4}, func(t *testing.T, c int) {
		ctx := testCtx(t)
		rt, _, ca := singleModel(t, c)
		held, err := rt.Acquire(ctx, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		var log events
		mgr := make(chan error, 1)
		goT(t, func() { err := rt.Unload(ctx, "m"); log.add("manager"); mgr <- err })
		waitQueue(t, rt, "m", 0, 1)
		late := make(chan error, 1)
		goT(t, func() { late <- runHeld(ctx, rt, "m", "late", &log) })
		waitQueue(t, rt, "m", 1, 1)
		time.Sleep(20 * time.Millisecond)
		if st := status(t, rt, "m"); st.Slots.Active != 1 || st.Slots.Queued != 1 {
			t.Fatalf("a later request overtook the waiting manager: %+v", *st.Slots)
		}
		held.Release()
		if err := <-mgr; err != nil {
			t.Fatal(err)
		}
		if err := <-late; err != nil {
			t.Fatal(err)
		}
		if ca.Loads.Load() != 2 {
			t.Fatalf("loads %d: the late request must run after the unload (and reload)", ca.Loads.Load())
		}
		checkDrained(t, rt)
	})
}
