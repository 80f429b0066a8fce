package parallel

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/runtimes/legacy"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// benchRuntime builds a runtime over one fixture model for a benchmark.
func benchRuntime(b *testing.B, kind string, slots, capacity int, file string) runtimes.Runtime {
	b.Helper()
	m := fixtureModel("m", file, slots, capacity)
	m.Lazy = false
	cfg := config.Default()
	cfg.BusyTimeoutMs = 0
	cfg.Models = []config.Model{m}
	var rt runtimes.Runtime
	var err error
	switch kind {
	case "legacy":
		m.Slots = config.Slots{}
		cfg.Models = []config.Model{m}
		rt, err = legacy.New(runtimes.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	default:
		rt, err = New(runtimes.Options{Config: cfg})
	}
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close() })
	return rt
}

// BenchmarkAdmission measures the parallel runtime's admission overhead per
// request: Acquire and Release of a loaded model, without running it,
// uncontended and with 8 goroutines competing for 1 or 4 slots.
func BenchmarkAdmission(b *testing.B) {
	b.Run("uncontended", func(b *testing.B) {
		rt := benchRuntime(b, "parallel", 1, 0, fmt.Sprintf("bench-admission-%d.bin", time.Now().UnixNano()))
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			l, err := rt.Acquire(ctx, "m", nil)
			if err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
	})
	for _, slots := range []int{1, 4} {
		b.Run(fmt.Sprintf("contended/slots=%d", slots), func(b *testing.B) {
			rt := benchRuntime(b, "parallel", slots, 0, fmt.Sprintf("bench-admission-c%d-%d.bin", slots, time.Now().UnixNano()))
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := rt.Acquire(ctx, "m", nil)
					if err != nil {
						b.Error(err)
						return
					}
					l.Release()
				}
			})
		})
	}
}

// BenchmarkFixtureSlots runs the fixture model with fixture_delay_ms=5 under
// 16 concurrent clients on the legacy runtime and on the parallel runtime at
// 1, 2, 4 and 8 slots, in one run, and reports requests per second and
// p50/p99 latency. Run it with a fixed count, e.g. -benchtime 400x.
func BenchmarkFixtureSlots(b *testing.B) {
	cases := []struct {
		name  string
		kind  string
		slots int
	}{{"legacy", "legacy", 0}, {"parallel/slots=1", "parallel", 1}, {"parallel/slots=2", "parallel", 2},
		{"parallel/slots=4", "parallel", 4}, {"parallel/slots=8", "parallel", 8}}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rt := benchRuntime(b, c.kind, c.slots, 8, fmt.Sprintf("bench-slots-%s-%d.bin", c.kind, time.Now().UnixNano()))
			ctx := context.Background()
			opts := map[string]string{"fixture_delay_ms": "5"}
			const clients = 16
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						t0 := time.Now()
						l, err := rt.Acquire(ctx, "m", nil)
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := l.Session().Run(ctx, &session.Request{Input: "x", Options: opts}, nil); err != nil {
							b.Error(err)
						}
						l.Release()
						lat[i] = time.Since(t0)
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
			b.ReportMetric(pct(0.50), "p50_ms")
			b.ReportMetric(pct(0.99), "p99_ms")
		})
	}
}
