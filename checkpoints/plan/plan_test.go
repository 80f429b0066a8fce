package plan

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const minimal = `{"version": 1, "name": "p",
 "models": [{"id": "m", "family": "f", "path": "w.bin", "entry": {"lazy": true},
             "request": {"path": "/v1/audio/speech", "json": {"input": "x"}}}],
 "variants": [
   {"name": "upstream", "build": {"source": "worktree"}},
   {"name": "flagged", "build": {"source": "worktree"}, "args": ["--parallel-jobs"], "slots": 1},
   {"name": "nulled", "build": {"source": "worktree"}, "args": ["--parallel-jobs"], "slots": null}
 ]}`

func TestParseDefaultsAndRender(t *testing.T) {
	p, err := Parse([]byte(minimal), "/plans")
	if err != nil {
		t.Fatal(err)
	}
	if p.Reference != "upstream" || p.Backends[0] != BackendAuto || strings.Join(p.StepNames(), ",") != "cold,warm1,warm2,unload,reload" {
		t.Fatalf("defaults: %+v", p)
	}
	if got := strings.Join(p.TableSteps(), ","); got != "cold,warm1,warm2,unload-before,unload,unload-after,reload,models" {
		t.Fatalf("table steps %s", got)
	}
	if p.Variants[0].RuntimeName() != RuntimeLegacy || p.Variants[1].RuntimeName() != RuntimeParallel {
		t.Fatal("runtime not derived from --parallel-jobs")
	}
	render := func(i int) map[string]any {
		data, err := p.RenderConfig(&p.Variants[i])
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	omitted := render(0)
	m := omitted["models"].([]any)[0].(map[string]any)
	if _, has := m["slots"]; has {
		t.Errorf("slots written for a variant that omits it: %v", m)
	}
	if m["path"] != "/plans/w.bin" || m["lazy"] != true || omitted["ui_management"] != true {
		t.Errorf("config %v", omitted)
	}
	if s := render(1)["models"].([]any)[0].(map[string]any)["slots"]; s != float64(1) {
		t.Errorf("slots = %v", s)
	}
	// An explicit null is written as null (it must reach the server as given).
	data, _ := p.RenderConfig(&p.Variants[2])
	if !strings.Contains(string(data), `"slots": null`) {
		t.Errorf("null slots not rendered: %s", data)
	}
	if p.Variants[2].SlotsText() != "null" || p.Variants[0].SlotsText() != "omitted" {
		t.Error("slots text")
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	bad := `{"version": 2, "backends": ["tpu"],
	  "models": [{"id": "m", "family": "f", "path": "p", "entry": {"slots": 2}, "request": {"path": "v1"}},
	             {"id": "m", "family": "f", "path": "p", "request": {"path": "/x", "json": {}, "files": {"file": "a.wav"}}}],
	  "variants": [{"name": "a b", "build": {"source": "docker"}}, {"name": "c", "build": {"source": "binary"}}],
	  "steps": ["warm", "reload", "bake"]}`
	_, err := Parse([]byte(bad), "/")
	if !errors.Is(err, ErrBadPlan) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{
		"version must be 1, got 2", "name is required", `unknown backend "tpu"`, `"slots" is set by the plan`,
		"request.path must be an absolute URL path", `duplicate model id "m"`, "give json or multipart fields/files, not both",
		"must not contain spaces", `build.source must be worktree, ref or binary, got "docker"`, "source binary needs build.path",
		`reference variant "upstream" is not among the variants`, "reload must come after unload", `unknown step "bake"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	if _, err := Parse([]byte(`{"version": 1, "nme": "typo"}`), "/"); err == nil || !strings.Contains(err.Error(), `unknown field "nme"`) {
		t.Errorf("unknown field accepted: %v", err)
	}
}

func TestModelsFrom(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"models": [
	  {"id": "tts", "family": "espeak_tts", "task": "tts", "path": "/usr/share/voices", "lazy": true},
	  {"id": "vad", "family": "silero_vad", "task": "vad", "path": "models/vad.gguf", "slots": 4, "session_options": {"threshold": 0.5}},
	  {"id": "fx", "family": "fixture", "path": "x.bin"}]}`
	if err := os.WriteFile(filepath.Join(dir, "server.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := func(requests string) string {
		return `{"version": 1, "name": "mf",
		  "models_from": {"config": "server.json", "base_dir": "deps", "exclude_families": ["fixture"], "requests": ` + requests + `},
		  "variants": [{"name": "upstream", "build": {"source": "worktree"}}]}`
	}
	p, err := Parse([]byte(plan(`{"espeak_tts": {"path": "/v1/audio/speech", "json": {"input": "a"}},
	  "silero_vad": {"path": "/v1/audio/transcriptions/details", "files": {"file": "in.wav"}}}`)), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Models) != 2 || p.Models[0].ID != "tts" || p.Models[1].ID != "vad" {
		t.Fatalf("models %+v", p.Models)
	}
	vad := p.Models[1]
	if vad.Path != filepath.Join(dir, "deps/models/vad.gguf") || vad.Request.Method != "POST" {
		t.Errorf("vad %+v", vad)
	}
	if _, has := vad.Entry["slots"]; has {
		t.Error("slots from the server config leaked into the plan's entry: the variant decides slots")
	}
	if string(vad.Entry["session_options"]) != `{"threshold": 0.5}` {
		t.Errorf("entry %s", vad.Entry["session_options"])
	}
	if len(vad.Requires) != 1 || len(p.Models[0].Requires) != 1 {
		t.Errorf("missing weights must be required: %v %v", vad.Requires, p.Models[0].Requires)
	}
	// A real family without a request cannot be left out silently.
	_, err = Parse([]byte(plan(`{"espeak_tts": {"path": "/v1/audio/speech"}}`)), dir)
	if err == nil || !strings.Contains(err.Error(), `family "silero_vad", which has no request`) {
		t.Errorf("err %v", err)
	}
}

func TestBuiltinDefaultPlan(t *testing.T) {
	root, _ := filepath.Abs("../..")
	p, err := Load("default", root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range p.Variants {
		names = append(names, v.Name+":"+v.Build.Source+":"+v.RuntimeName()+":"+v.SlotsText())
	}
	want := "upstream:ref:legacy:omitted unflagged:worktree:legacy:omitted flagged-omitted:worktree:parallel:omitted flagged-slots1:worktree:parallel:1"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("variants %s", got)
	}
	if p.Base != "origin/main" || p.Source != "builtin:default" {
		t.Errorf("base %s source %s", p.Base, p.Source)
	}
	families := map[string]bool{}
	for _, m := range p.Models {
		families[m.Family] = true
		if m.Family == "fixture" {
			t.Error("the test family is in the default plan")
		}
	}
	if !families["espeak_tts"] || !families["silero_vad"] {
		t.Errorf("families %v", families)
	}
}
