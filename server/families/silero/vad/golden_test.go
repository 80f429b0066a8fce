package vad

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/families/silero/gguf"
)

// repoRoot is the module root, found from this file's location.
func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// golden mirrors testdata/vad/golden.json (written by scripts/vad-reference.sh).
type golden struct {
	Clips []struct {
		File          string    `json:"file"`
		SampleRate    int       `json:"sample_rate"`
		Channels      int       `json:"channels"`
		Frames        int64     `json:"frames"`
		Frames16k     int       `json:"frames_16k"`
		Probabilities []float32 `json:"probabilities"`
		Variants      []struct {
			Options  map[string]string `json:"options"`
			Segments []struct {
				StartSample int64   `json:"start_sample"`
				EndSample   int64   `json:"end_sample"`
				Confidence  float64 `json:"confidence"`
			} `json:"segments"`
		} `json:"variants"`
	} `json:"clips"`
}

func loadGolden(t testing.TB) *golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "vad", "golden.json"))
	if err != nil {
		t.Fatalf("golden data: %v (regenerate with scripts/vad-reference.sh)", err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Clips) == 0 {
		t.Fatal("golden.json has no clips")
	}
	return &g
}

// loadClip16k decodes a test clip and converts it the way the family does.
func loadClip16k(t testing.TB, file string) (*audio.Clip, []float32) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "vad", file))
	if err != nil {
		t.Fatal(err)
	}
	clip, err := audio.DecodeWAV(data, audio.Limits{})
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return clip, audio.Resample(audio.Mono(clip), SampleRate).Samples
}

// modelWeights loads the converted model from .deps (made by make deps /
// scripts/fetch-silero.sh). Without it the test is skipped, except in CI.
func modelWeights(t testing.TB) *Weights {
	t.Helper()
	path := filepath.Join(repoRoot(t), ".deps", "models", GGUFName)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: run scripts/fetch-silero.sh (make deps)", path)
		}
		t.Skipf("%s is missing: run scripts/fetch-silero.sh (make deps) to test with the real weights", path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestReferenceMatchesOnnxruntime checks the plain-Go forward pass, and so
// the converted weights and our reading of the graph, against onnxruntime.
func TestReferenceMatchesOnnxruntime(t *testing.T) {
	w := modelWeights(t)
	g := loadGolden(t)
	for _, c := range g.Clips {
		t.Run(c.File, func(t *testing.T) {
			_, s := loadClip16k(t, c.File)
			if len(s) != c.Frames16k {
				t.Fatalf("16 kHz length %d, golden %d", len(s), c.Frames16k)
			}
			want := c.Probabilities
			if raceEnabled {
				// The network is causal: a prefix checks the same thing,
				// and the float64 reference is slow under the race detector.
				s = s[:min(len(s), 48*ChunkSize)]
				want = want[:NumChunks(len(s))]
			}
			got := NewReference(w).Probabilities(s)
			if len(got) != len(want) {
				t.Fatalf("%d probabilities, golden %d", len(got), len(want))
			}
			maxDiff := 0.0
			for i := range got {
				maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-float64(want[i])))
			}
			t.Logf("max |diff| = %.3g over %d chunks", maxDiff, len(got))
			if maxDiff > 1e-4 {
				t.Errorf("max |diff| = %g, want <= 1e-4", maxDiff)
			}
		})
	}
}

// TestTimestampsMatchReference runs the Go post-processing on onnxruntime's
// probabilities and expects exactly the segments of the JavaScript port.
func TestTimestampsMatchReference(t *testing.T) {
	g := loadGolden(t)
	total := 0
	for _, c := range g.Clips {
		for vi, v := range c.Variants {
			o, err := ParseOptions(v.Options)
			if err != nil {
				t.Fatalf("%s variant %d: %v", c.File, vi, err)
			}
			got := ToInputRate(SpeechTimestamps(c.Probabilities, c.Frames16k, o), c.Probabilities, c.SampleRate, c.Frames)
			if len(got) != len(v.Segments) {
				t.Errorf("%s variant %d (%v): %d segments %v, want %d %v", c.File, vi, v.Options, len(got), got, len(v.Segments), v.Segments)
				continue
			}
			for i, s := range v.Segments {
				if got[i].StartSample != s.StartSample || got[i].EndSample != s.EndSample || math.Abs(got[i].Confidence-s.Confidence) > 1e-9 {
					t.Errorf("%s variant %d segment %d: got %+v, want %+v", c.File, vi, i, got[i], s)
				}
			}
			total += len(got)
		}
	}
	if total == 0 {
		t.Fatal("the golden data has no segments at all: the clips do not exercise the post-processing")
	}
}
