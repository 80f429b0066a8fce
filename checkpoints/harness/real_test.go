package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/audioproof/audioproof/evidence/archive"
	"github.com/audioproof/audioproof/evidence/results"
)

var serverBinary builtBinary

// realServer builds the project's server (./server) once per test binary.
// It skips when the ggml libraries are absent (the server opens them at
// startup even for the fixture family).
func realServer(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "server", "main.go")); err != nil {
		t.Skip("server/main.go is not there yet")
	}
	if os.Getenv("AUDIOPROOF_GGML_DIR") == "" {
		if _, err := os.Stat(filepath.Join(root, ".deps", "ggml")); err != nil {
			t.Skip("ggml libraries absent: run make deps")
		}
	}
	// Built like make build, so the build cache is shared with it.
	return serverBinary.get(t, "./server", "audioproof-server", "CGO_ENABLED=0")
}

// fixturePlan drives the real server with the fixture family: a TTS model
// over /v1/tasks/run and an ASR model over multipart transcriptions.
func fixturePlan(t *testing.T, bin string, variants []variantSpec, mutate func(map[string]any)) *Outcome {
	t.Helper()
	dir := t.TempDir()
	p := fakePlan(t, bin, variants, func(p map[string]any) {
		wav := filepath.Join(repoRoot(t), "testdata/checkpoints/inputs/speech-16k.wav")
		p["server"] = map[string]any{"ready_timeout_ms": 20000, "request_timeout_ms": 20000, "shutdown_timeout_ms": 10000,
			"config": map[string]any{"busy_timeout_ms": 0}}
		p["models"] = []map[string]any{
			{"id": "speaker", "family": "fixture", "task": "tts", "path": filepath.Join(dir, "speaker-a.bin"),
				"entry":   map[string]any{"lazy": true},
				"request": map[string]any{"path": "/v1/tasks/run", "json": map[string]any{"input": "hello"}}},
			{"id": "listener", "family": "fixture", "task": "asr", "path": filepath.Join(dir, "listener.bin"),
				"entry":   map[string]any{"lazy": true, "session_options": map[string]any{"fixture_capacity": 1}},
				"request": map[string]any{"path": "/v1/audio/transcriptions/details", "files": map[string]string{"file": wav}}},
		}
		if mutate != nil {
			mutate(p)
		}
	})
	out, err := Run(t.Context(), Options{Plan: p, RepoDir: repoRoot(t), OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRealServerVariantsMatch(t *testing.T) {
	t.Parallel()
	bin := realServer(t)
	out := fixturePlan(t, bin, standardVariants(), nil)
	r := out.Results
	if f := failed(r); len(f) > 0 {
		for _, c := range f {
			t.Errorf("%s: %s", c.Name(), c.Message)
		}
		t.FailNow()
	}
	if r.Totals.Requests != 32 || r.Totals.Matched != 32 {
		t.Fatalf("totals %+v", r.Totals)
	}
	for _, s := range r.Startups {
		if s.WarningPrinted != strings.HasPrefix(s.Variant, "flagged") {
			t.Errorf("%s: warning printed=%v", s.Variant, s.WarningPrinted)
		}
	}
	// The flagged variants really ran the parallel runtime: their model
	// lists carry the slot fields, and the legacy ones do not.
	for _, c := range r.Checks {
		if c.Kind == results.CheckSchema && strings.HasPrefix(c.Variant, "flagged") && !strings.Contains(c.Message, "parallel schema") {
			t.Errorf("%s: %s", c.Name(), c.Message)
		}
	}
	if rep, err := archive.Verify(out.Archive); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}

func TestRealServerPlantedDifference(t *testing.T) {
	t.Parallel()
	bin := realServer(t)
	out := fixturePlan(t, bin, []variantSpec{{name: "upstream"}, {name: "flagged", args: []string{"--parallel-jobs"}}}, func(p map[string]any) {
		// The fixture's output text is its file name: another path is an
		// option that changes the output.
		p["variants"].([]map[string]any)[1]["model_entry"] = map[string]any{"path": "/tmp/elsewhere/speaker-b.bin"}
	})
	r := out.Results
	var located []string
	for _, c := range failed(r) {
		if c.Kind != results.CheckMatch || c.Variant != "flagged" {
			t.Errorf("unexpected failure %s: %s", c.Name(), c.Message)
		}
		located = append(located, c.Model+"/"+c.Step+" "+c.Path+" "+c.Want+" "+c.Got)
	}
	joined := strings.Join(located, "\n")
	for _, want := range []string{
		`speaker/cold $.text "speaker-a.bin" "speaker-b.bin"`,
		`listener/reload $.text "listener.bin" "speaker-b.bin"`,
		`speaker/models $.data[0].path`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in:\n%s", want, joined)
		}
	}
}
