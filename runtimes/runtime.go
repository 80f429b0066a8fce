// Package runtimes is the interface the HTTP API uses to run models, and the
// rules both runtimes share. Two implementations exist, chosen once at
// startup: runtimes/legacy (one session per model behind a per-model lock)
// and runtimes/parallel (registry, FIFO admission, session pools, leases).
package runtimes

import (
	"context"
	"log/slog"
	"time"

	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// Options is what a runtime is built from.
type Options struct {
	Config *config.Config
	Env    session.Env
	Logger *slog.Logger
	// Family finds a model family by name; nil means session.Lookup.
	Family func(name string) (session.Family, bool)
	// FreeMemory reports the free host memory in bytes for the memory
	// guard (min_free_memory_mb); nil reads MemAvailable from /proc/meminfo.
	FreeMemory func() (uint64, error)
	// FreeDeviceMemory reports the free memory of the compute device in
	// bytes for the memory guard; ok is false when there is no device
	// memory to check (CPU backend, or a device that reports none). nil
	// asks the ggml device of Env.Compute.
	FreeDeviceMemory func() (free uint64, ok bool, err error)
}

// FamilyLookup returns o.Family or the global registry.
func (o Options) FamilyLookup() func(string) (session.Family, bool) {
	if o.Family != nil {
		return o.Family
	}
	return session.Lookup
}

// Runtime runs models for the HTTP API.
type Runtime interface {
	// Name is "legacy" or "parallel".
	Name() string
	// Start loads the non-lazy models, in order (at most max_loaded_models).
	Start(ctx context.Context) error
	// Models reports every registered model in registration order.
	Models() []ModelStatus
	// Lookup returns the current configuration of a model.
	Lookup(id string) (config.Model, bool)
	// Acquire binds the caller to a session of model id, loading it when
	// needed. busyTimeoutMs is the request's override (nil when absent).
	// The lease must be released exactly once.
	Acquire(ctx context.Context, id string, busyTimeoutMs *int64) (Lease, error)
	// LeaseBeforeStream reports whether streaming routes bind their lease
	// before sending headers (parallel) or inside the stream (legacy).
	LeaseBeforeStream() bool
	// Register adds or replaces a model and makes sure it is loaded
	// (POST /v1/models/load). reconfigured is true when an existing entry changed.
	Register(ctx context.Context, m config.Model) (reconfigured bool, err error)
	// Unload unloads one model (idempotent); unknown ids are not_found.
	Unload(ctx context.Context, id string) error
	// UnloadModels unloads the given models; unknown ids go to notFound.
	UnloadModels(ctx context.Context, ids []string) (unloaded, notFound []string, err error)
	// UnloadAll unloads every model.
	UnloadAll(ctx context.Context) (unloaded []string, err error)
	// Close unloads everything and stops background work. The HTTP server
	// has drained every request before it is called.
	Close() error
}

// Lease is one request's exclusive use of a session.
type Lease interface {
	Session() session.Session
	// Model is the configuration the session was loaded with.
	Model() config.Model
	// Release ends the lease. Calling it more than once has no effect.
	Release()
}

// ModelStatus is one row of GET /v1/models.
type ModelStatus struct {
	Model  config.Model
	Loaded bool
	// Slots is nil in the legacy runtime, which reports no slot fields.
	Slots *SlotStatus
}

// SlotStatus is the parallel runtime's per-model observation.
type SlotStatus struct {
	Configured       int
	Active           int
	Queued           int
	MaxParallelSlots *int // nil when unloaded
}

// EffectiveBusyTimeout applies the busy-timeout layers (wire-api 3.1): the
// ceiling is the model's value, else the server's. An absent or non-positive
// request value leaves the ceiling; an unbounded (0) ceiling takes the
// request's value; otherwise the smaller of the two wins. Zero means wait
// without limit.
func EffectiveBusyTimeout(server int64, model, request *int64) time.Duration {
	ceiling := server
	if model != nil {
		ceiling = *model
	}
	eff := ceiling
	switch {
	case request == nil || *request <= 0:
		eff = ceiling
	case ceiling <= 0:
		eff = *request
	case *request < ceiling:
		eff = *request
	}
	return time.Duration(eff) * time.Millisecond
}

// Overdue reports whether a holder that acquired at since is past timeout
// (strictly greater). A zero timeout is never overdue.
func Overdue(since time.Time, timeout time.Duration, now time.Time) bool {
	return timeout > 0 && now.Sub(since) > timeout
}
