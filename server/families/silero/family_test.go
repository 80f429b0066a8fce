package silero

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/families/silero/vad"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/session"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// needDeps skips (or, in CI, fails) when make deps has not been run.
func needDeps(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: %v (run make deps)", what, err)
	}
	t.Skipf("%s: %v (run make deps to test with it)", what, err)
}

func openLib(t testing.TB) *ggml.Library {
	t.Helper()
	lib, err := ggml.Open(ggml.DefaultDir())
	if err != nil {
		needDeps(t, "ggml libraries", err)
	}
	return lib
}

// TestMain prepares the lavapipe environment before ggml is opened (the
// Vulkan backend reads it when it loads), so the Vulkan tests can run on a
// machine without a GPU.
func TestMain(m *testing.M) {
	// ggml-vulkan computes large f32 matrix products through f16 when the
	// device supports it, which is off by ~2e-3; the accuracy this family
	// promises on Vulkan (1e-3) needs f32 shaders.
	if os.Getenv("GGML_VK_DISABLE_F16") == "" {
		os.Setenv("GGML_VK_DISABLE_F16", "1")
	}
	if _, err := ggml.PrepareVulkanEnv(nil); err != nil {
		fmt.Fprintln(os.Stderr, "silero tests: no Vulkan:", err)
	}
	os.Exit(m.Run())
}

// newBackend returns a backend of kind with one thread, or skips when the
// machine has no such device (Vulkan without lavapipe).
func newBackend(t testing.TB, kind string) *ggml.Backend {
	t.Helper()
	lib := openLib(t)
	be, err := lib.NewBackend(kind, 0, 1)
	if err != nil {
		if kind == "cpu" {
			needDeps(t, "cpu backend", err)
		}
		t.Skipf("no %s device here: %v", kind, err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

func modelPath(t testing.TB) string {
	p := filepath.Join(repoRoot(), ".deps", "models", vad.GGUFName)
	if _, err := os.Stat(p); err != nil {
		needDeps(t, "silero weights", err)
	}
	return p
}

func loadAssets(t testing.TB, be *ggml.Backend, sessionOpts map[string]string) *Assets {
	t.Helper()
	a, err := Family{}.Load(context.Background(), session.Env{Backend: be.Kind(), Compute: be}, session.Spec{
		ID: "silero-vad", Family: FamilyName, Path: modelPath(t), Task: session.TaskVAD, Mode: session.ModeOffline,
		SessionOptions: sessionOpts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a.(*Assets)
}

func newSess(t testing.TB, a *Assets) *Session {
	t.Helper()
	s, err := a.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Session)
}

type goldenClip struct {
	File          string    `json:"file"`
	SampleRate    int       `json:"sample_rate"`
	Frames        int64     `json:"frames"`
	Frames16k     int       `json:"frames_16k"`
	Probabilities []float32 `json:"probabilities"`
	Variants      []struct {
		Options  map[string]string `json:"options"`
		Segments []session.Segment `json:"segments"`
	} `json:"variants"`
}

func loadGolden(t testing.TB) []goldenClip {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "testdata", "vad", "golden.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/vad-reference.sh)", err)
	}
	var g struct {
		Clips []goldenClip `json:"clips"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g.Clips
}

func loadClip(t testing.TB, file string) *audio.Clip {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "testdata", "vad", file))
	if err != nil {
		t.Fatal(err)
	}
	c, err := audio.DecodeWAV(data, audio.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// checkAgainstGolden runs every golden clip and option variant through
// Session.Run: probabilities within tol of onnxruntime's, same segments.
func checkAgainstGolden(t *testing.T, kind string, tol float64) {
	be := newBackend(t, kind)
	a := loadAssets(t, be, nil)
	s := newSess(t, a)
	for _, g := range loadGolden(t) {
		t.Run(g.File, func(t *testing.T) {
			clip := loadClip(t, g.File)
			start := time.Now()
			// The first variant goes through Run with its options; the
			// others reuse its probabilities (the network does not depend on
			// the options) through the same post-processing Run uses.
			opts := map[string]string{"return_probabilities": "true"}
			for k, x := range g.Variants[0].Options {
				opts[k] = x
			}
			res, err := s.Run(context.Background(), &session.Request{Audio: clip, Options: opts}, nil)
			if err != nil {
				t.Fatal(err)
			}
			probs := res.Extra["probabilities"].([]float32)
			if len(probs) != len(g.Probabilities) {
				t.Fatalf("%d probabilities, golden %d", len(probs), len(g.Probabilities))
			}
			d := maxDiff(probs, g.Probabilities)
			t.Logf("%s: max |prob - onnxruntime| = %.3g over %d chunks (%v)", kind, d, len(probs), time.Since(start).Round(time.Millisecond))
			if d > tol {
				t.Errorf("%s: max |prob - onnxruntime| = %.3g, want <= %g", kind, d, tol)
			}
			if res.SampleRate != g.SampleRate {
				t.Errorf("sample_rate %d, want %d", res.SampleRate, g.SampleRate)
			}
			for vi, v := range g.Variants {
				segs := res.Segments
				if vi > 0 {
					o, err := vad.ParseOptions(v.Options)
					if err != nil {
						t.Fatal(err)
					}
					mono16 := len(audio.Resample(audio.Mono(clip), vad.SampleRate).Samples)
					segs = nil
					for _, sg := range vad.ToInputRate(vad.SpeechTimestamps(probs, mono16, o), probs, clip.SampleRate, int64(clip.Frames())) {
						segs = append(segs, session.Segment{StartSample: sg.StartSample, EndSample: sg.EndSample, Confidence: sg.Confidence})
					}
				}
				if len(segs) != len(v.Segments) {
					t.Errorf("variant %v: %d segments %v, want %v", v.Options, len(segs), segs, v.Segments)
					continue
				}
				for i, want := range v.Segments {
					got := segs[i]
					if got.StartSample != want.StartSample || got.EndSample != want.EndSample || math.Abs(got.Confidence-want.Confidence) > tol {
						t.Errorf("variant %v segment %d: got %+v, want %+v", v.Options, i, got, want)
					}
				}
			}
		})
	}
}

func TestGoldenCPU(t *testing.T)    { checkAgainstGolden(t, "cpu", 1e-4) }
func TestGoldenVulkan(t *testing.T) { checkAgainstGolden(t, "vulkan", 1e-3) }

// longSignal is the golden clips' 16 kHz audio end to end (about 20 s): long
// enough to cross block boundaries with several block sizes.
func longSignal(t testing.TB) []float32 {
	var all []float32
	for _, g := range loadGolden(t) {
		c := loadClip(t, g.File)
		all = append(all, audio.Resample(audio.Mono(c), vad.SampleRate).Samples...)
	}
	return all
}

// TestMatchesReferenceAcrossBlocks compares a long signal (many blocks of
// different sizes, state carried between them) with the Go reference.
func TestMatchesReferenceAcrossBlocks(t *testing.T) {
	be := newBackend(t, "cpu")
	a := loadAssets(t, be, nil)
	s := newSess(t, a)
	sig := longSignal(t)
	if raceEnabled {
		// 255 chunks still use every block size (128+64+...+1) once; the
		// float64 reference is slow under the race detector.
		sig = sig[:255*vad.ChunkSize]
	}
	got, err := s.Probabilities(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	w := referenceWeights(t)
	want := vad.NewReference(w).Probabilities(sig)
	if len(got) != len(want) {
		t.Fatalf("%d probabilities, want %d", len(got), len(want))
	}
	d := maxDiff(got, want)
	t.Logf("%d chunks, max |ggml - reference| = %.3g", len(got), d)
	if d > 1e-4 {
		t.Errorf("max |ggml - reference| = %g, want <= 1e-4", d)
	}
}

func referenceWeights(t testing.TB) *vad.Weights {
	w, err := vad.LoadGGUF(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func encode(t testing.TB, r *session.Result) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeterministic: two runs on one backend, in one session and in two,
// give identical bytes.
func TestDeterministic(t *testing.T) {
	be := newBackend(t, "cpu")
	a := loadAssets(t, be, nil)
	s1, s2 := newSess(t, a), newSess(t, a)
	clip := loadClip(t, "pauses_16k.wav")
	req := &session.Request{Audio: clip, Options: map[string]string{"return_probabilities": "true"}}
	var outs [][]byte
	for _, s := range []*Session{s1, s1, s2} {
		r, err := s.Run(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, encode(t, r))
	}
	if !bytes.Equal(outs[0], outs[1]) || !bytes.Equal(outs[0], outs[2]) {
		t.Fatal("runs on the same backend differ")
	}
}

// TestSessionsIndependent runs different clips on several sessions at once
// and expects exactly what each gives when run alone.
func TestSessionsIndependent(t *testing.T) {
	be := newBackend(t, "cpu")
	a := loadAssets(t, be, nil)
	files := []string{"pauses_16k.wav", "speech_8k.wav", "noise_16k.wav", "stereo_44k.wav"}
	sessions := make([]*Session, len(files))
	want := make([][]byte, len(files))
	for i, f := range files {
		sessions[i] = newSess(t, a)
		r, err := sessions[i].Run(context.Background(), &session.Request{Audio: loadClip(t, f), Options: map[string]string{"return_probabilities": "true"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = encode(t, r)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(files)*3)
	for round := 0; round < 2; round++ {
		for i, f := range files {
			wg.Add(1)
			go func(i int, f string) {
				defer wg.Done()
				// Each goroutine uses the session of another clip: state
				// left over from its previous request must not matter.
				r, err := sessions[(i+round)%len(sessions)].Run(context.Background(), &session.Request{Audio: loadClip(t, f), Options: map[string]string{"return_probabilities": "true"}}, nil)
				if err != nil {
					errs <- err
					return
				}
				if got := encode(t, r); !bytes.Equal(got, want[i]) {
					errs <- fmt.Errorf("%s on session %d: result differs from the run alone", f, (i+round)%len(sessions))
				}
			}(i, f)
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBadRequests(t *testing.T) {
	be := newBackend(t, "cpu")
	a := loadAssets(t, be, map[string]string{"threshold": "0.6"})
	s := newSess(t, a)
	clip := loadClip(t, "speech_16k.wav")
	cases := []struct {
		name string
		req  *session.Request
		want string
	}{
		{"no audio", &session.Request{}, "no audio"},
		{"empty audio", &session.Request{Audio: &audio.Clip{SampleRate: 16000, Channels: 1}}, "no audio"},
		{"bad threshold", &session.Request{Audio: clip, Options: map[string]string{"threshold": "loud"}}, "threshold"},
		{"threshold above 1", &session.Request{Audio: clip, Options: map[string]string{"threshold": "1.5"}}, "threshold"},
		{"bad bool", &session.Request{Audio: clip, Options: map[string]string{"use_max_poss_sil_at_max_speech": "maybe"}}, "use_max_poss_sil_at_max_speech"},
		{"bad return_probabilities", &session.Request{Audio: clip, Options: map[string]string{"return_probabilities": "2"}}, "return_probabilities"},
		{"negative pad", &session.Request{Audio: clip, Options: map[string]string{"speech_pad_ms": "-1"}}, "speech_pad_ms"},
		{"zero max speech", &session.Request{Audio: clip, Options: map[string]string{"max_speech_duration_s": "0"}}, "max_speech_duration_s"},
	}
	for _, c := range cases {
		_, err := s.Run(context.Background(), c.req, nil)
		if !apierror.Is(err, apierror.TypeInvalid) || apierror.From(err).Status != 400 {
			t.Errorf("%s: got %v, want a 400 invalid_request_error", c.name, err)
			continue
		}
		if !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: error %q does not name %q", c.name, err, c.want)
		}
	}
	// Session options apply, and the request overrides them.
	base, err := s.Run(context.Background(), &session.Request{Audio: clip}, nil)
	if err != nil {
		t.Fatal(err)
	}
	over, err := s.Run(context.Background(), &session.Request{Audio: clip, Options: map[string]string{"threshold": "0.99", "min_speech_duration_ms": "0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(base.Segments) == 0 {
		t.Fatal("no speech found in speech_16k.wav with threshold 0.6")
	}
	if bytes.Equal(encode(t, base), encode(t, over)) {
		t.Error("request options did not change the result")
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := Family{}.Load(context.Background(), session.Env{}, session.Spec{ID: "x", Path: "whatever"})
	if !errors.Is(err, ErrNoCompute) {
		t.Errorf("nil Compute: got %v, want ErrNoCompute", err)
	}
	be := newBackend(t, "cpu")
	env := session.Env{Compute: be}
	if _, err := (Family{}).Load(context.Background(), env, session.Spec{ID: "x", Path: filepath.Join(t.TempDir(), "missing.gguf")}); err == nil {
		t.Error("missing file: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, []byte("not a gguf file"), 0o644)
	if _, err := (Family{}).Load(context.Background(), env, session.Spec{ID: "x", Path: bad}); err == nil {
		t.Error("bad file: no error")
	}
	if _, err := (Family{}).Load(context.Background(), env, session.Spec{ID: "x", Path: modelPath(t), SessionOptions: map[string]string{"threshold": "x"}}); err == nil {
		t.Error("bad session option: no error")
	}
	// A folder holding the default file name works.
	a, err := Family{}.Load(context.Background(), env, session.Spec{ID: "x", Path: filepath.Dir(modelPath(t))})
	if err != nil {
		t.Fatal(err)
	}
	if a.Capacity() != Capacity {
		t.Errorf("capacity %d, want %d", a.Capacity(), Capacity)
	}
	s, err := a.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err == nil {
		t.Error("closing assets with an open session: no error")
	}
	s.Close()
	s.Close()
	if err := a.Close(); err != nil {
		t.Error(err)
	}
	if err := a.Close(); err != nil {
		t.Error("second Close:", err)
	}
}

func TestRegistered(t *testing.T) {
	f, ok := session.Lookup(FamilyName)
	if !ok {
		t.Fatal("silero_vad is not registered")
	}
	if !f.Supports(session.TaskVAD, session.ModeOffline) || f.Supports(session.TaskVAD, session.ModeStreaming) || f.Supports(session.TaskASR, session.ModeOffline) {
		t.Error("Supports is wrong")
	}
}

// TestNoLeaks: after sessions (with graphs of several sizes) and assets
// close, every ggml context, buffer, allocator and stream they made is gone.
func TestNoLeaks(t *testing.T) {
	be := newBackend(t, "cpu")
	before := be.Library().Live()
	a, err := Family{}.Load(context.Background(), session.Env{Compute: be}, session.Spec{ID: "x", Path: modelPath(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		s, err := a.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		// 200 chunks: blocks of 128, 64 and 8.
		if _, err := s.(*Session).Probabilities(context.Background(), make([]float32, 200*vad.ChunkSize)); err != nil {
			t.Fatal(err)
		}
		if got := len(s.(*Session).blocks); got != 3 {
			t.Errorf("%d cached graphs, want 3", got)
		}
		s.Close()
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if after := be.Library().Live(); after != before {
		t.Errorf("ggml objects before %+v, after %+v", before, after)
	}
}

func TestCancelled(t *testing.T) {
	be := newBackend(t, "cpu")
	s := newSess(t, loadAssets(t, be, nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, &session.Request{Audio: loadClip(t, "speech_16k.wav")}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	// The session still works afterwards.
	if _, err := s.Run(context.Background(), &session.Request{Audio: loadClip(t, "speech_16k.wav")}, nil); err != nil {
		t.Error(err)
	}
}

// TestTinyInputs: a single sample, or a few stereo frames at a low rate,
// are one zero-padded chunk.
func TestTinyInputs(t *testing.T) {
	be := newBackend(t, "cpu")
	s := newSess(t, loadAssets(t, be, nil))
	for _, c := range []*audio.Clip{
		{SampleRate: 16000, Channels: 1, Samples: []float32{0.5}},
		{SampleRate: 8000, Channels: 2, Samples: []float32{0.1, -0.1, 0.2, -0.2, 0.3, -0.3}},
		{SampleRate: 48000, Channels: 1, Samples: make([]float32, 48000*3/100)},
	} {
		res, err := s.Run(context.Background(), &session.Request{Audio: c, Options: map[string]string{"return_probabilities": "true"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := res.Extra["probabilities"].([]float32); len(p) != 1 || p[0] < 0 || p[0] > 1 {
			t.Errorf("%d Hz: probabilities %v", c.SampleRate, p)
		}
		if len(res.Segments) != 0 || res.SampleRate != c.SampleRate {
			t.Errorf("%d Hz: %+v", c.SampleRate, res)
		}
	}
}
