// Package report renders a boundary check's result: text for people, JSON for
// the evidence manifest and JUnit XML for CI.
package report

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/audioproof/audioproof/boundaries/check"
	"github.com/audioproof/audioproof/boundaries/policy"
)

// Version is the boundary tool's version, recorded in every report.
const Version = "1.0.0"

// Schema names the JSON report's format.
const Schema = "audioproof.boundaries/v1"

// JSONSchema is the JSON Schema (draft-07) of the JSON report.
//
//go:embed schema.json
var JSONSchema []byte

// JUnitXSD is an XML Schema of the JUnit report: the strict Ant-style layout
// (every suite attribute, properties, system-out and system-err present).
//
//go:embed junit.xsd
var JUnitXSD []byte

// Formats lists the formats Write accepts.
var Formats = []string{"text", "json", "junit"}

// Input is what a report is made of.
type Input struct {
	Result *check.Result
	Policy *policy.Policy
	// Now is when the check ran.
	Now time.Time
}

// Write renders in the named format.
func Write(w io.Writer, format string, in Input) error {
	switch format {
	case "text":
		return Text(w, in)
	case "json":
		return JSON(w, in)
	case "junit":
		return JUnit(w, in)
	}
	return fmt.Errorf("report: unknown format %q; use one of %s", format, strings.Join(Formats, ", "))
}

// textDiffLines bounds the diff lines shown per violation in the text report.
const textDiffLines = 40

// Text writes the report for people.
func Text(w io.Writer, in Input) error {
	r := in.Result
	var b strings.Builder
	if r.MergeBase {
		fmt.Fprintf(&b, "boundaries %s: base = merge base of HEAD and %s (%s) = %s, policy %s\n", Version, r.BaseRef, shortHash(r.RefCommit), shortHash(r.BaseCommit), in.Policy.Source)
	} else {
		fmt.Fprintf(&b, "boundaries %s: base %s = %s, policy %s\n", Version, r.BaseRef, shortHash(r.BaseCommit), in.Policy.Source)
	}
	if r.PolicyChanged {
		if r.PolicyInBase {
			b.WriteString("warning: the policy (or one of its block files) differs from the base's copy; the check used the working tree's version\n")
		} else {
			b.WriteString("note: the base has no copy of this policy; the check used the working tree's version\n")
		}
	}
	for _, e := range r.Entries {
		verdict := e.Verdict
		if verdict == "changed" {
			verdict = "CHANGED"
		}
		fmt.Fprintf(&b, "  %-9s %s (%s, %d files)", verdict, e.Spec, e.Resolved, e.Files)
		if e.Violations > 0 {
			fmt.Fprintf(&b, ": %d violation(s)", e.Violations)
		}
		b.WriteString("\n")
	}
	for _, ed := range r.Edits {
		var parts []string
		for _, bl := range ed.Blocks {
			parts = append(parts, fmt.Sprintf("%s %s", bl.Name, bl.Status))
		}
		verdict := ed.Verdict
		if verdict == "failed" {
			verdict = "FAILED"
		}
		fmt.Fprintf(&b, "  %-9s %s (allowed edit: %s)\n", verdict, ed.Path, strings.Join(parts, ", "))
	}
	if len(r.Violations) > 0 {
		b.WriteString("violations:\n")
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %-12s %s [%s] %s\n", v.Kind, v.Path, strings.Join(v.Where, ","), v.Detail)
		if v.Diff != "" {
			limit := textDiffLines
			switch v.Kind {
			case check.KindAllowedEdit:
				limit *= 3 // the point of the report: show what else changed
			case check.KindAdded, check.KindDeleted:
				limit = textDiffLines / 4 // a whole file: its start is enough here
			}
			lines := strings.SplitAfter(strings.TrimSuffix(v.Diff, "\n"), "\n")
			for i, l := range lines {
				if i == limit {
					fmt.Fprintf(&b, "      ... %d more diff lines (see --format json)\n", len(lines)-limit)
					break
				}
				b.WriteString("      " + strings.TrimSuffix(l, "\n") + "\n")
			}
		}
	}
	if r.OK() {
		fmt.Fprintf(&b, "PASS: boundary holds: %d protected entries and %d allowed edit(s) checked, %d files, in %s\n",
			len(r.Entries), len(r.Edits), r.Files, r.Elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "FAIL: boundary broken: %d violation(s) among %d files under %d protected entries and %d allowed edit(s), in %s\n",
			len(r.Violations), r.Files, len(r.Entries), len(r.Edits), r.Elapsed.Round(time.Millisecond))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// toolInfo describes the tool for the evidence manifest.
type toolInfo struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Go        string `json:"go"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"revision_modified,omitempty"`
	Module    string `json:"module,omitempty"`
	GoGitVers string `json:"go_git,omitempty"`
}

func tool() toolInfo {
	t := toolInfo{Name: "boundaries", Version: Version, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		t.Module = bi.Main.Path
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				t.Revision = s.Value
			case "vcs.modified":
				t.Modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/go-git/go-git/v5" {
				t.GoGitVers = d.Version
			}
		}
	}
	return t
}

type policyInfo struct {
	Source          string   `json:"source"`
	Version         int      `json:"version"`
	Description     string   `json:"description,omitempty"`
	SHA256          string   `json:"sha256"`
	BlockFiles      []string `json:"block_files,omitempty"`
	InBase          bool     `json:"in_base"`
	ChangedFromBase bool     `json:"changed_from_base"`
}

type summary struct {
	ProtectedEntries int `json:"protected_entries"`
	AllowedEdits     int `json:"allowed_edits"`
	FilesChecked     int `json:"files_checked"`
	Violations       int `json:"violations"`
}

type jsonReport struct {
	Schema       string              `json:"schema"`
	Tool         toolInfo            `json:"tool"`
	Verdict      string              `json:"verdict"`
	CheckedAt    string              `json:"checked_at"`
	ElapsedMS    float64             `json:"elapsed_ms"`
	Base         base                `json:"base"`
	Repository   check.Repository    `json:"repository"`
	Policy       policyInfo          `json:"policy"`
	Summary      summary             `json:"summary"`
	Protected    []check.EntryResult `json:"protected"`
	AllowedEdits []check.EditResult  `json:"allowed_edits"`
	Violations   []check.Violation   `json:"violations"`
}

type base struct {
	Ref       string `json:"ref"`
	Commit    string `json:"commit"`
	RefCommit string `json:"ref_commit"`
	MergeBase bool   `json:"merge_base"`
}

func verdict(r *check.Result) string {
	if r.OK() {
		return "pass"
	}
	return "fail"
}

// JSON writes the evidence manifest.
func JSON(w io.Writer, in Input) error {
	r := in.Result
	sum := sha256.Sum256(in.Policy.Raw)
	rep := jsonReport{
		Schema:     Schema,
		Tool:       tool(),
		Verdict:    verdict(r),
		CheckedAt:  in.Now.UTC().Format(time.RFC3339),
		ElapsedMS:  float64(r.Elapsed.Microseconds()) / 1000,
		Base:       base{Ref: r.BaseRef, Commit: r.BaseCommit, RefCommit: r.RefCommit, MergeBase: r.MergeBase},
		Repository: r.Repo,
		Policy: policyInfo{Source: in.Policy.Source, Version: in.Policy.Version, Description: in.Policy.Description,
			SHA256: hex.EncodeToString(sum[:]), BlockFiles: in.Policy.BlockFiles, InBase: r.PolicyInBase, ChangedFromBase: r.PolicyChanged},
		Summary:      summary{ProtectedEntries: len(r.Entries), AllowedEdits: len(r.Edits), FilesChecked: r.Files, Violations: len(r.Violations)},
		Protected:    nonNil(r.Entries),
		AllowedEdits: nonNil(r.Edits),
		Violations:   nonNil(r.Violations),
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Package    string          `xml:"package,attr"`
	ID         int             `xml:"id,attr"`
	Hostname   string          `xml:"hostname,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
	SystemOut  cdata           `xml:"system-out"`
	SystemErr  string          `xml:"system-err"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",cdata"`
}

// cdata is element text written as CDATA, so diffs stay readable.
type cdata struct {
	Text string `xml:",cdata"`
}

// xmlSafe replaces the characters XML 1.0 cannot carry (most control
// characters, invalid UTF-8) with U+FFFD.
func xmlSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return r
		case r < 0x20, r == 0xFFFE, r == 0xFFFF, r == utf8.RuneError:
			return '\uFFFD'
		case r >= 0xD800 && r <= 0xDFFF:
			return '\uFFFD'
		}
		return r
	}, s)
}

// JUnit writes JUnit XML: one test case per protected entry and per file
// with allowed edits; a case fails with every violation under it. The suite
// carries the attributes both the Jenkins and the Ant (windyroad) JUnit
// schemas require, and the text report as its system-out.
func JUnit(w io.Writer, in Input) error {
	r := in.Result
	secs := fmt.Sprintf("%.3f", r.Elapsed.Seconds())
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	var text strings.Builder
	Text(&text, in)
	suite := junitSuite{Name: "boundaries", Package: "boundaries", Hostname: host, SystemOut: cdata{xmlSafe(text.String())},
		Time: secs, Timestamp: in.Now.UTC().Format("2006-01-02T15:04:05"),
		Properties: []junitProperty{
			{Name: "base.ref", Value: r.BaseRef},
			{Name: "base.commit", Value: r.BaseCommit},
			{Name: "base.merge_base", Value: fmt.Sprint(r.MergeBase)},
			{Name: "repository.head", Value: r.Repo.Head},
			{Name: "policy", Value: in.Policy.Source},
			{Name: "tool.version", Value: Version},
		}}
	failCase := func(name, class string, vs []check.Violation) junitCase {
		jc := junitCase{Name: name, Classname: class, Time: "0"}
		if len(vs) == 0 {
			return jc
		}
		var kinds []string
		var body strings.Builder
		for _, v := range vs {
			kinds = append(kinds, string(v.Kind))
			fmt.Fprintf(&body, "%s %s [%s]: %s\n", v.Kind, v.Path, strings.Join(v.Where, ","), v.Detail)
			if v.Diff != "" {
				body.WriteString(v.Diff)
			}
		}
		jc.Failure = &junitFailure{
			Message: xmlSafe(fmt.Sprintf("%d violation(s) under %s", len(vs), name)),
			Type:    strings.Join(dedupe(kinds), ","),
			Body:    xmlSafe(body.String()),
		}
		return jc
	}
	pol := in.Policy
	for i, e := range r.Entries {
		var vs []check.Violation
		for _, v := range r.Violations {
			if pol.Protected[i].Matches(v.Path) || (v.RenamedTo != "" && pol.Protected[i].Matches(v.RenamedTo)) {
				vs = append(vs, v)
			}
		}
		suite.Cases = append(suite.Cases, failCase(e.Spec, "boundaries.protected", vs))
	}
	for _, ed := range r.Edits {
		var vs []check.Violation
		for _, v := range r.Violations {
			if v.Path == ed.Path {
				vs = append(vs, v)
			}
		}
		suite.Cases = append(suite.Cases, failCase(ed.Path, "boundaries.allowed_edits", vs))
	}
	for _, c := range suite.Cases {
		suite.Tests++
		if c.Failure != nil {
			suite.Failures++
		}
	}
	doc := junitSuites{Name: "boundaries", Tests: suite.Tests, Failures: suite.Failures, Time: secs, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
