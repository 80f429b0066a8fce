package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gavv/httpexpect/v2"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/families/fixture"
)

// startGuarded serves cfgJSON (relative paths under a fresh folder in which
// files of the given sizes exist) with the memory guard reading *free.
func startGuarded(t *testing.T, v variant, cfgJSON string, files map[string]int64, free *atomic.Uint64) *httpexpect.Expect {
	t.Helper()
	dir := t.TempDir()
	for name, size := range files {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := startServerIn(t, v, cfgJSON, dir, func(o *runtimes.Options) {
		o.FreeMemory = func() (uint64, error) { return free.Load(), nil }
	})
	return e
}

// TestMemoryGuardEnvelope: a load the memory guard refuses is a 503 with
// the insufficient_memory envelope on inference and on /v1/models/load, in
// both runtimes; the model stays unloaded and serves once memory is free.
// A legacy stream, which loads inside the stream, reports it as an SSE error.
func TestMemoryGuardEnvelope(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		slots := ""
		if v.slots != "" {
			slots = `, "slots": ` + v.slots
		}
		cfg := `{"busy_timeout_ms": 0, "ui_management": true, "lazy_load": true, "min_free_memory_mb": 1, "models": [
			{"id": "big", "family": "fixture", "task": "tts", "path": "big.bin", "load_options": {"require_file": true}` + slots + `},
			{"id": "big-stream", "family": "fixture", "task": "tts", "mode": "streaming", "path": "stream.bin"` + slots + `}]}`
		var free atomic.Uint64
		free.Store(100 << 20) // 2 MiB of weights need 1.5 × 2 + 128 + 1 = 132 MiB
		e := startGuarded(t, v, cfg, map[string]int64{"big.bin": 2 << 20, "stream.bin": 2 << 20, "new.bin": 2 << 20}, &free)

		expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "big", "input": "x"}).Expect(),
			503, "insufficient_memory", `cannot load model "big"`)
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "big", "input": "x"}).Expect(),
			503, "insufficient_memory", "min_free_memory_mb=1")
		newModel := map[string]any{"id": "new", "family": "fixture", "path": "new.bin"}
		expectError(e.POST("/v1/models/load").WithJSON(newModel).Expect(), 503, "insufficient_memory", `cannot load model "new"`)

		stream := map[string]any{"model": "big-stream", "input": "x", "stream": true, "response_format": "pcm"}
		if v.parallel {
			expectError(e.POST("/v1/audio/speech").WithJSON(stream).Expect(), 503, "insufficient_memory", `cannot load model "big-stream"`)
		} else {
			body := e.POST("/v1/audio/speech").WithJSON(stream).Expect().Status(200).Body().Raw()
			if !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, `cannot load model \"big-stream\"`) || strings.Contains(body, "[DONE]") {
				t.Fatalf("legacy stream refusal is not one SSE error event:\n%s", body)
			}
		}
		for _, m := range e.GET("/v1/models").Expect().Status(200).JSON().Object().Value("data").Array().Iter() {
			m.Object().Value("loaded").IsEqual(false)
		}
		if n := fixture.Control("big.bin").Loads.Load(); n != 0 {
			t.Errorf("the family was asked to load a refused model %d times", n)
		}

		free.Store(132 << 20)
		e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "big", "input": "x"}).Expect().Status(200).
			JSON().Object().Value("text").IsEqual("big.bin")
		e.POST("/v1/models/load").WithJSON(newModel).Expect().Status(200).JSON().Object().Value("loaded").IsEqual(true)
	})
}
