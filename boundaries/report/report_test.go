package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gavv/httpexpect/v2"

	"github.com/audioproof/audioproof/boundaries/check"
	"github.com/audioproof/audioproof/boundaries/policy"
)

func sample(t *testing.T, broken bool) Input {
	t.Helper()
	pol, err := policy.Preset("audiocpp")
	if err != nil {
		t.Fatal(err)
	}
	r := &check.Result{
		BaseRef: "origin/main", BaseCommit: strings.Repeat("ab", 20), RefCommit: strings.Repeat("ab", 20),
		Repo:  check.Repository{Root: "/src/audio.cpp", Head: strings.Repeat("cd", 20), Branch: "parallel"},
		Files: 42, Elapsed: 12 * time.Millisecond,
	}
	for i, e := range pol.Protected {
		er := check.EntryResult{Spec: e.Spec, Kind: string(e.Kind), Resolved: "folder", Verdict: "unchanged", Files: 3}
		if i == 8 && broken {
			er.Verdict, er.Violations = "changed", 2
		}
		r.Entries = append(r.Entries, er)
	}
	r.Edits = []check.EditResult{{Path: "app/server/runtime.cpp", Verdict: "inserted",
		Blocks: []check.BlockResult{{Name: "explicit-slots rejection", Source: "inline", InBase: 0, InTree: 1, Status: "inserted"}}}}
	if broken {
		r.Violations = []check.Violation{
			{Path: "src/models/a.cpp", Kind: check.KindModified, Where: []string{check.InWorktree}, ProtectedBy: []string{"src/models"},
				Detail: "content differs", Diff: "--- base/src/models/a.cpp\n+++ worktree/src/models/a.cpp\n@@ -1 +1 @@\n-a ]]> <b> & \x1b[31m\n+b\n"},
			{Path: "src/models/b.cpp", Kind: check.KindRenamed, RenamedTo: "src/models/c.cpp", Where: []string{check.InIndex, check.InWorktree},
				ProtectedBy: []string{"src/models"}, Detail: "renamed"},
		}
		r.Repo.Unstaged, r.Repo.Staged = 2, 1
	}
	return Input{Result: r, Policy: pol, Now: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
}

// TestJSONMatchesSchema renders passing and failing reports and validates
// them against the published JSON Schema.
func TestJSONMatchesSchema(t *testing.T) {
	var schema any
	if err := json.Unmarshal(JSONSchema, &schema); err != nil {
		t.Fatalf("schema.json is not JSON: %v", err)
	}
	for _, broken := range []bool{false, true} {
		var buf bytes.Buffer
		if err := JSON(&buf, sample(t, broken)); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		httpexpect.NewValue(t, doc).Schema(string(JSONSchema))
		want := map[bool]string{false: "pass", true: "fail"}[broken]
		if doc["verdict"] != want {
			t.Errorf("verdict %v, want %s", doc["verdict"], want)
		}
	}
	// The schema rejects what it should: a wrong verdict, an unknown kind.
	var buf bytes.Buffer
	JSON(&buf, sample(t, true))
	bad := strings.Replace(buf.String(), `"kind": "modified"`, `"kind": "edited"`, 1)
	var doc any
	json.Unmarshal([]byte(bad), &doc)
	rep := &recorder{}
	httpexpect.NewValue(rep, doc).Schema(string(JSONSchema))
	if !rep.failed {
		t.Error("schema accepted an unknown violation kind")
	}
}

type recorder struct{ failed bool }

func (r *recorder) Errorf(string, ...any) { r.failed = true }

// TestJUnit checks the JUnit report's structure, counts and escaping, and
// validates it against junit.xsd with xmllint when it is installed.
func TestJUnit(t *testing.T) {
	for _, broken := range []bool{false, true} {
		var buf bytes.Buffer
		if err := JUnit(&buf, sample(t, broken)); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Suite    struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
				Cases    []struct {
					Name    string `xml:"name,attr"`
					Failure *struct {
						Type string `xml:"type,attr"`
						Body string `xml:",chardata"`
					} `xml:"failure"`
				} `xml:"testcase"`
				Out string `xml:"system-out"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("not XML: %v\n%s", err, buf.String())
		}
		if doc.Suite.Tests != 14 || len(doc.Suite.Cases) != 14 {
			t.Errorf("tests=%d cases=%d, want 13 protected entries + 1 allowed edit", doc.Suite.Tests, len(doc.Suite.Cases))
		}
		failures := 0
		for _, c := range doc.Suite.Cases {
			if c.Failure != nil {
				failures++
				if c.Name != "src/models" || c.Failure.Type != "modified,renamed" || !strings.Contains(c.Failure.Body, "-a ]]> <b> & \uFFFD[31m") {
					t.Errorf("failure %s %+v", c.Name, c.Failure)
				}
			}
		}
		if failures != doc.Suite.Failures || (failures == 1) != broken {
			t.Errorf("failures: %d counted %d", failures, doc.Suite.Failures)
		}
		if !strings.Contains(doc.Suite.Out, "PASS:") && !strings.Contains(doc.Suite.Out, "FAIL:") {
			t.Errorf("system-out lacks the text report: %q", doc.Suite.Out)
		}
		if _, err := exec.LookPath("xmllint"); err != nil {
			continue
		}
		dir := t.TempDir()
		xsd, rep := filepath.Join(dir, "junit.xsd"), filepath.Join(dir, "report.xml")
		os.WriteFile(xsd, JUnitXSD, 0o644)
		os.WriteFile(rep, buf.Bytes(), 0o644)
		if out, err := exec.Command("xmllint", "--noout", "--schema", xsd, rep).CombinedOutput(); err != nil {
			t.Errorf("xmllint: %v\n%s", err, out)
		}
	}
}

func TestText(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, sample(t, true)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"boundaries " + Version + ": base origin/main = abababababab, policy preset:audiocpp\n",
		"  CHANGED   src/models (folder, 3 files): 2 violation(s)\n",
		"  inserted  app/server/runtime.cpp (allowed edit: explicit-slots rejection inserted)\n",
		"  modified     src/models/a.cpp [worktree] content differs\n      --- base/src/models/a.cpp\n",
		"  renamed      src/models/b.cpp [index,worktree] renamed\n",
		"FAIL: boundary broken: 2 violation(s) among 42 files",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	if err := Write(&buf, "yaml", sample(t, false)); err == nil {
		t.Error("unknown format accepted")
	}
}
