package legacy

import (
	"context"
	"testing"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/session"
)

// BenchmarkAcquireRunRelease measures the runtime's own overhead per request
// on a warm fixture model (the fixture's run does no work), uncontended and
// with every CPU contending for the one session.
func BenchmarkAcquireRunRelease(b *testing.B) {
	cfg := cfgWith(0, mdl(b, "m"))
	rt, err := New(runtimes.Options{Config: cfg, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	req := &session.Request{}
	one := func() {
		l, err := rt.Acquire(ctx, "m", nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Session().Run(ctx, req, nil); err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
	one() // load
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			one()
		}
	})
	b.Run("contended", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	})
}
