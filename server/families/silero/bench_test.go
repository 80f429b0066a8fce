package silero

import (
	"context"
	"testing"
	"time"

	"github.com/audioproof/audioproof/server/families/silero/vad"
)

// benchSamples is the length of the benchmark signal: 444 chunks, 14.2 s,
// the clip length of the platform notes' onnxruntime figures.
const benchSamples = 444 * vad.ChunkSize

func benchmarkBackend(b *testing.B, kind string) {
	be := newBackend(b, kind)
	a := loadAssets(b, be, nil)
	s := newSess(b, a)
	sig := longSignal(b)[:benchSamples]
	ctx := context.Background()
	if _, err := s.Probabilities(ctx, sig); err != nil { // build the graphs
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := s.Probabilities(ctx, sig); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(per/(float64(len(sig))/vad.SampleRate), "rtf")
}

// BenchmarkSileroCPU is the network on the CPU backend with one thread over
// 14.2 s of audio; the rtf metric is compute time / audio time.
func BenchmarkSileroCPU(b *testing.B) { benchmarkBackend(b, "cpu") }

// BenchmarkSileroVulkan is the same on Vulkan (lavapipe without a GPU).
func BenchmarkSileroVulkan(b *testing.B) { benchmarkBackend(b, "vulkan") }
