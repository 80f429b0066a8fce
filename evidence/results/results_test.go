package results

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

func sample() *Results {
	r := &Results{SchemaVersion: SchemaVersion, Kind: "checkpoints", Reference: "up", Plan: PlanRef{Name: "t"},
		Steps:    []string{"cold", "unload", "models"},
		Backends: []Backend{{Name: "cpu", Detection: "always run"}},
		Variants: []Variant{{Name: "up"}, {Name: "cand"}},
	}
	ex := func(id, v, step, kind string, status int, errText string) {
		r.Exchanges = append(r.Exchanges, Exchange{ID: id, Backend: "cpu", Variant: v, Model: "m", Step: step, Kind: kind, Status: status, Error: errText})
	}
	ex("u1", "up", "cold", KindInference, 200, "")
	ex("u2", "up", "unload", KindUnload, 200, "")
	ex("c1", "cand", "cold", KindInference, 200, "")
	ex("c2", "cand", "unload", KindUnload, 200, "")
	ex("c3", "cand", "models", KindModels, 0, "connection refused")
	r.Checks = []Check{
		{Backend: "cpu", Variant: "cand", Model: "m", Step: "cold", Kind: CheckMatch, Required: true, Passed: false, Exchange: "c1", Against: "u1",
			Message: "differs", Path: "$.text", Want: `"a"`, Got: `"b"`},
		{Backend: "cpu", Variant: "cand", Model: "m", Step: "unload", Kind: CheckMatch, Required: true, Passed: true, Exchange: "c2", Against: "u2"},
		{Backend: "cpu", Variant: "cand", Kind: CheckWarning, Required: false, Passed: false, Message: "optional thing"},
	}
	r.CrossBackend = []CrossCheck{{Model: "m", Step: "cold", Within: false, Required: false, Path: "$.x"}}
	r.Finish()
	return r
}

func TestTotalsAndVerdict(t *testing.T) {
	r := sample()
	want := Totals{Requests: 2, Matched: 1, Compared: 2, ComparedEqual: 1, Checks: 3, Failed: 2, RequiredFailed: 1, Cross: 1}
	if r.Totals != want || r.Passed {
		t.Fatalf("totals %+v passed %v", r.Totals, r.Passed)
	}
	if h := r.Headline(); !strings.HasPrefix(h, "FAIL: 1/2 requests matched, 1/2 compared responses equal, 1/3 checks passed (1 required failed), cross-backend 0/1") {
		t.Fatalf("headline %q", h)
	}
	// Only optional failures (and an optional cross-backend miss) pass the run.
	r.Checks[0].Passed = true
	r.Finish()
	if !r.Passed {
		t.Fatal("optional failures failed the run")
	}
	r.CrossBackend[0].Required = true
	r.Finish()
	if r.Passed {
		t.Fatal("a required cross-backend miss passed")
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	r.Checks[0].Exchange = "ghost"
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), `unknown exchange "ghost"`) {
		t.Fatalf("validate: %v", err)
	}
}

func TestSummaryCellsAndJUnit(t *testing.T) {
	r := sample()
	for _, c := range []struct{ v, step, want string }{
		{"up", "cold", CellReference}, {"cand", "cold", CellDiff}, {"cand", "unload", CellMatch},
		{"cand", "models", CellError}, {"up", "models", CellMissing},
	} {
		if got := r.Cell("cpu", c.v, "m", c.step); got != c.want {
			t.Errorf("cell %s/%s = %s, want %s", c.v, c.step, got, c.want)
		}
	}
	var md bytes.Buffer
	if err := WriteSummary(&md, r, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Checkpoint parity: t", "### cpu / m", "| cand ", "DIFF", "## Failures (2)", "$.text"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, md.String())
		}
	}
	var j bytes.Buffer
	if err := WriteJUnit(&j, r); err != nil {
		t.Fatal(err)
	}
	var suites junitSuites
	if err := xml.Unmarshal(j.Bytes(), &suites); err != nil {
		t.Fatal(err)
	}
	if suites.Tests != 4 || suites.Failures != 1 {
		t.Fatalf("junit tests=%d failures=%d\n%s", suites.Tests, suites.Failures, j.String())
	}
	if !strings.Contains(j.String(), "first difference at $.text") || !strings.Contains(j.String(), `<skipped message="optional check failed: optional thing">`) {
		t.Errorf("junit:\n%s", j.String())
	}
}
