// Package cli is the evidence command: verify, show, diff and pack evidence
// archives. It is a package so that tests (and testscript) can run it in
// process.
package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/audioproof/audioproof/evidence/archive"
	"github.com/audioproof/audioproof/evidence/manifest"
	"github.com/audioproof/audioproof/evidence/results"
)

const usage = `usage:
  evidence verify ARCHIVE     recheck hashes, manifest schema and results (exit 1 on any problem)
  evidence show ARCHIVE       print the run's headline and summary tables
  evidence diff A B           compare two runs (exit 1 when verdicts or responses differ)
  evidence pack --kind KIND --attach FILE [--attach FILE...] [--out DIR]
                [--name NAME] [--command "ARGS"] [--exit-status N]
                              make an archive from another tool's reports (e.g. --kind boundaries)
ARCHIVE is an evidence-*.tar.gz or an unpacked evidence folder.
`

// Main runs the command with args (without the program name) and returns
// the exit status: 0 success, 1 failure found, 2 usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "verify":
		return verify(args[1:], stdout, stderr)
	case "show":
		return show(args[1:], stdout, stderr)
	case "diff":
		return diff(args[1:], stdout, stderr)
	case "pack":
		return pack(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "evidence: unknown command %q\n%s", args[0], usage)
	return 2
}

func verify(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "evidence verify: give exactly one archive\n%s", usage)
		return 2
	}
	rep, err := archive.Verify(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "evidence verify: %v\n", err)
		return 1
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	if !rep.OK() {
		fmt.Fprintf(stdout, "FAILED: %s has %d problem(s):\n", args[0], len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "  - %s\n", p)
		}
		return 1
	}
	fmt.Fprintf(stdout, "OK: %s: %d files match SHA256SUMS, manifest schema %d valid", args[0], rep.Files, rep.Manifest.SchemaVersion)
	if rep.Results != nil && len(rep.Results.Exchanges) > 0 {
		fmt.Fprintf(stdout, ", results recomputed from raw responses agree (%s)", rep.Results.Headline())
	} else if rep.Results != nil {
		fmt.Fprintf(stdout, ", results consistent with their checks (%s)", rep.Results.Headline())
	}
	fmt.Fprintln(stdout)
	return 0
}

func show(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "evidence show: give exactly one archive\n%s", usage)
		return 2
	}
	a, err := archive.Open(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "evidence show: %v\n", err)
		return 1
	}
	var m manifest.Manifest
	if err := a.JSON(archive.ManifestFile, &m); err != nil {
		fmt.Fprintf(stderr, "evidence show: %v\n", err)
		return 1
	}
	var r results.Results
	if err := a.JSON(archive.ResultsFile, &r); err != nil {
		fmt.Fprintf(stderr, "evidence show: %v\n", err)
		return 1
	}
	dirty := "clean"
	if m.Source.Dirty {
		dirty = fmt.Sprintf("dirty (%d files)", len(m.Source.DirtyFiles))
	}
	fmt.Fprintf(stdout, "Evidence %s (%s), created %s by %s\n", a.Top, m.Kind, m.Created.Format(time.RFC3339), m.Tool)
	fmt.Fprintf(stdout, "Source: %s commit %s, %s", m.Source.Repository, m.Source.Commit, dirty)
	if m.Source.BaseRef != "" {
		fmt.Fprintf(stdout, "; base %s = %s", m.Source.BaseRef, m.Source.BaseCommit)
	}
	fmt.Fprintf(stdout, "\nBuild: %s %s/%s; %d files recorded, %d commands\n", m.Build.GoVersion, m.Build.OS, m.Build.Arch, len(m.Files), len(m.Commands))
	if err := results.WriteSummary(stdout, &r, false); err != nil {
		fmt.Fprintf(stderr, "evidence show: %v\n", err)
		return 1
	}
	return 0
}

type run struct {
	a *archive.Archive
	m manifest.Manifest
	r results.Results
}

func load(p string) (*run, error) {
	a, err := archive.Open(p)
	if err != nil {
		return nil, err
	}
	x := &run{a: a}
	if err := a.JSON(archive.ManifestFile, &x.m); err != nil {
		return nil, err
	}
	if err := a.JSON(archive.ResultsFile, &x.r); err != nil {
		return nil, err
	}
	return x, nil
}

func diff(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "evidence diff: give two archives\n%s", usage)
		return 2
	}
	a, err := load(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "evidence diff: %v\n", err)
		return 1
	}
	b, err := load(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "evidence diff: %v\n", err)
		return 1
	}
	lines := Diff(a.m, b.m, &a.r, &b.r)
	fmt.Fprintf(stdout, "A: %s\nB: %s\n", a.a.Top, b.a.Top)
	fmt.Fprintf(stdout, "A: %s\nB: %s\n", a.r.Headline(), b.r.Headline())
	differ := false
	for _, l := range lines {
		fmt.Fprintln(stdout, l.Text)
		if l.Verdict {
			differ = true
		}
	}
	if !differ {
		fmt.Fprintln(stdout, "Same verdicts and the same responses.")
		return 0
	}
	return 1
}

// DiffLine is one line of a run comparison; Verdict marks lines that mean
// the runs disagree (a check or a response changed), not just context.
type DiffLine struct {
	Text    string
	Verdict bool
}

// Diff compares two runs: source and files (context), then check verdicts
// and response bodies per backend/variant/model/step.
func Diff(ma, mb manifest.Manifest, ra, rb *results.Results) []DiffLine {
	var out []DiffLine
	ctx := func(format string, args ...any) { out = append(out, DiffLine{Text: fmt.Sprintf(format, args...)}) }
	verdict := func(format string, args ...any) {
		out = append(out, DiffLine{Text: fmt.Sprintf(format, args...), Verdict: true})
	}
	if ma.Source.Commit != mb.Source.Commit {
		ctx("source commit: %s -> %s", ma.Source.Commit, mb.Source.Commit)
	}
	if ma.Source.BaseCommit != mb.Source.BaseCommit {
		ctx("base commit: %s -> %s", ma.Source.BaseCommit, mb.Source.BaseCommit)
	}
	files := func(m manifest.Manifest) map[string]manifest.File {
		out := map[string]manifest.File{}
		for _, f := range m.Files {
			out[f.Role+" "+f.Name+" "+filepath.Base(f.Path)] = f
		}
		return out
	}
	fa, fb := files(ma), files(mb)
	for _, k := range sortedKeys(fa, fb) {
		x, inA := fa[k]
		y, inB := fb[k]
		switch {
		case !inA:
			ctx("file only in B: %s (%s)", k, y.Path)
		case !inB:
			ctx("file only in A: %s (%s)", k, x.Path)
		case x.SHA256 != y.SHA256:
			ctx("file changed: %s sha256 %s -> %s", k, short(x.SHA256), short(y.SHA256))
		}
	}
	checks := func(r *results.Results) map[string]results.Check {
		out := map[string]results.Check{}
		for _, c := range r.Checks {
			out[c.Name()] = c
		}
		return out
	}
	ca, cb := checks(ra), checks(rb)
	for _, k := range sortedKeys(ca, cb) {
		x, inA := ca[k]
		y, inB := cb[k]
		switch {
		case !inA:
			verdict("check only in B: %s (%s)", k, passText(y.Passed))
		case !inB:
			verdict("check only in A: %s (%s)", k, passText(x.Passed))
		case x.Passed != y.Passed:
			verdict("check %s: %s -> %s %s", k, passText(x.Passed), passText(y.Passed), firstNonEmpty(y.Message, x.Message))
		}
	}
	bodies := func(r *results.Results) map[string]results.Exchange {
		out := map[string]results.Exchange{}
		for _, e := range r.Exchanges {
			out[strings.Join([]string{e.Backend, e.Variant, e.Model, e.Step}, " ")] = e
		}
		return out
	}
	ea, eb := bodies(ra), bodies(rb)
	for _, k := range sortedKeys(ea, eb) {
		x, inA := ea[k]
		y, inB := eb[k]
		switch {
		case !inA:
			verdict("response only in B: %s", k)
		case !inB:
			verdict("response only in A: %s", k)
		case x.Status != y.Status:
			verdict("response %s: status %d -> %d", k, x.Status, y.Status)
		case x.BodySHA256 != y.BodySHA256 && x.Kind == results.KindInference:
			verdict("response %s: body changed (sha256 %s -> %s)", k, short(x.BodySHA256), short(y.BodySHA256))
		}
	}
	return out
}

func sortedKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

func passText(p bool) string {
	if p {
		return "pass"
	}
	return "FAIL"
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return "(" + x + ")"
		}
	}
	return ""
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// PackOptions describe reports of another tool to archive as evidence.
type PackOptions struct {
	Kind        string   // e.g. "boundaries"
	Attach      []string // report files to include under attachments/
	OutDir      string   // folder that receives the evidence folder and archive
	Name        string   // plan/run name shown in the summary
	Command     []string // the command that produced the reports
	ExitStatus  *int     // its exit status, when known
	RepoDir     string   // repository to describe (default: current folder)
	Environment map[string]string
}

// Pack writes an evidence folder for reports made by another tool and packs
// it. Each JSON attachment contributes checks: a top-level boolean "passed"
// or "ok" or a "verdict" word, every item of a "violations" array (as a
// failure), and items of "checks", "results", "findings", "protected" or
// "allowed_edits" arrays that carry a passed/ok boolean or a status/verdict
// word (the boundary checker's --format json report reads this way). The
// command's exit status, when given, is a required check too. It returns
// the archive path and results.
func Pack(o PackOptions) (string, *results.Results, error) {
	if o.Kind == "" || len(o.Attach) == 0 {
		return "", nil, fmt.Errorf("pack needs --kind and at least one --attach FILE")
	}
	if o.RepoDir == "" {
		o.RepoDir = "."
	}
	m := manifest.New(o.Kind, "evidence pack")
	if err := m.CollectSource(o.RepoDir); err != nil {
		m.Source.BaseNote = err.Error()
	}
	m.CollectEnv()
	for k, v := range o.Environment {
		m.Environment[k] = v
	}
	r := &results.Results{SchemaVersion: results.SchemaVersion, Kind: o.Kind, Started: m.Created, Checks: []results.Check{}}
	r.Plan = results.PlanRef{Name: firstNonEmpty2(o.Name, o.Kind)}
	if len(o.Command) > 0 {
		m.AddCommand(manifest.Command{Argv: o.Command, Exit: o.ExitStatus, Purpose: "produced the attached reports"})
	}
	name := archive.Name(m.Created, m.Source.Commit)
	f, err := archive.NewFolder(filepath.Join(o.OutDir, name))
	if err != nil {
		return "", nil, err
	}
	for _, p := range o.Attach {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", nil, fmt.Errorf("cannot attach %s: %w", p, err)
		}
		rel := "attachments/" + filepath.Base(p)
		if _, err := os.Stat(f.Path(rel)); err == nil {
			return "", nil, fmt.Errorf("two attachments are named %s", filepath.Base(p))
		}
		if err := f.WriteFile(rel, data); err != nil {
			return "", nil, err
		}
		if err := m.AddFile(manifest.RoleAttachment, rel, p); err != nil {
			return "", nil, err
		}
		r.Checks = append(r.Checks, checksFromReport(filepath.Base(p), data)...)
	}
	if o.ExitStatus != nil {
		r.Checks = append(r.Checks, results.Check{Kind: "exit_status", Required: true, Passed: *o.ExitStatus == 0,
			Message: fmt.Sprintf("%s exited with status %d", strings.Join(o.Command, " "), *o.ExitStatus)})
	}
	r.Finished = time.Now().UTC()
	r.Finish()
	if err := f.WriteJSON(archive.ManifestFile, m); err != nil {
		return "", nil, err
	}
	if err := archive.WriteReports(f, r); err != nil {
		return "", nil, err
	}
	out, err := archive.Pack(f.Dir)
	return out, r, err
}

func firstNonEmpty2(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checksFromReport turns a JSON report into checks (see Pack).
func checksFromReport(name string, data []byte) []results.Check {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return []results.Check{{Kind: "attachment", Step: name, Required: false, Passed: true,
			Message: fmt.Sprintf("%s attached (not a JSON object, no checks read)", name)}}
	}
	var out []results.Check
	for _, key := range []string{"passed", "ok"} {
		if v, ok := doc[key].(bool); ok {
			out = append(out, results.Check{Kind: "report", Step: name, Required: true, Passed: v,
				Message: fmt.Sprintf("%s reports %s=%v", name, key, v)})
			break
		}
	}
	if v, ok := doc["verdict"].(string); ok {
		if passed, known := verdictPassed(v); known {
			out = append(out, results.Check{Kind: "report", Step: name, Required: true, Passed: passed,
				Message: fmt.Sprintf("%s reports verdict %q", name, v)})
		}
	}
	// Violations (the boundary checker's): every item is a failure.
	if items, ok := doc["violations"].([]any); ok {
		for i, it := range items {
			obj, _ := it.(map[string]any)
			label := itemLabel(obj, fmt.Sprintf("violations[%d]", i))
			msg, _ := obj["detail"].(string)
			out = append(out, results.Check{Kind: "violation", Model: label, Step: name, Required: true, Passed: false,
				Message: firstNonEmpty2(msg, label)})
		}
	}
	for _, key := range []string{"checks", "results", "findings", "protected", "allowed_edits"} {
		items, ok := doc[key].([]any)
		if !ok {
			continue
		}
		for i, it := range items {
			obj, ok := it.(map[string]any)
			if !ok {
				continue
			}
			label := itemLabel(obj, fmt.Sprintf("%s[%d]", key, i))
			passed, known := itemPassed(obj)
			if !known {
				continue
			}
			msg, _ := obj["message"].(string)
			if msg == "" {
				msg, _ = obj["detail"].(string)
			}
			if msg == "" {
				msg = label
				for _, k := range []string{"status", "verdict"} {
					if v, ok := obj[k].(string); ok {
						msg += ": " + v
						break
					}
				}
			}
			out = append(out, results.Check{Kind: key, Model: label, Step: name, Required: true, Passed: passed, Message: msg})
		}
	}
	if len(out) == 0 {
		out = append(out, results.Check{Kind: "attachment", Step: name, Passed: true,
			Message: fmt.Sprintf("%s attached (no passed/ok field or check list found)", name)})
	}
	return out
}

func itemLabel(obj map[string]any, def string) string {
	for _, k := range []string{"name", "id", "check", "rule", "spec", "path"} {
		if s, ok := obj[k].(string); ok && s != "" {
			return s
		}
	}
	return def
}

func itemPassed(obj map[string]any) (bool, bool) {
	for _, k := range []string{"passed", "ok"} {
		if v, ok := obj[k].(bool); ok {
			return v, true
		}
	}
	for _, k := range []string{"status", "verdict"} {
		if s, ok := obj[k].(string); ok {
			if p, known := verdictPassed(s); known {
				return p, true
			}
		}
	}
	return false, false
}

// verdictPassed reads verdict words: the boundary checker's (unchanged,
// inserted, absent pass; changed, failed fail) and common ones.
func verdictPassed(s string) (passed, known bool) {
	switch strings.ToLower(s) {
	case "pass", "passed", "ok", "success", "unchanged", "inserted", "absent":
		return true, true
	case "fail", "failed", "error", "violation", "changed":
		return false, true
	}
	return false, false
}

func pack(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("evidence pack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o PackOptions
	var attach multi
	var command string
	exit := fs.Int("exit-status", -1, "exit status of the command that produced the reports (-1: unknown)")
	fs.StringVar(&o.Kind, "kind", "", "evidence kind, e.g. boundaries")
	fs.Var(&attach, "attach", "report file to include (repeatable)")
	fs.StringVar(&o.OutDir, "out", "out/evidence", "folder that receives the evidence folder and archive")
	fs.StringVar(&o.Name, "name", "", "run name shown in the summary (default: the kind)")
	fs.StringVar(&command, "command", "", "the command that produced the reports, as one string")
	fs.StringVar(&o.RepoDir, "repo", ".", "repository to describe in the manifest")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "evidence pack: unexpected arguments %v\n", fs.Args())
		return 2
	}
	o.Attach = attach
	if command != "" {
		o.Command = strings.Fields(command)
	}
	if *exit >= 0 {
		o.ExitStatus = exit
	}
	if o.Kind == "" || len(o.Attach) == 0 {
		fmt.Fprintf(stderr, "evidence pack: --kind and --attach are required\n%s", usage)
		return 2
	}
	out, r, err := Pack(o)
	if err != nil {
		fmt.Fprintf(stderr, "evidence pack: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\narchive: %s\n", r.Headline(), out)
	return 0
}
