// Command silero-bench measures the silero_vad family's real-time factor on
// ggml backends: it joins the given WAV clips (mixed to mono, resampled to
// 16 kHz) into a signal of -chunks chunks, runs it -runs times after one
// warm-up on each backend, and prints one JSON line per backend with the
// best time. With -write-f32 it also writes the signal (float32, 16 kHz) for
// the onnxruntime side of scripts/bench-vad.sh, so both measure the same audio.
//
//	silero-bench -model .deps/models/silero_vad_v5.gguf -backends cpu,vulkan testdata/vad/*.wav
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/families/silero"
	"github.com/audioproof/audioproof/server/families/silero/vad"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/session"
)

type result struct {
	Backend string  `json:"backend"`
	Device  string  `json:"device"`
	Threads int     `json:"threads"`
	BestMs  float64 `json:"best_ms"`
	AudioS  float64 `json:"audio_s"`
	RTF     float64 `json:"rtf"`
	Chunks  int     `json:"chunks"`
	Error   string  `json:"error,omitempty"`
}

func main() {
	model := flag.String("model", ".deps/models/silero_vad_v5.gguf", "converted weights")
	ggmlDir := flag.String("ggml-dir", "", "ggml library folder (default: "+ggml.EnvDir+" or .deps/ggml)")
	backends := flag.String("backends", "cpu,vulkan", "comma-separated backends to measure")
	threads := flag.Int("threads", 1, "CPU threads")
	chunks := flag.Int("chunks", 444, "signal length in 512-sample chunks (444 = 14.2 s)")
	runs := flag.Int("runs", 5, "timed runs per backend (the best is reported)")
	writeF32 := flag.String("write-f32", "", "also write the signal here as float32 (16 kHz mono)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: silero-bench [flags] clip.wav...")
		os.Exit(2)
	}
	sig, err := signal(flag.Args(), *chunks*vad.ChunkSize)
	if err != nil {
		fail(err)
	}
	if *writeF32 != "" {
		buf := make([]byte, 4*len(sig))
		for i, v := range sig {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		if err := os.WriteFile(*writeF32, buf, 0o644); err != nil {
			fail(err)
		}
	}
	kinds := strings.Split(*backends, ",")
	for _, k := range kinds {
		if k == "vulkan" {
			// f32 shaders: the accuracy the family's tests check (see the
			// family's tests); lavapipe when no GPU is visible.
			if os.Getenv("GGML_VK_DISABLE_F16") == "" {
				os.Setenv("GGML_VK_DISABLE_F16", "1")
			}
			if _, err := ggml.PrepareVulkanEnv(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
				fmt.Fprintln(os.Stderr, "silero-bench:", err)
			}
		}
	}
	dir := *ggmlDir
	if dir == "" {
		dir = ggml.DefaultDir()
	}
	lib, err := ggml.Open(dir)
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, k := range kinds {
		r := bench(lib, k, *threads, *model, sig, *runs)
		enc.Encode(r)
	}
}

func bench(lib *ggml.Library, kind string, threads int, model string, sig []float32, runs int) result {
	r := result{Backend: kind, Threads: threads, AudioS: float64(len(sig)) / vad.SampleRate, Chunks: vad.NumChunks(len(sig))}
	be, err := lib.NewBackend(kind, 0, threads)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer be.Close()
	r.Device = be.Device().Description
	a, err := silero.Family{}.Load(context.Background(), session.Env{Backend: kind, Threads: threads, Compute: be},
		session.Spec{ID: "silero-vad", Family: silero.FamilyName, Path: model, Task: session.TaskVAD, Mode: session.ModeOffline})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer a.Close()
	s, err := a.NewSession()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer s.Close()
	sess := s.(*silero.Session)
	ctx := context.Background()
	if _, err := sess.Probabilities(ctx, sig); err != nil { // warm-up: graphs, pipelines
		r.Error = err.Error()
		return r
	}
	best := math.Inf(1)
	for i := 0; i < runs; i++ {
		start := time.Now()
		if _, err := sess.Probabilities(ctx, sig); err != nil {
			r.Error = err.Error()
			return r
		}
		best = math.Min(best, float64(time.Since(start))/1e6)
	}
	r.BestMs = best
	r.RTF = best / 1000 / r.AudioS
	return r
}

// signal joins the clips' 16 kHz mono audio, repeating them as needed, into
// exactly n samples.
func signal(files []string, n int) ([]float32, error) {
	var all []float32
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		c, err := audio.DecodeWAV(data, audio.Limits{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		all = append(all, audio.Resample(audio.Mono(c), vad.SampleRate).Samples...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("the clips hold no audio")
	}
	out := make([]float32, 0, n)
	for len(out) < n {
		out = append(out, all[:min(len(all), n-len(out))]...)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "silero-bench:", err)
	os.Exit(1)
}
