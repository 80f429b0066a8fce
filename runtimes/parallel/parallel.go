// Package parallel is the runtime selected by --parallel-jobs: a registry of
// stable model entries, one FIFO per model for requests and management
// (scheduler.go), session pools built privately and published whole, and
// leases bound before any model-dependent work. It keeps the rules of
// docs/parallel-contract.md; the slot count never chooses the runtime, so
// even one slot goes through the pool, leases and FIFO admission.
//
// Locks, in the order they may be taken: Runtime.resMu (residency
// accounting, brief), entry.mu (an entry's config and pool, brief),
// scheduler.mu (admission, brief). Runtime.mu guards only the registry map
// and order. No lock is held while waiting for admission, loading, running
// or tearing down; the per-model initMu serialises the loaders of one model
// and bulkMu serialises only the publication step of bulk unloads.
//
// Known limits, as in the contract: backend work is never cancelled, so a
// hung model blocks its own queue and shutdown; bulk unload is snapshot
// based, not atomic; the model list is not an atomic snapshot of all models.
// Queued callers are not cancelled when their client goes away (the
// runtime waits with a context that is never cancelled), so finite queued
// work always drains and its lease is released.
//
// max_parallel_slots reports what the loaded assets advertise (at most 16);
// the pool itself has exactly `slots` sessions, and asking for more than is
// advertised fails before anything is published.
//
// The memory guard (min_free_memory_mb, runtimes.MemoryGuard) runs before
// a pool is built, after any max_loaded_models eviction has finished its
// teardown (so the freed memory is counted); guarded loads are serialised
// by loadMu. A refusal is 503 insufficient_memory: nothing is published,
// the entry stays registered and unloaded, evictions stay done. A
// reconfiguration's private capacity probe is checked before it loads
// (refusal: the current model is kept).
//
// Gaps (contract rules this package does not test): signal handling
// (server/main.go), frontend listeners and live-ingest routes (out of
// scope), and multi-slot runs on a GPU backend.
package parallel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// StartupWarning is printed on every start with --parallel-jobs (and never
// without it).
const StartupWarning = "warning: --parallel-jobs is experimental: it selects the parallel runtime (per-model FIFO admission, session pools of up to 16 slots, leases); multi-slot output parity is validated only for the fixture family and models whose family advertises more than one session"

// MaxSlots is the largest pool the runtime builds, whatever a family
// advertises.
const MaxSlots = config.MaxSlots

// minIdleTick is the shortest interval of the idle-retirement check.
var minIdleTick = time.Second

// errClosed is returned by calls made after Close.
var errClosed = errors.New("parallel: runtime is closed")

// Runtime is the parallel runtime. Create it with New.
type Runtime struct {
	cfg    *config.Config
	env    session.Env
	log    *slog.Logger
	family func(string) (session.Family, bool)
	now    func() time.Time

	mu      sync.RWMutex // guards entries and order only
	entries map[string]*entry
	order   []*entry

	resMu  sync.Mutex // residency accounting for max_loaded_models
	bulkMu sync.Mutex // serialises bulk barrier publication only

	guard  *runtimes.MemoryGuard // nil: min_free_memory_mb is off
	loadMu sync.Mutex            // serialises guarded loads (check + build)

	background sync.WaitGroup // evicted teardowns, idle loop
	stopIdle   chan struct{}
	closed     atomic.Bool
	closeOnce  sync.Once
}

// entry is one registered model. It is never removed from the registry.
type entry struct {
	id    string
	sched *scheduler

	initMu sync.Mutex // one loader at a time for this model

	mu       sync.Mutex
	cfg      config.Model
	pool     *pool // nil when unloaded (published only whole)
	loaded   bool  // logical residency; cleared before teardown
	reserved bool  // a load is in progress and counts against max_loaded_models
	lastUsed time.Time
}

// pool is a model's published sessions.
type pool struct {
	assets   session.Assets
	sessions []session.Session
	capacity int // what the assets advertise, at most MaxSlots
}

// New builds the runtime from opts and registers every configured model.
// It fails when a model names an unknown family, a task or mode its family
// does not serve, or an invalid slot count.
func New(opts runtimes.Options) (*Runtime, error) {
	if opts.Config == nil {
		return nil, errors.New("parallel: Options.Config is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	env := opts.Env
	if env.Logger == nil {
		env.Logger = log
	}
	r := &Runtime{
		cfg: opts.Config, env: env, log: log, family: opts.FamilyLookup(), now: time.Now,
		entries: map[string]*entry{}, stopIdle: make(chan struct{}),
	}
	gopts := opts
	gopts.Env, gopts.Logger = env, log
	r.guard = runtimes.NewMemoryGuard(gopts)
	for _, m := range opts.Config.Models {
		if err := r.validate(m); err != nil {
			return nil, err // names the model already
		}
		if _, dup := r.entries[m.ID]; dup {
			return nil, fmt.Errorf("duplicate model id %q", m.ID)
		}
		r.addLocked(m)
	}
	if opts.Config.IdleUnloadMs > 0 {
		r.background.Add(1)
		go r.idleLoop(time.Duration(opts.Config.IdleUnloadMs) * time.Millisecond)
	}
	return r, nil
}

func (r *Runtime) addLocked(m config.Model) *entry {
	n, _ := m.Slots.Count()
	e := &entry{id: m.ID, cfg: m.Clone(), sched: newScheduler(m.ID, n)}
	r.entries[m.ID] = e
	r.order = append(r.order, e)
	return e
}

// validate checks a model entry without touching live state: the family
// exists and serves the task and mode, and the slot count is valid.
func (r *Runtime) validate(m config.Model) error {
	if m.ID == "" {
		return apierror.Invalidf("model id is required")
	}
	if _, err := m.Slots.Count(); err != nil {
		return apierror.Invalidf("model %q: %v", m.ID, err)
	}
	f, ok := r.family(m.Family)
	if !ok {
		return apierror.Invalidf("model %q: unknown family %q; registered families: %v", m.ID, m.Family, session.Names())
	}
	if !f.Supports(m.Task, m.Mode) {
		return apierror.Invalidf("model %q: family %q does not serve task %q in %s mode", m.ID, m.Family, m.Task, m.Mode)
	}
	return nil
}

// Name is "parallel".
func (r *Runtime) Name() string { return "parallel" }

// LeaseBeforeStream is true: streams bind their lease before headers.
func (r *Runtime) LeaseBeforeStream() bool { return true }

func (r *Runtime) lookup(id string) (*entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[id]
	return e, ok
}

func (r *Runtime) snapshot() []*entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*entry(nil), r.order...)
}

// Start loads the non-lazy models in order, at most max_loaded_models of
// them. An unsupported slot count on an eager model is a startup error.
func (r *Runtime) Start(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	loaded := 0
	for _, e := range r.snapshot() {
		e.mu.Lock()
		cfg := e.cfg
		e.mu.Unlock()
		if cfg.Lazy {
			continue
		}
		if r.cfg.MaxLoadedModels > 0 && loaded >= r.cfg.MaxLoadedModels {
			r.log.Info("not loading at startup: max_loaded_models reached", "model", e.id, "max_loaded_models", r.cfg.MaxLoadedModels)
			continue
		}
		if err := e.sched.acquireExclusive(ctx, 0); err != nil {
			return err
		}
		err := r.ensureLoaded(ctx, e, cfg, nil)
		e.sched.releaseExclusive()
		if err != nil {
			return fmt.Errorf("at startup: %w", err)
		}
		loaded++
	}
	return nil
}

// Models reports every registered model in registration order.
func (r *Runtime) Models() []runtimes.ModelStatus {
	out := []runtimes.ModelStatus{}
	for _, e := range r.snapshot() {
		e.mu.Lock()
		st := runtimes.ModelStatus{Model: e.cfg.Clone(), Loaded: e.loaded}
		configured, _ := e.cfg.Slots.Count()
		var maxSlots *int
		if e.loaded && e.pool != nil {
			c := e.pool.capacity
			maxSlots = &c
		}
		e.mu.Unlock()
		ss := e.sched.stats()
		st.Slots = &runtimes.SlotStatus{
			Configured: configured, Active: ss.occupied, Queued: ss.queuedRequests, MaxParallelSlots: maxSlots,
		}
		out = append(out, st)
	}
	return out
}

// Lookup returns the current configuration of a model.
func (r *Runtime) Lookup(id string) (config.Model, bool) {
	e, ok := r.lookup(id)
	if !ok {
		return config.Model{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.Clone(), true
}

// policyTimeout is the busy timeout of model e for a request override.
func (r *Runtime) policyTimeout(e *entry, request *int64) time.Duration {
	e.mu.Lock()
	ceiling := e.cfg.BusyTimeoutMs
	e.mu.Unlock()
	return runtimes.EffectiveBusyTimeout(r.cfg.BusyTimeoutMs, ceiling, request)
}

// lease is one request's slot (or, internally, nothing else).
type lease struct {
	e        *entry
	r        *Runtime
	slot     int
	sess     session.Session
	cfg      config.Model
	released atomic.Bool
}

func (l *lease) Session() session.Session { return l.sess }
func (l *lease) Model() config.Model      { return l.cfg }

// Release frees the slot; later calls do nothing.
func (l *lease) Release() {
	if !l.released.CompareAndSwap(false, true) {
		return
	}
	l.e.touch(l.r.now())
	l.e.sched.release(l.slot)
}

func (e *entry) touch(t time.Time) {
	e.mu.Lock()
	e.lastUsed = t
	e.mu.Unlock()
}

// Acquire binds the caller to a slot of model id, loading the model when it
// is not loaded. The wait is not cancelled with ctx (the contract keeps
// disconnected clients queued); the busy timeout bounds it.
func (r *Runtime) Acquire(ctx context.Context, id string, busyTimeoutMs *int64) (runtimes.Lease, error) {
	if r.closed.Load() {
		return nil, apierror.Busyf("server is shutting down: %v", errClosed)
	}
	e, ok := r.lookup(id)
	if !ok {
		return nil, runtimes.UnknownModel(id)
	}
	ctx = context.WithoutCancel(ctx)
	slot, err := e.sched.acquire(ctx, r.policyTimeout(e, busyTimeoutMs))
	if err != nil {
		return nil, err
	}
	ok = false
	defer func() {
		if !ok { // error or panic: the slot goes back
			e.sched.release(slot)
		}
	}()
	e.touch(r.now())
	// The config cannot change while a slot is held (only under the
	// exclusive hold), so this is the config the session is loaded with.
	e.mu.Lock()
	cfg := e.cfg.Clone()
	p := e.pool
	e.mu.Unlock()
	if p == nil {
		if err := r.ensureLoaded(ctx, e, cfg, nil); err != nil {
			return nil, err
		}
		e.mu.Lock()
		p = e.pool
		e.mu.Unlock()
	}
	if p == nil || slot >= len(p.sessions) {
		return nil, apierror.Internalf("model %q: no session for slot %d (pool of %d)", id, slot, poolLen(p))
	}
	ok = true
	return &lease{e: e, r: r, slot: slot, sess: p.sessions[slot], cfg: cfg}, nil
}

func poolLen(p *pool) int {
	if p == nil {
		return 0
	}
	return len(p.sessions)
}

// capacityError reports a slot count above what the family advertises.
type capacityError struct {
	id              string
	slots, capacity int
}

func (c *capacityError) Error() string {
	return fmt.Sprintf("model %q asks for slots=%d but its family advertises capacity=%d on this backend, task and mode; set slots to at most %d",
		c.id, c.slots, c.capacity, c.capacity)
}

// ensureLoaded loads e's pool with cfg unless it is loaded. The caller holds
// a slot or the exclusive hold of e. probe, when not nil, are assets already
// loaded for cfg (by a capacity probe); ensureLoaded owns them.
func (r *Runtime) ensureLoaded(ctx context.Context, e *entry, cfg config.Model, probe session.Assets) (err error) {
	e.initMu.Lock()
	defer e.initMu.Unlock()
	e.mu.Lock()
	loaded := e.pool != nil
	e.mu.Unlock()
	if loaded {
		if probe != nil {
			_ = probe.Close()
		}
		return nil
	}
	evicted, err := r.reserveResidency(e)
	if err != nil {
		if probe != nil {
			_ = probe.Close()
		}
		return err
	}
	published := false
	defer func() {
		if !published {
			e.mu.Lock()
			e.reserved = false
			e.mu.Unlock()
		}
	}()
	if r.guard.On() && probe == nil { // a probe's assets are loaded (and were checked) already
		r.loadMu.Lock()
		defer r.loadMu.Unlock()
		evicted.Wait() // count the memory the evictions free
		if err := r.guard.Check(cfg); err != nil {
			return err
		}
	}
	p, err := r.buildPool(ctx, cfg, probe)
	if err != nil {
		var ce *capacityError
		if errors.As(err, &ce) {
			return apierror.Internalf("loading model %q failed: %v", e.id, err)
		}
		if apierror.Is(err, apierror.TypeInvalid) {
			return err
		}
		return apierror.Internalf("loading model %q failed: %v", e.id, err)
	}
	e.mu.Lock()
	e.pool = p
	e.loaded = true
	e.reserved = false
	e.lastUsed = r.now()
	e.mu.Unlock()
	published = true
	r.log.Info("model loaded", "model", e.id, "slots", len(p.sessions), "capacity", p.capacity)
	return nil
}

// buildPool loads assets (unless probe is given) and creates the primary
// session and its clones in sequence. On any failure it closes what it made
// (clones before the primary, sessions before the assets) and publishes
// nothing.
func (r *Runtime) buildPool(ctx context.Context, cfg config.Model, probe session.Assets) (p *pool, err error) {
	count, err := cfg.Slots.Count()
	if err != nil {
		return nil, apierror.Invalidf("model %q: %v", cfg.ID, err)
	}
	assets := probe
	if assets == nil {
		f, ok := r.family(cfg.Family)
		if !ok {
			return nil, apierror.Invalidf("model %q: unknown family %q", cfg.ID, cfg.Family)
		}
		assets, err = f.Load(ctx, r.env, cfg.Spec())
		if err != nil {
			return nil, err
		}
		if assets == nil {
			return nil, fmt.Errorf("family %q returned no assets", cfg.Family)
		}
	}
	var sessions []session.Session
	done := false
	defer func() {
		if done {
			return
		}
		for i := len(sessions) - 1; i >= 0; i-- {
			_ = sessions[i].Close()
		}
		_ = assets.Close()
		if rec := recover(); rec != nil {
			panic(rec)
		}
	}()
	capacity := min(assets.Capacity(), MaxSlots)
	if capacity < 1 {
		capacity = 1
	}
	if count > capacity {
		return nil, &capacityError{id: cfg.ID, slots: count, capacity: capacity}
	}
	for i := 0; i < count; i++ {
		s, err := assets.NewSession()
		if err != nil {
			what := "primary session"
			if i > 0 {
				what = fmt.Sprintf("clone %d", i)
			}
			return nil, fmt.Errorf("creating the %s: %w", what, err)
		}
		if s == nil {
			return nil, fmt.Errorf("family %q returned no session (index %d)", cfg.Family, i)
		}
		sessions = append(sessions, s)
	}
	done = true
	return &pool{assets: assets, sessions: sessions, capacity: capacity}, nil
}

// teardown clears e's logical residency, then closes its pool (clones
// before the primary, sessions before the assets). The caller holds e's
// exclusive hold.
func (r *Runtime) teardown(e *entry) {
	e.mu.Lock()
	p := e.pool
	e.pool = nil
	e.loaded = false
	e.mu.Unlock()
	if p == nil {
		return
	}
	closePool(p)
	r.log.Info("model unloaded", "model", e.id)
}

func closePool(p *pool) {
	for i := len(p.sessions) - 1; i >= 0; i-- {
		_ = p.sessions[i].Close()
	}
	_ = p.assets.Close()
}

// reserveResidency makes room for e under max_loaded_models: it counts the
// other resident (and loading) models and retires least recently used idle
// ones by try-acquire only. A busy, loading or queued model is skipped, a
// retiring one does not count; if nothing can be evicted the load gets 503.
// Evicted models tear down in the background, residency already cleared;
// evicted.Wait() waits for those teardowns.
func (r *Runtime) reserveResidency(e *entry) (evicted *sync.WaitGroup, err error) {
	evicted = &sync.WaitGroup{}
	limit := r.cfg.MaxLoadedModels
	if limit <= 0 {
		return evicted, nil
	}
	all := r.snapshot()
	r.resMu.Lock()
	var victims []*entry
	count := 0
	type cand struct {
		e    *entry
		used time.Time
	}
	var cands []cand
	for _, o := range all {
		if o == e {
			continue
		}
		o.mu.Lock()
		if o.loaded || o.reserved {
			count++
			if o.loaded && !o.reserved {
				cands = append(cands, cand{o, o.lastUsed})
			}
		}
		o.mu.Unlock()
	}
	for count >= limit {
		// Least recently used candidate that is idle right now.
		best := -1
		for i, c := range cands {
			if c.e != nil && (best < 0 || c.used.Before(cands[best].used)) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		v := cands[best].e
		cands[best].e = nil
		if !v.sched.tryExclusive() {
			continue
		}
		v.mu.Lock()
		if !v.loaded { // unloaded meanwhile
			v.mu.Unlock()
			v.sched.releaseExclusive()
			continue
		}
		v.loaded = false // logical residency cleared before teardown
		v.mu.Unlock()
		victims = append(victims, v)
		count--
	}
	if count < limit {
		e.mu.Lock()
		e.reserved = true
		e.mu.Unlock()
	}
	r.resMu.Unlock()
	for _, v := range victims {
		r.log.Info("evicting model for max_loaded_models", "model", v.id, "for", e.id)
		r.background.Add(1)
		evicted.Add(1)
		go func() {
			defer r.background.Done()
			defer evicted.Done()
			r.teardown(v)
			v.sched.releaseExclusive()
		}()
	}
	if count >= limit {
		return evicted, apierror.Busyf("cannot load model %q: max_loaded_models=%d models are loaded and none is idle; retry later or unload a model", e.id, limit)
	}
	return evicted, nil
}

// Register adds or replaces a model and makes sure it is loaded.
func (r *Runtime) Register(ctx context.Context, m config.Model) (bool, error) {
	if r.closed.Load() {
		return false, apierror.Busyf("server is shutting down: %v", errClosed)
	}
	ctx = context.WithoutCancel(ctx)
	if err := r.validate(m); err != nil {
		return false, err
	}
	m = m.Clone()
	r.mu.Lock()
	e, exists := r.entries[m.ID]
	if !exists {
		// New entry: hold its exclusive lease before it is published, so
		// it is visible while loading and same-id registrations queue.
		e = r.addLocked(m)
		if !e.sched.tryExclusive() {
			r.mu.Unlock()
			panic("parallel: fresh entry not idle")
		}
		r.mu.Unlock()
		defer e.sched.releaseExclusive()
		return false, r.ensureLoaded(ctx, e, m, nil)
	}
	r.mu.Unlock()

	if err := e.sched.acquireExclusive(ctx, r.policyTimeout(e, nil)); err != nil {
		return false, err
	}
	defer e.sched.releaseExclusive()
	e.mu.Lock()
	old := e.cfg.Clone()
	var oldCapacity int
	if e.pool != nil {
		oldCapacity = e.pool.capacity
	}
	e.mu.Unlock()
	if sameRegistration(old, m) {
		return false, r.ensureLoaded(ctx, e, old, nil)
	}
	newCount, _ := m.Slots.Count()
	var probe session.Assets
	if newCount > 1 {
		capacity := oldCapacity
		if !sameInputs(old, m) || oldCapacity == 0 {
			// Probe privately with the new inputs before tearing down.
			a, err := r.loadProbe(ctx, m)
			if err != nil {
				return false, apierror.From(fmt.Errorf("model %q: the replacement failed to load; the current model is kept: %w", m.ID, err))
			}
			if a == nil {
				return false, apierror.Internalf("model %q: family %q returned no assets; the current model is kept", m.ID, m.Family)
			}
			probe = a
			capacity = max(1, min(a.Capacity(), MaxSlots))
		}
		if newCount > capacity {
			if probe != nil {
				_ = probe.Close()
			}
			return false, apierror.Invalidf("%v; the current model is kept", &capacityError{id: m.ID, slots: newCount, capacity: capacity})
		}
	}
	// Commit: tear down the old pool, swap the config, load the new one.
	r.teardown(e)
	if err := e.sched.resize(newCount); err != nil {
		if probe != nil {
			_ = probe.Close()
		}
		return false, apierror.Internalf("model %q: %v", m.ID, err)
	}
	e.mu.Lock()
	e.cfg = m
	e.mu.Unlock()
	r.log.Info("model reconfigured", "model", m.ID, "slots", newCount)
	if err := r.ensureLoaded(ctx, e, m, probe); err != nil {
		return true, err
	}
	return true, nil
}

// loadProbe loads m's assets privately for a capacity probe, next to the
// current pool; the memory guard checks it first, and a refusal keeps the
// current model.
func (r *Runtime) loadProbe(ctx context.Context, m config.Model) (session.Assets, error) {
	if r.guard.On() {
		r.loadMu.Lock()
		defer r.loadMu.Unlock()
		if err := r.guard.Check(m); err != nil {
			ae := apierror.From(err)
			return nil, &apierror.Error{Status: ae.Status, Type: ae.Type, Message: ae.Message + "; the current model is kept", Err: err}
		}
	}
	f, _ := r.family(m.Family)
	return f.Load(ctx, r.env, m.Spec())
}

// sameInputs reports whether a and b load the same assets.
func sameInputs(a, b config.Model) bool {
	return a.Path == b.Path && a.Family == b.Family && a.Task == b.Task && a.Mode == b.Mode &&
		a.Config == b.Config && a.Weight == b.Weight && a.ModelSpecOverride == b.ModelSpecOverride &&
		maps.Equal(a.LoadOptions, b.LoadOptions) && maps.Equal(a.SessionOptions, b.SessionOptions)
}

// sameRegistration reports whether b, given to POST /v1/models/load, changes
// nothing of a.
func sameRegistration(a, b config.Model) bool {
	ca, _ := a.Slots.Count()
	cb, _ := b.Slots.Count()
	return sameInputs(a, b) && ca == cb
}

// Unload unloads one model; idempotent; unknown ids are not_found.
func (r *Runtime) Unload(ctx context.Context, id string) error {
	e, ok := r.lookup(id)
	if !ok {
		return runtimes.UnknownModel(id)
	}
	ctx = context.WithoutCancel(ctx)
	if err := e.sched.acquireExclusive(ctx, r.policyTimeout(e, nil)); err != nil {
		return err
	}
	defer e.sched.releaseExclusive()
	r.teardown(e)
	return nil
}

// UnloadModels unloads the given models (bulk): it snapshots the registry,
// de-duplicates ids, publishes every barrier in one short section
// (serialised only against other bulk calls), unloads the idle models
// first, then waits without limit for the busy ones. Every known selected
// id is listed once in unloaded, even if it was not loaded.
func (r *Runtime) UnloadModels(ctx context.Context, ids []string) (unloaded, notFound []string, err error) {
	seen := map[string]bool{}
	var sel []*entry
	unloaded, notFound = []string{}, []string{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if e, ok := r.lookup(id); ok {
			sel = append(sel, e)
			unloaded = append(unloaded, id)
		} else {
			notFound = append(notFound, id)
		}
	}
	r.bulkUnload(ctx, sel)
	return unloaded, notFound, nil
}

// UnloadAll unloads every registered model (bulk, as UnloadModels).
func (r *Runtime) UnloadAll(ctx context.Context) ([]string, error) {
	sel := r.snapshot()
	ids := make([]string, 0, len(sel))
	for _, e := range sel {
		ids = append(ids, e.id)
	}
	r.bulkUnload(ctx, sel)
	return ids, nil
}

func (r *Runtime) bulkUnload(_ context.Context, sel []*entry) {
	r.bulkMu.Lock()
	waiters := make([]*waiter, len(sel))
	for i, e := range sel {
		waiters[i] = e.sched.enqueueExclusive()
	}
	r.bulkMu.Unlock()
	// Idle models (barriers granted at once) first.
	var pending []int
	for i, w := range waiters {
		select {
		case <-w.ready:
			r.teardown(sel[i])
			sel[i].sched.releaseExclusive()
		default:
			pending = append(pending, i)
		}
	}
	// Then the busy ones, each as soon as it drains.
	var wg sync.WaitGroup
	for _, i := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-waiters[i].ready
			r.teardown(sel[i])
			sel[i].sched.releaseExclusive()
		}()
	}
	wg.Wait()
}

// idleLoop retires models idle for at least limit, by try-acquire only.
func (r *Runtime) idleLoop(limit time.Duration) {
	defer r.background.Done()
	tick := max(limit/10, minIdleTick)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.stopIdle:
			return
		case <-t.C:
		}
		now := r.now()
		for _, e := range r.snapshot() {
			e.mu.Lock()
			idle := e.loaded && !e.reserved && now.Sub(e.lastUsed) >= limit
			e.mu.Unlock()
			if !idle || !e.sched.tryExclusive() {
				continue
			}
			// A request may have come and gone between the check and the
			// hold: look again now that nothing can start.
			e.mu.Lock()
			idle = e.loaded && now.Sub(e.lastUsed) >= limit
			e.mu.Unlock()
			if !idle {
				e.sched.releaseExclusive()
				continue
			}
			r.log.Info("unloading idle model", "model", e.id, "idle_unload_ms", limit.Milliseconds())
			r.teardown(e)
			e.sched.releaseExclusive()
		}
	}
}

// Close stops background work and unloads every model, waiting for each to
// drain. The HTTP server has drained every request before it is called.
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		close(r.stopIdle)
		r.background.Wait()
		for _, e := range r.snapshot() {
			_ = e.sched.acquireExclusive(context.Background(), 0)
			r.teardown(e)
			e.sched.releaseExclusive()
		}
	})
	return nil
}
