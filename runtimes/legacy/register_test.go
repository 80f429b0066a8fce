package legacy

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// TestSlotsRejectedAtStartup: any explicit slots value in the config file,
// even 1 or null, makes New fail with the --parallel-jobs message.
func TestSlotsRejectedAtStartup(t *testing.T) {
	for _, raw := range []string{`1`, `null`, `"2"`, `4`, `false`} {
		js := `{"models":[{"id":"ok","path":"ok.gguf","family":"fixture"},` +
			`{"id":"s","path":"s.gguf","family":"fixture","slots":` + raw + `}]}`
		cfg, err := config.Parse([]byte(js), t.TempDir())
		if err != nil {
			t.Fatalf("slots %s: config parse: %v", raw, err)
		}
		_, err = New(runtimes.Options{Config: cfg, Logger: quiet})
		if err == nil || err.Error() != "model s: slots requires --parallel-jobs at server startup" {
			t.Errorf("slots %s: New error %v", raw, err)
		}
	}
	// Without slots the same config starts.
	cfg, err := config.Parse([]byte(`{"models":[{"id":"s","path":"s.gguf","family":"fixture"}]}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(runtimes.Options{Config: cfg, Logger: quiet})
	if err != nil {
		t.Fatalf("config without slots: %v", err)
	}
	rt.Close()
}

// TestSlotsRejectedInRegister: POST /v1/models/load with any slots key is a
// 400 that changes nothing, for new and existing ids.
func TestSlotsRejectedInRegister(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	mustAcquire(t, rt, "m", nil).Release()
	c := ctl(t, "m")
	for _, raw := range []string{`1`, `2`, `null`, `false`, `"4"`} {
		for _, id := range []string{"m", "fresh"} {
			body := `{"id":"` + id + `","path":"/fixtures/` + fileName(t, "other") + `","family":"fixture","slots":` + raw + `}`
			m, err := config.ParseModelJSON([]byte(body), "/")
			if err != nil {
				t.Fatalf("parse %s: %v", body, err)
			}
			_, err = rt.Register(context.Background(), m)
			wantType(t, err, apierror.TypeInvalid)
			if err.Error() != "slots requires --parallel-jobs at server startup" {
				t.Errorf("message %q", err.Error())
			}
		}
	}
	if _, ok := rt.Lookup("fresh"); ok {
		t.Error("a rejected registration was added")
	}
	got, _ := rt.Lookup("m")
	if got.Path != "/fixtures/"+fileName(t, "m") || !loaded(t, rt, "m") || c.Destructions.Load() != 0 {
		t.Errorf("rejected registration changed model m: path %s loaded %v", got.Path, loaded(t, rt, "m"))
	}
	if ctl(t, "other").Loads.Load() != 0 {
		t.Error("a rejected registration loaded something")
	}
}

// TestRegisterNewReplaceUnchanged covers the three outcomes of
// POST /v1/models/load.
func TestRegisterNewReplaceUnchanged(t *testing.T) {
	start := mdl(t, "m")
	start.BusyTimeoutMs = ptr(1234)
	start.DefaultRequestOptions = map[string]string{"x": "1"}
	rt := newRT(t, cfgWith(0, start))
	ctx := context.Background()

	// New id: registered, loaded now, reconfigured=false.
	n := mdl(t, "new")
	n.Lazy = false
	re, err := rt.Register(ctx, n)
	if err != nil || re {
		t.Fatalf("new: reconfigured=%v err=%v", re, err)
	}
	if !loaded(t, rt, "new") || ctl(t, "new").Loads.Load() != 1 {
		t.Fatal("new model not loaded by Register")
	}
	if ms := rt.Models(); ms[len(ms)-1].Model.ID != "new" {
		t.Error("new model not appended in registration order")
	}

	// Unchanged, loaded: nothing happens.
	if re, err = rt.Register(ctx, n); err != nil || re || ctl(t, "new").Loads.Load() != 1 {
		t.Fatalf("unchanged: reconfigured=%v err=%v loads=%d", re, err, ctl(t, "new").Loads.Load())
	}
	// Unchanged, unloaded: loads again, still not reconfigured.
	if err := rt.Unload(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if re, err = rt.Register(ctx, n); err != nil || re || ctl(t, "new").Loads.Load() != 2 || !loaded(t, rt, "new") {
		t.Fatalf("unchanged+unloaded: reconfigured=%v err=%v", re, err)
	}
	// Unchanged, with an existing startup entry (load-route fields equal):
	// its busy timeout and request options are kept.
	same := mdl(t, "m")
	if re, err = rt.Register(ctx, same); err != nil || re {
		t.Fatalf("unchanged startup model: %v %v", re, err)
	}
	if got, _ := rt.Lookup("m"); got.BusyTimeoutMs == nil || *got.BusyTimeoutMs != 1234 {
		t.Error("an unchanged registration dropped the startup busy_timeout_ms")
	}

	// Changed path: old unloaded, config swapped whole, new loaded.
	changed := mdl(t, "m")
	changed.Path = "/fixtures/" + fileName(t, "m2")
	if re, err = rt.Register(ctx, changed); err != nil || !re {
		t.Fatalf("replace: reconfigured=%v err=%v", re, err)
	}
	if ctl(t, "m").Destructions.Load() != 1 || ctl(t, "m2").Loads.Load() != 1 {
		t.Error("replace did not unload the old assets and load the new")
	}
	got, _ := rt.Lookup("m")
	if got.BusyTimeoutMs != nil || got.DefaultRequestOptions != nil {
		t.Error("replace kept fields the load route does not accept")
	}
	l := mustAcquire(t, rt, "m", nil)
	if txt := runText(t, l); txt != fileName(t, "m2") {
		t.Errorf("served by %q after replace", txt)
	}
	l.Release()

	// Changed options only also replace.
	opt := changed
	opt.SessionOptions = map[string]string{"fixture_capacity": "2"}
	if re, err = rt.Register(ctx, opt); err != nil || !re {
		t.Fatalf("options change: reconfigured=%v err=%v", re, err)
	}
	// nil vs empty options are the same.
	opt2 := opt
	opt2.LoadOptions = map[string]string{}
	if re, err = rt.Register(ctx, opt2); err != nil || re {
		t.Fatalf("empty vs nil options: reconfigured=%v err=%v", re, err)
	}
}

// TestRegisterReplaceLoadFailure: the new config is kept, unloaded; a
// request after the fault is cleared loads it.
func TestRegisterReplaceLoadFailure(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	mustAcquire(t, rt, "m", nil).Release()
	changed := mdl(t, "m")
	changed.Path = "/fixtures/" + fileName(t, "m2")
	ctl(t, "m2").FailLoad.Store(true)
	re, err := rt.Register(context.Background(), changed)
	wantType(t, err, apierror.TypeInternal, "injected load failure")
	if !re {
		t.Error("reconfigured must be true: the entry changed")
	}
	if got, _ := rt.Lookup("m"); got.Path != changed.Path || loaded(t, rt, "m") {
		t.Errorf("after failed replace: path %s loaded %v", got.Path, loaded(t, rt, "m"))
	}
	ctl(t, "m2").FailLoad.Store(false)
	l := mustAcquire(t, rt, "m", nil)
	if runText(t, l) != fileName(t, "m2") {
		t.Error("retry did not load the new config")
	}
	l.Release()
}

// TestRegisterValidation: unknown family names the family and lists the
// known ones; an unsupported task is 400; nothing is registered.
func TestRegisterValidation(t *testing.T) {
	rt := newRT(t, cfgWith(0, mdl(t, "m")))
	bad := mdl(t, "x")
	bad.Family = "nosuch"
	_, err := rt.Register(context.Background(), bad)
	wantType(t, err, apierror.TypeInvalid, `"nosuch"`, "known families", "fixture")
	if _, ok := rt.Lookup("x"); ok {
		t.Error("invalid registration was added")
	}

	rt2, err := New(runtimes.Options{Config: cfgWith(0), Logger: quiet, Family: func(name string) (session.Family, bool) {
		if name == "tts_only" {
			return ttsOnlyFamily{}, true
		}
		return nil, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	asr := mdl(t, "asr")
	asr.Family, asr.Task = "tts_only", session.TaskASR
	_, err = rt2.Register(context.Background(), asr)
	wantType(t, err, apierror.TypeInvalid, "does not support task")
	if len(rt2.Models()) != 0 {
		t.Error("unsupported registration was added")
	}
}

// TestRegisterWaitsForBusyModel: replacing a model waits for its run under
// the busy timeout, and answers 503 when the run outlasts it.
func TestRegisterWaitsForBusyModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRT(t, cfgWith(100, mdl(t, "m")))
		l := mustAcquire(t, rt, "m", nil)
		changed := mdl(t, "m")
		changed.Path = "/fixtures/" + fileName(t, "m2")
		_, err := rt.Register(context.Background(), changed)
		wantType(t, err, apierror.TypeBusy)
		if got, _ := rt.Lookup("m"); !strings.HasSuffix(got.Path, fileName(t, "m")) {
			t.Error("a refused replace changed the config")
		}
		done := make(chan error, 1)
		go func() { _, err := rt.Register(context.Background(), changed); done <- err }()
		time.Sleep(50 * time.Millisecond)
		l.Release()
		if err := <-done; err != nil {
			t.Fatalf("replace after release: %v", err)
		}
		if ctl(t, "m").Destructions.Load() != 1 || ctl(t, "m").PrematureModelDestruction.Load() {
			t.Error("old model not torn down in order")
		}
	})
}
