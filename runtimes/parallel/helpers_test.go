package parallel

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/families/fixture"
	"github.com/audioproof/audioproof/server/session"
)

// capacities are the pool sizes every lifecycle scenario runs at.
var capacities = []int{1, 2, 4}

// fileName makes a fixture file name private to the running test, so that
// tests never share a fixture control.
// The name carries a nonce per test run, so -count=N starts from zero.
func fileName(t *testing.T, suffix string) string {
	n, _ := nonces.LoadOrStore(t, nonceSeq.Add(1))
	return fmt.Sprintf("%s-%d-%s.bin", strings.NewReplacer("/", "_", " ", "_", "=", "_").Replace(t.Name()), n, suffix)
}

var (
	nonces   sync.Map // *testing.T -> int64
	nonceSeq atomic.Int64
)

// fixtureModel is a lazy fixture model entry. slots < 1 leaves `slots`
// absent; capacity < 1 keeps the fixture's default capacity.
func fixtureModel(id, file string, slots, capacity int) config.Model {
	m := config.Model{ID: id, Path: "/models/" + file, Family: fixture.Name, Task: session.TaskTTS,
		Mode: session.ModeOffline, Lazy: true}
	if slots > 0 {
		m.Slots = config.Slots{Set: true, Raw: strconv.Itoa(slots)}
	}
	if capacity > 0 {
		m.SessionOptions = map[string]string{"fixture_capacity": strconv.Itoa(capacity)}
	}
	return m
}

func ctl(t *testing.T, m config.Model) *fixture.Ctl {
	t.Helper()
	return fixture.Control(m.Path[strings.LastIndexByte(m.Path, '/')+1:])
}

// newRuntime builds a parallel runtime over models, with busy_timeout_ms 0
// (as the upstream fixture server) unless edit changes it, and closes it
// at the end of the test, checking that nothing was left behind.
func newRuntime(t *testing.T, edit func(*config.Config), models ...config.Model) *Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.BusyTimeoutMs = 0
	cfg.UIManagement = true
	cfg.Models = models
	if edit != nil {
		edit(cfg)
	}
	rt, err := New(runtimes.Options{Config: cfg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { _ = rt.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("Close hung\n%s", allStacks())
		}
		for _, m := range models {
			c := ctl(t, m)
			c.ReleaseAll()
			if c.PrematureModelDestruction.Load() || c.UseAfterClose.Load() {
				t.Errorf("model %s: premature destruction %v, use after close %v", m.ID,
					c.PrematureModelDestruction.Load(), c.UseAfterClose.Load())
			}
		}
	})
	return rt
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// infer acquires model id, runs one request with options and releases.
func infer(ctx context.Context, rt *Runtime, id string, busyMs *int64, opts map[string]string) (string, error) {
	l, err := rt.Acquire(ctx, id, busyMs)
	if err != nil {
		return "", err
	}
	defer l.Release()
	res, err := l.Session().Run(ctx, &session.Request{Input: "hi", Options: opts}, nil)
	if err != nil {
		return "", err
	}
	return res.Text, nil
}

func ms(v int64) *int64 { return &v }

// status returns the model's row.
func status(t *testing.T, rt *Runtime, id string) runtimes.ModelStatus {
	t.Helper()
	for _, st := range rt.Models() {
		if st.Model.ID == id {
			return st
		}
	}
	t.Fatalf("model %q not listed", id)
	return runtimes.ModelStatus{}
}

// eventually polls cond for 2 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, allStacks())
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQueue waits for the model's queued request and manager counts.
func waitQueue(t *testing.T, rt *Runtime, id string, requests, managers int) {
	t.Helper()
	e, ok := rt.lookup(id)
	if !ok {
		t.Fatalf("model %q not registered", id)
	}
	waitQueued(t, e.sched, requests, managers)
}

// events is a concurrency-safe ordered log.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	e.list = append(e.list, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

func (e *events) index(s string) int {
	for i, v := range e.get() {
		if v == s {
			return i
		}
	}
	return -1
}

// checkDrained asserts every model's counters come back to zero (within
// 2 s: over HTTP a lease is released just after its response is written,
// and evicted models finish their teardown in the background).
func checkDrained(t *testing.T, rt *Runtime) {
	t.Helper()
	for _, st := range rt.Models() {
		e, _ := rt.lookup(st.Model.ID)
		deadline := time.Now().Add(2 * time.Second)
		for ss := e.sched.stats(); ss.occupied != 0 || ss.queuedRequests != 0 || ss.exclusive || ss.queuedManagers != 0; ss = e.sched.stats() {
			if time.Now().After(deadline) {
				t.Errorf("model %s not drained: %+v", st.Model.ID, ss)
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// ctlT is the fixture control type.
type ctlT = fixture.Ctl

func runtimesOptions(cfg *config.Config) runtimes.Options { return runtimes.Options{Config: cfg} }

// repoRoot is the module root (two folders above this package).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// goT runs f in a goroutine that the test waits for (up to 5 s) before it
// completes, so a late t.Errorf in f cannot panic the whole package run.
// Scheduler waits return when t.Context() is cancelled, just before cleanup.
func goT(t *testing.T, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
}
