package legacy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/families/fixture"
	"github.com/audioproof/audioproof/server/session"
)

var (
	runSeq   atomic.Int64
	prefixes sync.Map // *testing.T -> string
)

// fileName is the fixture file name of model id in test t: unique per test
// run (also under -count=N), so every test starts with fresh fixture controls.
func fileName(t testing.TB, id string) string {
	p, ok := prefixes.Load(t)
	if !ok {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		p, _ = prefixes.LoadOrStore(t, fmt.Sprintf("%s.%d", name, runSeq.Add(1)))
	}
	return p.(string) + "-" + id + ".gguf"
}

// mdl is a lazy fixture tts model whose file name is unique to t.
func mdl(t testing.TB, id string) config.Model {
	return config.Model{
		ID: id, Path: "/fixtures/" + fileName(t, id), Family: fixture.Name,
		Task: session.TaskTTS, Mode: session.ModeOffline, Lazy: true,
	}
}

// ctl is the fixture control of model id in t.
func ctl(t *testing.T, id string) *fixture.Ctl { return fixture.Control(fileName(t, id)) }

// cfgWith is a default server config with busy_timeout_ms and models.
func cfgWith(busyMs int64, models ...config.Model) *config.Config {
	c := config.Default()
	c.BusyTimeoutMs = busyMs
	c.Models = models
	return c
}

var quiet = slog.New(slog.DiscardHandler)

// newRT builds a runtime and closes it when the test ends.
func newRT(t *testing.T, cfg *config.Config) *Runtime {
	t.Helper()
	rt, err := New(runtimes.Options{Config: cfg, Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func ptr(v int64) *int64 { return &v }

func mustAcquire(t *testing.T, rt *Runtime, id string, override *int64) runtimes.Lease {
	t.Helper()
	l, err := rt.Acquire(context.Background(), id, override)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", id, err)
	}
	return l
}

// runText runs an empty request on the lease's session and returns the text
// (the fixture answers with the asset's file name).
func runText(t *testing.T, l runtimes.Lease) string {
	t.Helper()
	res, err := l.Session().Run(context.Background(), &session.Request{}, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res.Text
}

// loaded reports the Loaded flag of model id in Models().
func loaded(t *testing.T, rt *Runtime, id string) bool {
	t.Helper()
	for _, st := range rt.Models() {
		if st.Model.ID == id {
			return st.Loaded
		}
	}
	t.Fatalf("model %s not in Models()", id)
	return false
}

// wantType fails unless err is an apierror of the given envelope type.
func wantType(t *testing.T, err error, typ string, contains ...string) {
	t.Helper()
	if !apierror.Is(err, typ) {
		t.Fatalf("err = %v (%T), want %s", err, err, typ)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err.Error(), s)
		}
	}
}

// acquireAsync starts Acquire in a goroutine and returns its outcome channel.
type acquired struct {
	lease runtimes.Lease
	err   error
	at    time.Time
}

func acquireAsync(ctx context.Context, rt *Runtime, id string, override *int64) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := rt.Acquire(ctx, id, override)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

func isCanceled(err error) bool { return errors.Is(err, context.Canceled) }
