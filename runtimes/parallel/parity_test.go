package parallel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/runtimes/legacy"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/httpapi"
	"github.com/audioproof/audioproof/server/session"

	_ "github.com/audioproof/audioproof/server/families/espeak"
	"github.com/audioproof/audioproof/server/families/silero"
)

// needDeps skips without the fetched dependencies, and fails under CI,
// where make deps has run.
func needDeps(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: %v (run make deps)", what, err)
	}
	t.Skipf("%s: %v (run make deps to test with it)", what, err)
}

var (
	cpuOnce sync.Once
	cpuBE   *ggml.Backend
	cpuErr  error
)

// cpuBackend opens the ggml CPU backend once for the package's tests.
func cpuBackend(t testing.TB) *ggml.Backend {
	t.Helper()
	cpuOnce.Do(func() {
		dir := ggml.DefaultDir()
		if _, err := os.Stat(dir); err != nil {
			dir = filepath.Join(repoRoot(), ".deps", "ggml", "cpu")
		}
		lib, err := ggml.Open(dir)
		if err != nil {
			cpuErr = err
			return
		}
		cpuBE, cpuErr = lib.NewBackend("cpu", 0, 1)
	})
	if cpuErr != nil {
		needDeps(t, "ggml cpu backend", cpuErr)
	}
	return cpuBE
}

// variant is one of the runtimes the parity suite compares.
type variant struct {
	name     string
	parallel bool
	slots    string // "" = absent
}

var parityVariants = []variant{
	{"legacy", false, ""},
	{"parallel/slots-omitted", true, ""},
	{"parallel/slots=1", true, "1"},
}

// serveVariant starts the HTTP API over the variant's runtime; cleanup
// drains the server, then closes the runtime.
func serveVariant(t *testing.T, v variant, env session.Env, models []config.Model) (string, runtimes.Runtime) {
	t.Helper()
	cfg := config.Default()
	cfg.BusyTimeoutMs = 0
	cfg.UIManagement = true
	for _, m := range models {
		m = m.Clone()
		if v.slots != "" {
			m.Slots = config.Slots{Set: true, Raw: v.slots}
		}
		cfg.Models = append(cfg.Models, m)
	}
	opts := runtimes.Options{Config: cfg, Env: env, Logger: slog.New(slog.DiscardHandler)}
	var rt runtimes.Runtime
	var err error
	if v.parallel {
		rt, err = New(opts)
	} else {
		rt, err = legacy.New(opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(httpapi.Options{Config: cfg, Runtime: rt})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-served
		_ = rt.Close()
	})
	return "http://" + l.Addr().String(), rt
}

// step is one request of the parity suite.
type step struct {
	name   string
	method string
	path   string
	ctype  string
	body   []byte
}

func jsonStep(name, path string, body any) step {
	b, _ := json.Marshal(body)
	return step{name: name, method: "POST", path: path, ctype: "application/json", body: b}
}

func multipartStep(name, path string, fields map[string]string, file []byte) step {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.SetBoundary("parityboundary0123456789")
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		_ = w.WriteField(k, fields[k])
	}
	fw, _ := w.CreateFormFile("file", "input.wav")
	_, _ = fw.Write(file)
	_ = w.Close()
	return step{name: name, method: "POST", path: path, ctype: w.FormDataContentType(), body: buf.Bytes()}
}

// parallelOnly are the /v1/models fields the legacy runtime never emits.
var parallelOnly = []string{"slots", "active_slots", "queued_requests", "max_parallel_slots"}

// normalise removes what may differ between runs and runtimes: the top-level
// timing object (of a JSON body or of each SSE event) and, on /v1/models,
// the parallel-only slot fields (checked drained separately).
func normalise(t *testing.T, s step, ctype string, body []byte) string {
	t.Helper()
	strip := func(raw []byte) string {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return string(raw)
		}
		if obj, ok := v.(map[string]any); ok {
			delete(obj, "timing")
			// /v1/tasks/stream carries its timing inside "result".
			if res, ok := obj["result"].(map[string]any); ok && s.path == "/v1/tasks/stream" {
				delete(res, "timing")
			}
			if s.path == "/v1/models" {
				for _, row := range obj["data"].([]any) {
					r := row.(map[string]any)
					if _, has := r["slots"]; has {
						if r["active_slots"].(float64) != 0 || r["queued_requests"].(float64) != 0 {
							t.Errorf("%s: counters not drained: %v", s.name, r)
						}
					}
					for _, k := range parallelOnly {
						delete(r, k)
					}
				}
			}
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	switch {
	case strings.HasPrefix(ctype, "text/event-stream"):
		var out []string
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, "data: "); ok && rest != "[DONE]" {
				out = append(out, "data: "+strip([]byte(rest)))
			} else {
				out = append(out, line)
			}
		}
		return strings.Join(out, "\n")
	case strings.HasPrefix(ctype, "application/json"):
		return strip(body)
	}
	return fmt.Sprintf("%x", body)
}

// runSuite runs steps against url and returns one normalised record per step.
func runSuite(t *testing.T, url string, steps []step) []string {
	t.Helper()
	var out []string
	for _, s := range steps {
		if s.path == "/v1/models" {
			// A lease is released after its response is written, so the
			// client may see the response first: wait for the counters.
			waitDrainedOverHTTP(t, url)
		}
		req, err := http.NewRequest(s.method, url+s.path, bytes.NewReader(s.body))
		if err != nil {
			t.Fatal(err)
		}
		if s.ctype != "" {
			req.Header.Set("Content-Type", s.ctype)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ctype := resp.Header.Get("Content-Type")
		out = append(out, fmt.Sprintf("%s -> %d %s\n%s", s.name, resp.StatusCode, ctype, normalise(t, s, ctype, body)))
	}
	return out
}

// compareVariants runs the same suite on every variant and requires equal
// records.
func compareVariants(t *testing.T, env session.Env, models []config.Model, steps []step, expectOK []string) {
	t.Helper()
	var ref []string
	for _, v := range parityVariants {
		url, _ := serveVariant(t, v, env, models)
		got := runSuite(t, url, steps)
		for _, name := range expectOK {
			for _, rec := range got {
				if strings.HasPrefix(rec, name+" -> ") && !strings.HasPrefix(rec, name+" -> 200") {
					t.Fatalf("%s on %s: %s", name, v.name, rec)
				}
			}
		}
		if ref == nil {
			ref = got
			continue
		}
		for i := range ref {
			if ref[i] != got[i] {
				t.Fatalf("%s differs from %s at step %d:\n%s\n---\n%s", v.name, parityVariants[0].name, i, ref[i], got[i])
			}
		}
	}
}

func TestParityFixtureFamily(t *testing.T) {
	tts := fixtureModel("tts", "parity-tts.bin", -1, 0)
	st := streamingModel("stream", "parity-stream.bin", -1)
	asr := fixtureModel("asr", "parity-asr.bin", -1, 0)
	asr.Task = session.TaskASR
	vad := fixtureModel("vad", "parity-vad.bin", -1, 0)
	vad.Task = session.TaskVAD
	wav, err := os.ReadFile(filepath.Join(repoRoot(), "testdata", "vad", "pauses_16k.wav"))
	if err != nil {
		t.Fatal(err)
	}
	steps := []step{
		{name: "health", method: "GET", path: "/health"},
		{name: "models", method: "GET", path: "/v1/models"},
		jsonStep("speech cold", "/v1/audio/speech", map[string]any{"model": "tts", "input": "hello", "response_format": "json"}),
		jsonStep("speech warm wav", "/v1/audio/speech", map[string]any{"model": "tts", "input": "hello"}),
		jsonStep("speech warm wav 2", "/v1/audio/speech", map[string]any{"model": "tts", "input": "hello"}),
		jsonStep("speech sse", "/v1/audio/speech", speechStream("stream")),
		jsonStep("tasks run", "/v1/tasks/run", map[string]any{"model": "tts", "input": "x"}),
		jsonStep("tasks stream", "/v1/tasks/stream", map[string]any{"model": "stream", "input": "x"}),
		jsonStep("tasks batch", "/v1/tasks/batch", batchBody("tts", 3)),
		multipartStep("transcription", "/v1/audio/transcriptions", map[string]string{"model": "asr"}, wav),
		multipartStep("vad details", "/v1/audio/transcriptions/details", map[string]string{"model": "vad"}, wav),
		jsonStep("busy unknown model", "/v1/audio/speech", map[string]any{"model": "nope", "input": "x"}),
		jsonStep("unload", "/v1/models/unload", map[string]any{"id": "tts"}),
		jsonStep("unload again", "/v1/models/unload", map[string]any{"id": "tts"}),
		jsonStep("speech reload", "/v1/audio/speech", map[string]any{"model": "tts", "input": "hello", "response_format": "json"}),
		jsonStep("unload models", "/v1/tasks/unload_models", map[string]any{"model_ids": []string{"tts", "stream", "asr", "vad", "nope"}}),
		{name: "models after", method: "GET", path: "/v1/models"},
	}
	compareVariants(t, session.Env{}, []config.Model{tts, st, asr, vad}, steps,
		[]string{"speech cold", "speech warm wav", "speech sse", "tasks run", "tasks batch", "transcription", "unload", "speech reload", "unload models"})
	for _, f := range []string{"parity-tts.bin", "parity-stream.bin", "parity-asr.bin", "parity-vad.bin"} {
		c := ctl(t, fixtureModel("x", f, 1, 0))
		if c.Sessions.Load() != 0 || c.PrematureModelDestruction.Load() || c.UseAfterClose.Load() {
			t.Fatalf("%s: lifetime broken", f)
		}
	}
}

func sileroModel(t *testing.T) config.Model {
	p := filepath.Join(repoRoot(), ".deps", "models", silero.DefaultWeightFile)
	if _, err := os.Stat(p); err != nil {
		needDeps(t, "silero weights", err)
	}
	return config.Model{ID: "vad", Path: p, Family: silero.FamilyName, Task: session.TaskVAD, Mode: session.ModeOffline, Lazy: true}
}

func TestParitySileroVAD(t *testing.T) {
	be := cpuBackend(t)
	m := sileroModel(t)
	var steps []step
	steps = append(steps, step{name: "models", method: "GET", path: "/v1/models"})
	for i, f := range []string{"pauses_16k.wav", "noise_16k.wav", "silence_16k.wav", "pauses_16k.wav"} {
		wav, err := os.ReadFile(filepath.Join(repoRoot(), "testdata", "vad", f))
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, multipartStep(fmt.Sprintf("vad %d %s", i, f), "/v1/audio/transcriptions/details", map[string]string{"model": "vad"}, wav))
		if i == 1 {
			steps = append(steps, jsonStep("unload", "/v1/models/unload", map[string]any{"id": "vad"}))
		}
	}
	steps = append(steps, step{name: "models after", method: "GET", path: "/v1/models"})
	compareVariants(t, session.Env{Backend: "cpu", Threads: 1, Compute: be}, []config.Model{m}, steps,
		[]string{"vad 0 pauses_16k.wav", "vad 2 silence_16k.wav", "unload"})
}

func TestParityEspeakTTS(t *testing.T) {
	const data = "/usr/lib/x86_64-linux-gnu/espeak-ng-data"
	if _, err := os.Stat(data); err != nil {
		needDeps(t, "espeak-ng-data", err)
	}
	m := config.Model{ID: "tts", Path: data, Family: "espeak_tts", Task: session.TaskTTS, Mode: session.ModeOffline, Lazy: true}
	steps := []step{
		{name: "models", method: "GET", path: "/v1/models"},
		jsonStep("speech cold", "/v1/audio/speech", map[string]any{"model": "tts", "input": "parity check", "response_format": "json"}),
		jsonStep("speech warm", "/v1/audio/speech", map[string]any{"model": "tts", "input": "parity check"}),
		jsonStep("speech warm 2", "/v1/audio/speech", map[string]any{"model": "tts", "input": "second request"}),
		jsonStep("unload", "/v1/models/unload", map[string]any{"id": "tts"}),
		jsonStep("speech reload", "/v1/audio/speech", map[string]any{"model": "tts", "input": "parity check", "response_format": "json"}),
		{name: "models after", method: "GET", path: "/v1/models"},
	}
	compareVariants(t, session.Env{}, []config.Model{m}, steps, []string{"speech cold", "speech warm", "unload", "speech reload"})
}

// TestRealConcurrencySileroVAD: with silero_vad (which advertises 16
// sessions) N requests on N slots hold N leases at once, their runs overlap
// in time, and each output equals the single-slot output.
func TestRealConcurrencySileroVAD(t *testing.T) {
	be := cpuBackend(t)
	m := sileroModel(t)
	wav, err := os.ReadFile(filepath.Join(repoRoot(), "testdata", "vad", "pauses_16k.wav"))
	if err != nil {
		t.Fatal(err)
	}
	step := multipartStep("vad", "/v1/audio/transcriptions/details", map[string]string{"model": "vad"}, wav)
	one := func(url string) string {
		req, _ := http.NewRequest("POST", url+step.path, bytes.NewReader(step.body))
		req.Header.Set("Content-Type", step.ctype)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("vad: %d %s", resp.StatusCode, b)
		}
		return normalise(t, step, resp.Header.Get("Content-Type"), b)
	}
	env := session.Env{Backend: "cpu", Threads: 1, Compute: be}
	url1, _ := serveVariant(t, variant{"slots=1", true, "1"}, env, []config.Model{m})
	want := one(url1)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("slots=%d", n), func(t *testing.T) {
			url, rtI := serveVariant(t, variant{fmt.Sprint(n), true, fmt.Sprint(n)}, env, []config.Model{m})
			rt := rtI.(*Runtime)
			_ = one(url) // load
			// N leases at once, runs measured for overlap.
			var leases []runtimes.Lease
			for i := 0; i < n; i++ {
				l, err := rt.Acquire(context.Background(), "vad", nil)
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, l)
			}
			if st := status(t, rt, "vad"); st.Slots.Active != n {
				t.Fatalf("active_slots %d, want %d", st.Slots.Active, n)
			}
			for _, l := range leases {
				l.Release()
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var peak int
			outs := make([]string, n)
			stop := make(chan struct{})
			go func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if a := status(t, rt, "vad").Slots.Active; a > 0 {
						mu.Lock()
						peak = max(peak, a)
						mu.Unlock()
					}
					time.Sleep(100 * time.Microsecond)
				}
			}()
			start := time.Now()
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); outs[i] = one(url) }()
			}
			wg.Wait()
			close(stop)
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%d concurrent requests in %v, peak active_slots %d", n, time.Since(start), peak)
			for i, o := range outs {
				if o != want {
					t.Fatalf("output %d on %d slots differs from the single-slot output:\n%s\n---\n%s", i, n, o, want)
				}
			}
			if peak < 2 {
				t.Fatalf("peak active_slots %d: %d concurrent requests on %d slots never ran at the same time", peak, n, n)
			}
		})
	}
}

// waitDrainedOverHTTP polls /v1/models (2 s) until no model reports an
// active slot or a queued request (legacy rows have no counters).
func waitDrainedOverHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		resp, err := client.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Data []map[string]any `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		busy := false
		for _, r := range list.Data {
			if a, ok := r["active_slots"].(float64); ok && a != 0 {
				busy = true
			}
			if q, ok := r["queued_requests"].(float64); ok && q != 0 {
				busy = true
			}
		}
		if !busy || time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
