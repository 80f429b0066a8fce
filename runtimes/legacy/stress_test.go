package legacy

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/families/fixture"
	"github.com/audioproof/audioproof/server/session"
)

// TestStressMixedOperations runs requests, unloads, bulk unloads and
// replacements on several models at once under max_loaded_models, with a
// fixed seed per worker. It checks that nothing deadlocks, every error is a
// 503 busy answer, every request is served by the session of the
// configuration its lease reports, sessions always die before their assets,
// and Close leaves nothing alive.
func TestStressMixedOperations(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	var models []config.Model
	for _, id := range ids {
		models = append(models, mdl(t, id))
	}
	cfg := cfgWith(3, models...)
	cfg.MaxLoadedModels = 2
	rt := newRT(t, cfg)
	ctx := context.Background()

	// Each id may be served by its own file or an alternate one.
	files := map[string][2]string{}
	for _, id := range ids {
		files[id] = [2]string{fileName(t, id), fileName(t, id+"-alt")}
	}

	const workers, ops = 8, 150
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range ops {
				id := ids[rng.IntN(len(ids))]
				var err error
				switch k := rng.IntN(10); {
				case k < 6:
					err = stressRequest(ctx, rt, id, rng)
				case k == 6:
					err = rt.Unload(ctx, id)
				case k == 7:
					_, _, err = rt.UnloadModels(ctx, []string{id, ids[rng.IntN(len(ids))]})
				default:
					m := mdl(t, id)
					m.Path = "/fixtures/" + files[id][rng.IntN(2)]
					_, err = rt.Register(ctx, m)
				}
				if err != nil && !apierror.Is(err, apierror.TypeBusy) {
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	rt.Close()
	for _, id := range ids {
		for _, f := range files[id] {
			c := fixture.Control(f)
			if c.Sessions.Load() != 0 || c.PrematureModelDestruction.Load() || c.UseAfterClose.Load() {
				t.Errorf("%s: live sessions %d, premature %v, use after close %v", f,
					c.Sessions.Load(), c.PrematureModelDestruction.Load(), c.UseAfterClose.Load())
			}
			if c.Loads.Load() != c.Destructions.Load() {
				t.Errorf("%s: %d loads but %d destructions after Close", f, c.Loads.Load(), c.Destructions.Load())
			}
			if c.MaxConcurrentRuns() > 1 {
				t.Errorf("%s: %d runs overlapped", f, c.MaxConcurrentRuns())
			}
		}
	}
}

func stressRequest(ctx context.Context, rt *Runtime, id string, rng *rand.Rand) error {
	var override *int64
	if rng.IntN(2) == 0 {
		override = ptr(int64(rng.IntN(3)))
	}
	l, err := rt.Acquire(ctx, id, override)
	if err != nil {
		return err
	}
	defer l.Release()
	res, err := l.Session().Run(ctx, &session.Request{}, nil)
	if err != nil {
		return err
	}
	if want := filepath.Base(l.Model().Path); res.Text != want {
		return apierror.Internalf("model %s served by %s, its lease says %s", id, res.Text, want)
	}
	return nil
}
