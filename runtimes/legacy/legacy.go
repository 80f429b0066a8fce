// Package legacy is the default runtime: one loaded model and ONE session per
// model id, used by one request at a time behind a per-model timed lock (the
// C++ server's ServerState with its busy guard).
//
// Rules (wire-api.md section 3.1 and 3.2):
//   - A request waits for the model's lock under the effective busy timeout
//     (runtimes.EffectiveBusyTimeout: model busy_timeout_ms, else the
//     server's, lowered by the request's override). 0 waits without limit.
//     An overdue holder makes it fail at once with 503 server_busy;
//     otherwise it fails with 503 when the timeout passes. The lock makes no
//     FIFO promise.
//   - Models load lazily under their lock at first use and stay loaded;
//     Start loads the non-lazy ones in order (only the first
//     max_loaded_models when that is set).
//   - max_loaded_models: before a load, least-recently-used resident models
//     are unloaded, but only those whose lock can be taken without waiting;
//     when none can, the load fails with 503 server_busy. Loads are
//     serialised only while this limit or the memory guard is on.
//   - min_free_memory_mb (the memory guard, runtimes.MemoryGuard): after
//     any eviction and before the family loads, a load whose estimate
//     (1.5 × weights + 128 MiB) plus the headroom exceeds the free host or
//     device memory fails with 503 insufficient_memory; nothing is loaded
//     and evictions already done are not undone.
//   - idle_unload_ms: a background check every max(1 s, limit/10) unloads
//     every idle resident model once nothing has loaded, started or ended a
//     run for the limit, then restarts the clock.
//   - Explicit `slots` (any value) needs --parallel-jobs: New rejects it and
//     Register answers 400.
//
// Lock order: a model's lock, then the load lock, then the runtime's mutex;
// the runtime's mutex is never held while waiting for anything.
package legacy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// slotsMessage is the error the legacy runtime gives for an explicit slots key.
const slotsMessage = "slots requires --parallel-jobs at server startup"

// Runtime is the legacy runtime. Make one with New.
type Runtime struct {
	cfg    *config.Config
	env    session.Env
	log    *slog.Logger
	family func(string) (session.Family, bool)

	maxLoaded int
	idleLimit time.Duration
	guard     *runtimes.MemoryGuard // nil: min_free_memory_mb is off

	// loadMu serialises loads (with their evictions and memory checks)
	// while max_loaded_models or the memory guard is on.
	loadMu sync.Mutex

	// mu guards everything below and the observable fields of each entry
	// (cfg, loaded, used, assets, sess). It is held only for short sections.
	mu           sync.Mutex
	models       map[string]*entry
	order        []string
	seq          uint64 // LRU clock: bumped on every use
	lastActivity time.Time
	closed       bool

	stopIdle chan struct{}
	idleDone chan struct{}
}

// entry is one registered model. Its lock guards loading, running and
// unloading; the fields are also guarded by Runtime.mu for readers that do
// not hold the lock.
type entry struct {
	id   string
	lock *modelLock

	cfg    config.Model
	loaded bool
	used   uint64
	assets session.Assets
	sess   session.Session
}

var _ runtimes.Runtime = (*Runtime)(nil)

// New builds the legacy runtime from opts.Config. It rejects explicit slots,
// unknown families and tasks or modes a family does not serve. Models are
// not loaded until Start or first use. The idle-unload check, when
// idle_unload_ms is set, runs from New until Close.
func New(opts runtimes.Options) (*Runtime, error) {
	if opts.Config == nil {
		return nil, errors.New("legacy runtime: no configuration given")
	}
	lookup := opts.FamilyLookup()
	log := opts.Logger
	if log == nil {
		log = opts.Env.Logger
	}
	if log == nil {
		log = slog.Default()
	}
	env := opts.Env
	if env.Logger == nil {
		env.Logger = log
	}
	cfg := opts.Config
	r := &Runtime{
		cfg:          cfg,
		env:          env,
		log:          log,
		family:       lookup,
		maxLoaded:    cfg.MaxLoadedModels,
		idleLimit:    time.Duration(cfg.IdleUnloadMs) * time.Millisecond,
		models:       map[string]*entry{},
		lastActivity: time.Now(),
	}
	guardOpts := opts
	guardOpts.Env, guardOpts.Logger = env, log
	r.guard = runtimes.NewMemoryGuard(guardOpts)
	for _, m := range cfg.Models {
		if m.Slots.Set {
			return nil, fmt.Errorf("model %s: %s", m.ID, slotsMessage)
		}
		if err := validateFamily(lookup, m); err != nil {
			return nil, fmt.Errorf("model %s: %s", m.ID, apierror.From(err).Message)
		}
		if _, dup := r.models[m.ID]; dup {
			return nil, fmt.Errorf("duplicate model id %q", m.ID)
		}
		r.models[m.ID] = &entry{id: m.ID, lock: newModelLock(), cfg: m.Clone()}
		r.order = append(r.order, m.ID)
	}
	if r.idleLimit > 0 {
		r.stopIdle = make(chan struct{})
		r.idleDone = make(chan struct{})
		go r.idleLoop()
	}
	return r, nil
}

// validateFamily checks that m's family exists and serves m's task and mode.
// Its errors are 400 invalid_request_error.
func validateFamily(lookup func(string) (session.Family, bool), m config.Model) error {
	fam, ok := lookup(m.Family)
	if !ok {
		known := session.Names()
		list := "none"
		if len(known) > 0 {
			list = strings.Join(known, ", ")
		}
		return apierror.Invalidf("unknown family %q; known families: %s", m.Family, list)
	}
	if !fam.Supports(m.Task, m.Mode) {
		return apierror.Invalidf("family %s does not support task %q in %s mode", m.Family, m.Task, m.Mode)
	}
	return nil
}

// Name is "legacy".
func (r *Runtime) Name() string { return "legacy" }

// LeaseBeforeStream is false: legacy streaming routes take the lock inside
// the stream, so a busy model becomes an SSE error after the 200.
func (r *Runtime) LeaseBeforeStream() bool { return false }

// Start loads the non-lazy models in configuration order; with
// max_loaded_models=N only the first N of them. A load failure is returned
// naming the model.
func (r *Runtime) Start(ctx context.Context) error {
	r.mu.Lock()
	var eager []*entry
	for _, id := range r.order {
		if e := r.models[id]; !e.cfg.Lazy {
			eager = append(eager, e)
		}
	}
	r.mu.Unlock()
	if r.maxLoaded > 0 && len(eager) > r.maxLoaded {
		eager = eager[:r.maxLoaded]
	}
	for _, e := range eager {
		if err := e.lock.Lock(ctx, e.id, 0); err != nil {
			return err
		}
		err := r.ensureLoadedLocked(ctx, e)
		r.unlockEntry(e)
		if err != nil {
			return fmt.Errorf("model %s: %s", e.id, apierror.From(err).Message)
		}
	}
	return nil
}

// Models reports every model in registration order; Slots is always nil.
func (r *Runtime) Models() []runtimes.ModelStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtimes.ModelStatus, 0, len(r.order))
	for _, id := range r.order {
		e := r.models[id]
		out = append(out, runtimes.ModelStatus{Model: e.cfg.Clone(), Loaded: e.loaded})
	}
	return out
}

// Lookup returns a copy of the current configuration of model id.
func (r *Runtime) Lookup(id string) (config.Model, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.models[id]
	if !ok {
		return config.Model{}, false
	}
	return e.cfg.Clone(), true
}

// entryFor finds model id and its effective busy timeout for the override.
func (r *Runtime) entryFor(id string, override *int64) (*entry, time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, 0, errClosed()
	}
	e, ok := r.models[id]
	if !ok {
		return nil, 0, runtimes.UnknownModel(id)
	}
	return e, runtimes.EffectiveBusyTimeout(r.cfg.BusyTimeoutMs, e.cfg.BusyTimeoutMs, override), nil
}

func errClosed() error {
	return apierror.Busyf("the server is shutting down; retry against a running server")
}

// Acquire takes model id's lock under the busy-timeout rules, loads the model
// if needed (evicting others under max_loaded_models) and hands out its one
// session. A done ctx ends the wait with ctx's error.
func (r *Runtime) Acquire(ctx context.Context, id string, busyTimeoutMs *int64) (runtimes.Lease, error) {
	e, timeout, err := r.entryFor(id, busyTimeoutMs)
	if err != nil {
		return nil, err
	}
	if err := e.lock.Lock(ctx, id, timeout); err != nil {
		return nil, err
	}
	if err := r.ensureLoadedLocked(ctx, e); err != nil {
		r.unlockEntry(e)
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.unlockEntry(e)
		return nil, errClosed()
	}
	r.touchLocked(e) // run start
	l := &lease{r: r, e: e, sess: e.sess, cfg: e.cfg.Clone()}
	r.mu.Unlock()
	return l, nil
}

// lease is one request's hold on a model's lock and session.
type lease struct {
	r    *Runtime
	e    *entry
	sess session.Session
	cfg  config.Model
	once sync.Once
}

func (l *lease) Session() session.Session { return l.sess }
func (l *lease) Model() config.Model      { return l.cfg }

// Release marks the run's end and frees the model's lock; only the first
// call counts. After Close it also unloads the model.
func (l *lease) Release() {
	l.once.Do(func() {
		l.r.mu.Lock()
		l.r.touchLocked(l.e) // run end
		l.r.mu.Unlock()
		l.r.unlockEntry(l.e)
	})
}

// touchLocked records activity on e (LRU and idle clock). r.mu is held.
func (r *Runtime) touchLocked(e *entry) {
	r.seq++
	e.used = r.seq
	r.lastActivity = time.Now()
}

// unlockEntry frees e's lock; once the runtime is closed it unloads e first,
// so that nothing loaded under a lock outlives Close.
func (r *Runtime) unlockEntry(e *entry) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		r.unloadLocked(e)
	}
	e.lock.Unlock()
}

// ensureLoadedLocked loads e if it is not resident. e's lock is held.
func (r *Runtime) ensureLoadedLocked(ctx context.Context, e *entry) error {
	r.mu.Lock()
	loaded := e.loaded
	r.mu.Unlock()
	if loaded {
		return nil
	}
	r.mu.Lock()
	cfg := e.cfg.Clone()
	r.mu.Unlock()
	if r.maxLoaded > 0 || r.guard.On() {
		r.loadMu.Lock()
		defer r.loadMu.Unlock()
		if r.maxLoaded > 0 {
			if err := r.makeRoom(e); err != nil {
				return err
			}
		}
		// After the evictions, which free memory; they stay done if the
		// guard refuses.
		if err := r.guard.Check(cfg); err != nil {
			return err
		}
	}

	fam, ok := r.family(cfg.Family)
	if !ok {
		return validateFamily(r.family, cfg)
	}
	start := time.Now()
	assets, err := fam.Load(ctx, r.env, cfg.Spec())
	if err != nil {
		return loadError(e.id, err)
	}
	if assets == nil {
		return apierror.Internalf("loading model %s failed: family %s returned no assets", e.id, cfg.Family)
	}
	sess, err := assets.NewSession()
	if err != nil || sess == nil {
		if sess != nil {
			r.closeQuietly(e.id, "session", sess.Close)
		}
		r.closeQuietly(e.id, "assets", assets.Close)
		if err == nil {
			return apierror.Internalf("loading model %s failed: family %s created no session", e.id, cfg.Family)
		}
		return loadError(e.id, err)
	}
	r.mu.Lock()
	e.assets, e.sess, e.loaded = assets, sess, true
	r.touchLocked(e) // load
	r.mu.Unlock()
	r.log.Info("model loaded", "model", e.id, "family", cfg.Family, "ms", time.Since(start).Milliseconds())
	return nil
}

// loadError keeps a client error's status and type and makes anything else a
// 500, both naming the model.
func loadError(id string, err error) error {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return &apierror.Error{Status: ae.Status, Type: ae.Type, Message: fmt.Sprintf("loading model %s: %s", id, ae.Message), Err: err}
	}
	return apierror.Internalf("loading model %s failed: %w", id, err)
}

// makeRoom unloads least-recently-used resident models other than e, each
// only if its lock is free right now, until one more model fits under
// max_loaded_models. r.loadMu and e's lock are held.
func (r *Runtime) makeRoom(e *entry) error {
	for {
		r.mu.Lock()
		resident := 0
		var victims []*entry
		for _, id := range r.order {
			v := r.models[id]
			if v.loaded {
				resident++
				if v != e {
					victims = append(victims, v)
				}
			}
		}
		// Least recently used first; used is guarded by r.mu.
		sort.SliceStable(victims, func(i, j int) bool { return victims[i].used < victims[j].used })
		r.mu.Unlock()
		if resident < r.maxLoaded {
			return nil
		}
		evicted := false
		for _, v := range victims {
			if !v.lock.TryLock() {
				continue
			}
			evicted = r.unloadLocked(v)
			v.lock.Unlock()
			if evicted {
				r.log.Info("model evicted", "model", v.id, "for", e.id, "max_loaded_models", r.maxLoaded)
				break
			}
		}
		if !evicted {
			// Another caller may have unloaded a victim meanwhile.
			if r.residentCount() < r.maxLoaded {
				return nil
			}
			return apierror.Busyf("cannot load model %s: max_loaded_models=%d models are resident and all of them are busy; retry later", e.id, r.maxLoaded)
		}
	}
}

func (r *Runtime) residentCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.models {
		if e.loaded {
			n++
		}
	}
	return n
}

// unloadLocked closes e's session, then its assets, and reports whether e
// was resident. e's lock is held. Residency clears before the slow teardown.
func (r *Runtime) unloadLocked(e *entry) bool {
	r.mu.Lock()
	was := e.loaded
	sess, assets := e.sess, e.assets
	e.loaded, e.sess, e.assets = false, nil, nil
	r.mu.Unlock()
	if sess != nil {
		r.closeQuietly(e.id, "session", sess.Close)
	}
	if assets != nil {
		r.closeQuietly(e.id, "assets", assets.Close)
	}
	if was {
		r.log.Info("model unloaded", "model", e.id)
	}
	return was
}

func (r *Runtime) closeQuietly(id, what string, close func() error) {
	if err := close(); err != nil {
		r.log.Warn("closing model "+what+" failed", "model", id, "err", err)
	}
}

// Register adds or replaces model m and makes sure it is loaded
// (POST /v1/models/load). A new id is registered (visible at once) and
// loaded; a load failure leaves it registered and unloaded. An existing id
// whose load-relevant fields changed is unloaded under its lock, gets m as
// its whole configuration and is loaded again (reconfigured=true); an
// unchanged one is only made resident.
func (r *Runtime) Register(ctx context.Context, m config.Model) (reconfigured bool, err error) {
	// audioproof: explicit-slots rejection (begin)
	if m.Slots.Set {
		return false, apierror.Invalidf(slotsMessage)
	}
	// audioproof: explicit-slots rejection (end)
	if m.ID == "" {
		return false, apierror.Invalidf("id is required and must be a non-empty string")
	}
	if err := validateFamily(r.family, m); err != nil {
		return false, err
	}
	m = m.Clone()

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false, errClosed()
	}
	e, exists := r.models[m.ID]
	if !exists {
		e = &entry{id: m.ID, lock: newModelLock(), cfg: m}
		r.models[m.ID] = e
		r.order = append(r.order, m.ID)
	}
	timeout := runtimes.EffectiveBusyTimeout(r.cfg.BusyTimeoutMs, e.cfg.BusyTimeoutMs, nil)
	r.mu.Unlock()

	if err := e.lock.Lock(ctx, e.id, timeout); err != nil {
		return false, err
	}
	defer r.unlockEntry(e)
	if exists {
		r.mu.Lock()
		changed := !sameLoadConfig(e.cfg, m)
		r.mu.Unlock()
		if changed {
			r.unloadLocked(e)
			r.mu.Lock()
			e.cfg = m
			r.mu.Unlock()
			reconfigured = true
			r.log.Info("model reconfigured", "model", e.id)
		}
	}
	return reconfigured, r.ensureLoadedLocked(ctx, e)
}

// sameLoadConfig compares the fields POST /v1/models/load can set.
func sameLoadConfig(a, b config.Model) bool {
	return a.Path == b.Path && a.Family == b.Family && a.Task == b.Task && a.Mode == b.Mode &&
		a.Slots == b.Slots && a.Config == b.Config && a.Weight == b.Weight &&
		a.ModelSpecOverride == b.ModelSpecOverride &&
		sameOptions(a.LoadOptions, b.LoadOptions) && sameOptions(a.SessionOptions, b.SessionOptions)
}

// sameOptions treats nil and empty option maps as equal.
func sameOptions(a, b map[string]string) bool {
	return len(a) == len(b) && maps.Equal(a, b)
}

// Unload unloads model id under its lock with the busy-timeout policy (so an
// overdue or long run answers 503). Unloading an unloaded model succeeds;
// an unknown id is 404 not_found.
func (r *Runtime) Unload(ctx context.Context, id string) error {
	e, timeout, err := r.entryFor(id, nil)
	if err != nil {
		return err
	}
	if err := e.lock.Lock(ctx, id, timeout); err != nil {
		return err
	}
	r.unloadLocked(e)
	r.unlockEntry(e)
	return nil
}

// UnloadModels unloads each given model in turn, waiting for its lock
// without limit. unloaded lists only the models that were resident; unknown
// ids go to notFound. Both lists are non-nil.
func (r *Runtime) UnloadModels(ctx context.Context, ids []string) (unloaded, notFound []string, err error) {
	unloaded, notFound = []string{}, []string{}
	for _, id := range ids {
		r.mu.Lock()
		e, ok := r.models[id]
		r.mu.Unlock()
		if !ok {
			notFound = append(notFound, id)
			continue
		}
		was, err := r.unloadWaiting(ctx, e)
		if err != nil {
			return unloaded, notFound, err
		}
		if was {
			unloaded = append(unloaded, id)
		}
	}
	return unloaded, notFound, nil
}

// UnloadAll unloads every model in registration order, waiting without
// limit; unloaded lists the models that were resident.
func (r *Runtime) UnloadAll(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	ids := slices.Clone(r.order)
	r.mu.Unlock()
	unloaded, _, err := r.UnloadModels(ctx, ids)
	return unloaded, err
}

func (r *Runtime) unloadWaiting(ctx context.Context, e *entry) (bool, error) {
	if err := e.lock.Lock(ctx, e.id, 0); err != nil {
		return false, err
	}
	was := r.unloadLocked(e)
	r.unlockEntry(e)
	return was, nil
}

// idleLoop runs the idle-unload check until Close.
func (r *Runtime) idleLoop() {
	defer close(r.idleDone)
	interval := max(time.Second, r.idleLimit/10)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-r.stopIdle:
			return
		case <-t.C:
			r.idleCheck()
		}
	}
}

// idleCheck unloads every resident model whose lock is free once the
// runtime has been idle for the limit, then restarts the idle clock.
func (r *Runtime) idleCheck() {
	r.mu.Lock()
	if r.closed || time.Since(r.lastActivity) < r.idleLimit {
		r.mu.Unlock()
		return
	}
	var resident []*entry
	for _, id := range r.order {
		if e := r.models[id]; e.loaded {
			resident = append(resident, e)
		}
	}
	r.mu.Unlock()
	for _, e := range resident {
		if !e.lock.TryLock() {
			continue
		}
		if r.unloadLocked(e) {
			r.log.Info("model unloaded after idle time", "model", e.id, "idle_unload_ms", r.idleLimit.Milliseconds())
		}
		e.lock.Unlock()
	}
	r.mu.Lock()
	r.lastActivity = time.Now()
	r.mu.Unlock()
}

// Close stops the idle check and unloads every model whose lock is free. A
// model still held (a lease not yet released, a load in progress) is
// unloaded when its holder lets go. Later Acquire and Register calls fail
// with 503. Close is idempotent.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	entries := make([]*entry, 0, len(r.order))
	for _, id := range r.order {
		entries = append(entries, r.models[id])
	}
	r.mu.Unlock()
	if r.stopIdle != nil {
		close(r.stopIdle)
		<-r.idleDone
	}
	for _, e := range entries {
		if e.lock.TryLock() {
			r.unloadLocked(e)
			e.lock.Unlock()
		}
	}
	return nil
}
