package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	"github.com/audioproof/audioproof/evidence/manifest"
	"github.com/audioproof/audioproof/evidence/results"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Report is what Verify found.
type Report struct {
	Archive  string
	Files    int // files listed in SHA256SUMS and checked
	Problems []string
	Notes    []string // observations that are not tampering (a renamed archive)
	Manifest *manifest.Manifest
	Results  *results.Results
}

// OK reports whether nothing was wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Verify opens an archive (or folder) and checks it: SHA256SUMS lists every
// file exactly once and every hash matches; manifest.json parses and matches
// its schema; results.json parses, and its verdicts and totals agree with
// the raw responses stored next to it; summary.md and junit.xml are the ones
// results.json produces. Any tampering shows up as a problem.
func Verify(p string) (*Report, error) {
	a, err := Open(p)
	if err != nil {
		return nil, err
	}
	return VerifyArchive(a), nil
}

// VerifyArchive checks an archive already read.
func VerifyArchive(a *Archive) *Report {
	rep := &Report{Archive: a.Path}
	bad := func(format string, args ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...)) }
	if want := a.Top + ".tar.gz"; strings.HasSuffix(a.Path, ".tar.gz") && path.Base(a.Path) != want {
		// Renaming is allowed, but say so: the name carries the date and commit.
		rep.Notes = append(rep.Notes, fmt.Sprintf("archive file is named %s but its folder is %s (renamed?)", path.Base(a.Path), a.Top))
	}
	sums, err := a.Read(SumsFile)
	if err != nil {
		bad("%s is missing: the archive cannot be checked", SumsFile)
	} else {
		listed := map[string]bool{}
		for i, line := range strings.Split(strings.TrimRight(string(sums), "\n"), "\n") {
			sum, name, ok := strings.Cut(line, "  ")
			if !ok || len(sum) != 64 || name == "" {
				bad("%s line %d is malformed: %q", SumsFile, i+1, line)
				continue
			}
			if listed[name] {
				bad("%s lists %s twice", SumsFile, name)
			}
			listed[name] = true
			data, ok := a.Files[name]
			if !ok {
				bad("%s lists %s, which is not in the archive", SumsFile, name)
				continue
			}
			rep.Files++
			if got := sha256Hex(data); got != sum {
				bad("%s: sha256 is %s, %s says %s (file changed)", name, got, SumsFile, sum)
			}
		}
		for _, name := range a.Names() {
			if name != SumsFile && !listed[name] {
				bad("%s is in the archive but not in %s (file added)", name, SumsFile)
			}
		}
	}
	var m manifest.Manifest
	if err := a.JSON(ManifestFile, &m); err != nil {
		bad("manifest: %v", err)
	} else if err := m.Validate(); err != nil {
		bad("%v", err)
	} else {
		rep.Manifest = &m
	}
	var r results.Results
	if err := a.JSON(ResultsFile, &r); err != nil {
		bad("results: %v", err)
		return rep
	}
	if err := r.Validate(); err != nil {
		bad("%v", err)
		return rep
	}
	rep.Results = &r
	if rep.Manifest != nil && rep.Manifest.Kind != r.Kind {
		bad("manifest.json kind %q differs from results.json kind %q", rep.Manifest.Kind, r.Kind)
	}
	for _, p := range results.Recheck(&r, a.Read) {
		bad("%s", p)
	}
	if r.SummaryFormat != results.SummaryFormat {
		rep.Notes = append(rep.Notes, fmt.Sprintf("summary.md and junit.xml were rendered in format %d, this tool renders %d: not compared", r.SummaryFormat, results.SummaryFormat))
		return rep
	}
	var sum bytes.Buffer
	if err := results.WriteSummary(&sum, &r, true); err == nil {
		if have, err := a.Read(SummaryFile); err != nil {
			bad("%s is missing", SummaryFile)
		} else if !bytes.Equal(have, sum.Bytes()) {
			bad("%s is not the summary of results.json (edited?)", SummaryFile)
		}
	}
	var junit bytes.Buffer
	if err := results.WriteJUnit(&junit, &r); err == nil {
		if have, err := a.Read(JUnitFile); err != nil {
			bad("%s is missing", JUnitFile)
		} else if !bytes.Equal(have, junit.Bytes()) {
			bad("%s does not match results.json (edited?)", JUnitFile)
		}
	}
	return rep
}

// WriteReports writes results.json, summary.md and junit.xml for r into f
// (after r.Finish()), so that Verify can regenerate and compare them.
func WriteReports(f *Folder, r *results.Results) error {
	if err := f.WriteJSON(ResultsFile, r); err != nil {
		return err
	}
	var sum bytes.Buffer
	if err := results.WriteSummary(&sum, r, true); err != nil {
		return err
	}
	if err := f.WriteFile(SummaryFile, sum.Bytes()); err != nil {
		return err
	}
	var junit bytes.Buffer
	if err := results.WriteJUnit(&junit, r); err != nil {
		return err
	}
	return f.WriteFile(JUnitFile, junit.Bytes())
}
