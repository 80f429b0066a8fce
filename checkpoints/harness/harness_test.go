package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/audioproof/audioproof/checkpoints/plan"
	"github.com/audioproof/audioproof/evidence/archive"
	"github.com/audioproof/audioproof/evidence/results"
)

// builtBinary is a main package of this module built once per test binary.
type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// get builds pkg (relative to the module root) as name on first use, with
// env added to the environment, and returns the binary's path.
func (b *builtBinary) get(t *testing.T, pkg, name string, env ...string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.path, pkg)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var fakeBinary builtBinary

// repoRoot is the module root (two levels above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fakeServer builds testdata/checkpoints/fakeserver once per test binary.
func fakeServer(t *testing.T) string {
	t.Helper()
	return fakeBinary.get(t, "./testdata/checkpoints/fakeserver", "fakeserver")
}

type variantSpec struct {
	name  string
	args  []string
	env   map[string]string
	slots string
}

func standardVariants() []variantSpec {
	return []variantSpec{
		{name: "upstream"},
		{name: "unflagged"},
		{name: "flagged-omitted", args: []string{"--parallel-jobs"}},
		{name: "flagged-slots1", args: []string{"--parallel-jobs"}, slots: "1"},
	}
}

// fakePlan writes a plan whose variants all run the fake server, with two
// models (a TTS one over JSON and a VAD one over multipart).
func fakePlan(t *testing.T, bin string, variants []variantSpec, mutate func(p map[string]any)) *plan.Plan {
	t.Helper()
	dir := t.TempDir()
	wav := filepath.Join(repoRoot(t), "testdata/checkpoints/inputs/speech-16k.wav")
	var vs []map[string]any
	for _, v := range variants {
		m := map[string]any{"name": v.name, "build": map[string]any{"source": "binary", "path": bin}}
		if v.args != nil {
			m["args"] = v.args
		}
		if v.env != nil {
			m["env"] = v.env
		}
		if v.slots != "" {
			m["slots"] = json.RawMessage(v.slots)
		}
		vs = append(vs, m)
	}
	p := map[string]any{
		"version": 1, "name": "fake", "reference": "upstream", "backends": []string{"cpu"},
		"server":    map[string]any{"ready_timeout_ms": 5000, "request_timeout_ms": 5000, "shutdown_timeout_ms": 3000, "drain_timeout_ms": 200},
		"tolerance": map[string]any{"abs": 0.001},
		"models": []map[string]any{
			{"id": "tts", "family": "fake_tts", "task": "tts", "path": filepath.Join(dir, "voice-a.bin"),
				"entry":   map[string]any{"lazy": true},
				"request": map[string]any{"path": "/v1/audio/speech", "json": map[string]any{"input": "hello"}}},
			{"id": "vad", "family": "fake_vad", "task": "vad", "path": filepath.Join(dir, "vad.bin"),
				"request": map[string]any{"path": "/v1/audio/transcriptions/details", "files": map[string]string{"file": wav}}},
		},
		"variants": vs,
	}
	if mutate != nil {
		mutate(p)
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Load(path, dir)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func runPlan(t *testing.T, p *plan.Plan) *Outcome {
	t.Helper()
	// The fake server loads no ggml: do not hash the real libraries.
	out, err := Run(context.Background(), Options{Plan: p, RepoDir: repoRoot(t), OutDir: t.TempDir(), LibraryDirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func failed(r *results.Results) []results.Check {
	var out []results.Check
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, c)
		}
	}
	return out
}

func find(r *results.Results, kind, variant string) []results.Check {
	var out []results.Check
	for _, c := range r.Checks {
		if c.Kind == kind && c.Variant == variant {
			out = append(out, c)
		}
	}
	return out
}

func TestAllVariantsMatch(t *testing.T) {
	t.Parallel()
	bin := fakeServer(t)
	out := runPlan(t, fakePlan(t, bin, standardVariants(), nil))
	r := out.Results
	if f := failed(r); len(f) > 0 {
		t.Fatalf("failed checks: %+v", f)
	}
	// 4 variants x 2 models x (cold, warm1, warm2, reload).
	if r.Totals.Requests != 32 || r.Totals.Matched != 32 || !r.Passed {
		t.Fatalf("totals %+v passed=%v", r.Totals, r.Passed)
	}
	// Every startup is recorded with its warning state and a clean exit.
	if len(r.Startups) != 4 {
		t.Fatalf("startups: %d", len(r.Startups))
	}
	for _, s := range r.Startups {
		wantWarn := strings.HasPrefix(s.Variant, "flagged")
		if !s.Ready || s.PID == 0 || s.WarningPrinted != wantWarn || s.ExitStatus == nil || *s.ExitStatus != 0 {
			t.Errorf("startup %+v", s)
		}
	}
	rep, err := archive.Verify(out.Archive)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	if !strings.HasPrefix(filepath.Base(out.Archive), "evidence-") {
		t.Fatalf("archive name %s", out.Archive)
	}
}

func TestPlantedDifferenceIsLocated(t *testing.T) {
	t.Parallel()
	bin := fakeServer(t)
	vs := standardVariants()
	vs[2].env = map[string]string{"FAKE_SUFFIX": "-planted"}
	out := runPlan(t, fakePlan(t, bin, vs, nil))
	r := out.Results
	if r.Passed {
		t.Fatal("a planted difference passed")
	}
	paths := map[string]string{}
	for _, c := range failed(r) {
		if c.Variant != "flagged-omitted" || c.Kind != results.CheckMatch {
			t.Errorf("unexpected failure %s: %s", c.Name(), c.Message)
			continue
		}
		paths[c.Model+"/"+c.Step] = c.Path + " want=" + c.Want + " got=" + c.Got
	}
	if p := paths["tts/cold"]; !strings.HasPrefix(p, "body[44] (WAV sample 0)") {
		t.Errorf("tts/cold located at %q", p)
	}
	if p := paths["vad/reload"]; p != `$.text want="vad.bin" got="vad.bin-planted"` {
		t.Errorf("vad/reload located at %q", p)
	}
	if r.Totals.Requests != 32 || r.Totals.Matched != 24 {
		t.Errorf("totals %+v", r.Totals)
	}
	// The verdicts survive a recheck from the raw responses.
	rep, err := archive.Verify(out.Archive)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}

func TestPlantedDifferenceThroughModelEntry(t *testing.T) {
	t.Parallel()
	bin := fakeServer(t)
	out := runPlan(t, fakePlan(t, bin, []variantSpec{{name: "upstream"}, {name: "other-path"}}, func(p map[string]any) {
		vs := p["variants"].([]map[string]any)
		vs[1]["model_entry"] = map[string]any{"path": "/elsewhere/voice-b.bin"}
	}))
	var got []string
	for _, c := range failed(out.Results) {
		got = append(got, c.Model+"/"+c.Step+" "+c.Path)
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{"tts/cold body[44]", "vad/cold $.text", "vad/models $.data[0].path"} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing failure %q in:\n%s", want, joined)
		}
	}
}

func TestFailuresAreReportedAsWhatTheyAre(t *testing.T) {
	t.Parallel()
	bin := fakeServer(t)
	vs := []variantSpec{
		{name: "upstream"},
		{name: "no-warning", args: []string{"--parallel-jobs"}, env: map[string]string{"FAKE_NO_WARNING": "1"}},
		{name: "stray-warning", env: map[string]string{"FAKE_WARN_ALWAYS": "1"}},
		{name: "leak", args: []string{"--parallel-jobs"}, env: map[string]string{"FAKE_LEAK": "1"}},
		{name: "legacy-schema", env: map[string]string{"FAKE_WRONG_SCHEMA": "1"}},
		{name: "parallel-schema", args: []string{"--parallel-jobs"}, env: map[string]string{"FAKE_WRONG_SCHEMA": "1"}},
		{name: "no-start", env: map[string]string{"FAKE_FAIL_START": "cannot open weights"}},
		{name: "never-ready", env: map[string]string{"FAKE_NEVER_READY": "1"}},
		{name: "bad-exit", env: map[string]string{"FAKE_EXIT_STATUS": "3"}},
		{name: "hangs", env: map[string]string{"FAKE_IGNORE_TERM": "1"}},
		{name: "wrong-backend", env: map[string]string{"FAKE_HEALTH_BACKEND": "cuda"}},
	}
	p := fakePlan(t, bin, vs, nil)
	p.Server.ReadyTimeoutMs = 700
	p.Server.ShutdownTimeout = 300
	r := runPlan(t, p).Results
	if r.Passed {
		t.Fatal("run passed")
	}
	expect := func(variant, kind, contains string) {
		t.Helper()
		cs := find(r, kind, variant)
		for _, c := range cs {
			if !c.Passed && strings.Contains(c.Message, contains) {
				return
			}
		}
		t.Errorf("%s: no failed %s check containing %q; got %+v", variant, kind, contains, cs)
	}
	expect("no-warning", results.CheckWarning, "missing")
	expect("stray-warning", results.CheckWarning, "printed by an unflagged start")
	expect("leak", results.CheckCounters, "active_slots=1")
	expect("legacy-schema", results.CheckSchema, "legacy emits no slot fields")
	expect("parallel-schema", results.CheckSchema, "has no \"slots\"")
	expect("no-start", results.CheckStartup, "exited before it was ready (exit status 1); stderr: audiocpp_server failed: cannot open weights")
	expect("never-ready", results.CheckStartup, "not ready within 700ms")
	expect("bad-exit", results.CheckShutdown, "exited with status 3")
	expect("hangs", results.CheckShutdown, "did not exit within 300 ms")
	expect("wrong-backend", results.CheckBackend, `started for backend cpu but /health reports backend "cuda"`)
	// Each variant fails only in its own way (plus the missing comparisons
	// of servers that never ran).
	allowed := map[string][]string{
		"upstream": {}, "no-warning": {results.CheckWarning}, "stray-warning": {results.CheckWarning},
		"leak": {results.CheckCounters}, "legacy-schema": {results.CheckSchema, results.CheckMatch},
		"parallel-schema": {results.CheckSchema, results.CheckMatch, results.CheckLoaded},
		"no-start":        {results.CheckStartup}, "never-ready": {results.CheckStartup},
		"bad-exit": {results.CheckShutdown}, "hangs": {results.CheckShutdown},
		"wrong-backend": {results.CheckBackend},
	}
	for _, c := range failed(r) {
		ok := false
		for _, k := range allowed[c.Variant] {
			ok = ok || k == c.Kind
		}
		if !ok {
			t.Errorf("unexpected failure %s: %s", c.Name(), c.Message)
		}
	}
	// A legacy schema difference is not hidden by the model-list comparison
	// (slot fields are dropped there), only by the schema check.
	for _, c := range find(r, results.CheckMatch, "leak") {
		if !c.Passed {
			t.Errorf("leak variant's responses should match: %s", c.Message)
		}
	}
}

func TestBackendsAndCrossBackend(t *testing.T) {
	t.Parallel()
	bin := fakeServer(t)
	p := fakePlan(t, bin, standardVariants()[:2], func(p map[string]any) {
		p["backends"] = []string{"auto"}
		p["backend_env"] = map[string]any{"vulkan": map[string]string{"FAKE_DEVICES": "Vulkan0  llvmpipe (LLVM 15)"}}
	})
	r := runPlan(t, p).Results
	if len(r.Backends) != 2 || r.Backends[1].Name != "vulkan" || !strings.Contains(r.Backends[1].Detection, "llvmpipe") {
		t.Fatalf("backends %+v notes %v", r.Backends, r.Notes)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "backend cuda skipped") {
		t.Errorf("notes: %v", r.Notes)
	}
	if r.Totals.Cross != 8 || r.Totals.CrossWithin != 8 || !r.Passed {
		t.Errorf("totals %+v failures %+v", r.Totals, failed(r))
	}
	// An explicitly requested backend that is missing is a failure.
	p2 := fakePlan(t, bin, standardVariants()[:1], func(p map[string]any) { p["backends"] = []string{"cpu", "cuda"} })
	r2 := runPlan(t, p2).Results
	cs := find(r2, results.CheckBackend, "")
	if r2.Passed || len(cs) != 1 || !strings.Contains(cs[0].Message, "backend cuda was requested but is not available") {
		t.Errorf("checks %+v", cs)
	}
}

func TestExternalCommandLineWithPlaceholders(t *testing.T) {
	t.Parallel()
	bin := fakeServer(t)
	p := fakePlan(t, bin, []variantSpec{{name: "upstream"}, {name: "external"}}, func(p map[string]any) {
		v := p["variants"].([]map[string]any)[1]
		v["standard_flags"] = false
		v["args"] = []string{"--port", "{port}", "--config", "{config}", "--host", "{host}", "--backend", "{backend}"}
	})
	r := runPlan(t, p).Results
	if f := failed(r); len(f) > 0 || !r.Passed {
		t.Fatalf("failed: %+v", f)
	}
	for _, s := range r.Startups {
		if s.Variant != "external" {
			continue
		}
		argv := strings.Join(s.Argv, " ")
		if strings.Contains(argv, "{") || !strings.Contains(argv, "--port ") || !strings.HasSuffix(argv, "--backend cpu") || strings.Trim(s.Argv[2], "0123456789") != "" {
			t.Errorf("argv %q", argv)
		}
	}
}
