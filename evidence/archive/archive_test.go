package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/audioproof/audioproof/evidence/manifest"
	"github.com/audioproof/audioproof/evidence/results"
)

// makeRun writes a small but complete evidence folder: two variants, one
// inference exchange each, compared; then packs it.
func makeRun(t *testing.T, candidateBody string) string {
	t.Helper()
	dir := t.TempDir()
	m := manifest.New("checkpoints", "test")
	m.Source = manifest.Source{Commit: "0123456789abcdef0123456789abcdef01234567", DirtyFiles: []string{}}
	exe := filepath.Join(dir, "server")
	if err := os.WriteFile(exe, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.AddFile(manifest.RoleExecutable, "upstream", exe); err != nil {
		t.Fatal(err)
	}
	m.AddCommand(manifest.Command{Argv: []string{"server", "--port", "1"}})
	f, err := NewFolder(filepath.Join(dir, Name(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), m.Source.Commit)))
	if err != nil {
		t.Fatal(err)
	}
	r := &results.Results{SchemaVersion: results.SchemaVersion, Kind: "checkpoints", Reference: "upstream", Checks: []results.Check{},
		Plan: results.PlanRef{Name: "unit"}, Steps: []string{"cold"}}
	add := func(variant, body string) results.Exchange {
		id := "cpu/" + variant + "/m/001-cold"
		e := results.Exchange{ID: id, Backend: "cpu", Variant: variant, Model: "m", Step: "cold", Kind: results.KindInference,
			Method: "POST", Path: "/v1/x", RequestFile: "raw/" + id + ".request.json", ResponseFile: "raw/" + id + ".response.json",
			BodyFile: "raw/" + id + ".response.body", Status: 200, ContentType: "application/json", BodySHA256: results.SHA256([]byte(body))}
		if err := f.WriteJSON(e.RequestFile, results.RawRequest{Method: "POST", URL: "/v1/x"}); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteJSON(e.ResponseFile, results.RawResponse{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}}); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteFile(e.BodyFile, []byte(body)); err != nil {
			t.Fatal(err)
		}
		r.Exchanges = append(r.Exchanges, e)
		return e
	}
	ref := add("upstream", `{"text":"a","timing":{"wall_ms":1}}`)
	cand := add("candidate", candidateBody)
	c := results.Check{Backend: "cpu", Variant: "candidate", Model: "m", Step: "cold", Kind: results.CheckMatch, Required: true,
		Exchange: cand.ID, Against: ref.ID, Passed: true, Message: "equal"}
	r.Checks = append(r.Checks, c)
	r.Finish()
	if err := f.WriteJSON(ManifestFile, m); err != nil {
		t.Fatal(err)
	}
	if err := WriteReports(f, r); err != nil {
		t.Fatal(err)
	}
	out, err := Pack(f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rewrite copies an archive, changing files with edit; with fixSums it also
// recomputes SHA256SUMS, as a careful forger would.
func rewrite(t *testing.T, src string, edit func(name string, data []byte) []byte, fixSums bool) string {
	t.Helper()
	a, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range a.Names() {
		a.Files[n] = edit(n, a.Files[n])
	}
	if fixSums {
		var sums bytes.Buffer
		for _, n := range a.Names() {
			if n != SumsFile {
				fmt.Fprintf(&sums, "%s  %s\n", sha256Hex(a.Files[n]), n)
			}
		}
		a.Files[SumsFile] = sums.Bytes()
	}
	out := filepath.Join(t.TempDir(), filepath.Base(src))
	fh, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(fh)
	tw := tar.NewWriter(gz)
	for _, n := range a.Names() {
		if err := tw.WriteHeader(&tar.Header{Name: a.Top + "/" + n, Mode: 0o644, Size: int64(len(a.Files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(a.Files[n]); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	gz.Close()
	fh.Close()
	return out
}

func problems(t *testing.T, p string) string {
	t.Helper()
	rep, err := Verify(p)
	if err != nil {
		return err.Error()
	}
	return strings.Join(rep.Problems, "\n")
}

func TestPackAndVerify(t *testing.T) {
	p := makeRun(t, `{"timing":{"wall_ms":99},"text":"a"}`)
	if !strings.HasSuffix(p, "evidence-20261130-090000-0123456789ab.tar.gz") {
		t.Fatalf("archive name %s", p)
	}
	if got := problems(t, p); got != "" {
		t.Fatalf("fresh archive has problems:\n%s", got)
	}
	a, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{SumsFile, ManifestFile, ResultsFile, SummaryFile, JUnitFile} {
		if _, ok := a.Files[want]; !ok {
			t.Errorf("archive lacks %s", want)
		}
	}
	if !strings.Contains(string(a.Files[SummaryFile]), "2/2 requests matched") {
		t.Errorf("summary:\n%s", a.Files[SummaryFile])
	}
}

func TestVerifyCatchesTampering(t *testing.T) {
	p := makeRun(t, `{"text":"a"}`)
	body := "raw/cpu/candidate/m/001-cold.response.body"
	cases := []struct {
		name    string
		edit    func(string, []byte) []byte
		fixSums bool
		want    string
	}{
		{"changed body", func(n string, d []byte) []byte {
			if n == body {
				return []byte(`{"text":"b"}`)
			}
			return d
		}, false, body + ": sha256 is"},
		{"changed body with new sums", func(n string, d []byte) []byte {
			if n == body {
				return []byte(`{"text":"b"}`)
			}
			return d
		}, true, "recorded as matched but the stored responses differ at $.text"},
		{"edited verdict", func(n string, d []byte) []byte {
			if n == ResultsFile {
				return bytes.Replace(d, []byte(`"passed": true,
      "message": "equal"`), []byte(`"passed": false,
      "message": "equal"`), 1)
			}
			return d
		}, true, "recorded as different but the stored responses are equal"},
		{"edited totals", func(n string, d []byte) []byte {
			if n == ResultsFile {
				return bytes.Replace(d, []byte(`"matched": 2`), []byte(`"matched": 3`), 1)
			}
			return d
		}, true, "differ from the totals recomputed"},
		{"edited summary", func(n string, d []byte) []byte {
			if n == SummaryFile {
				return bytes.Replace(d, []byte("2/2"), []byte("3/3"), 1)
			}
			return d
		}, true, "summary.md is not the summary of results.json"},
		{"manifest schema", func(n string, d []byte) []byte {
			if n == ManifestFile {
				return bytes.Replace(d, []byte(`"schema_version": 1`), []byte(`"schema_version": 7`), 1)
			}
			return d
		}, true, "schema_version is 7"},
		{"bad file hash in manifest", func(n string, d []byte) []byte {
			if n == ManifestFile {
				var m map[string]any
				_ = json.Unmarshal(d, &m)
				m["files"].([]any)[0].(map[string]any)["sha256"] = "xyz"
				out, _ := json.Marshal(m)
				return out
			}
			return d
		}, true, "is not 64 lowercase hex digits"},
		{"added file", func(n string, d []byte) []byte { return d }, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := rewrite(t, p, c.edit, c.fixSums)
			got := problems(t, q)
			if c.want == "" {
				if got != "" {
					t.Fatalf("untouched copy has problems: %s", got)
				}
				return
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("want a problem containing %q, got:\n%s", c.want, got)
			}
		})
	}
	// A file that SHA256SUMS does not list.
	q := rewrite(t, p, func(n string, d []byte) []byte { return d }, false)
	a, _ := Open(q)
	a.Files["extra.txt"] = []byte("x")
	rep := VerifyArchive(a)
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "extra.txt is in the archive but not in SHA256SUMS") {
		t.Fatalf("got %v", rep.Problems)
	}
	// A removed file.
	delete(a.Files, "extra.txt")
	delete(a.Files, body)
	rep = VerifyArchive(a)
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "lists "+body+", which is not in the archive") {
		t.Fatalf("got %v", rep.Problems)
	}
}

func TestOpenRejectsHostileArchives(t *testing.T) {
	write := func(hdrs ...*tar.Header) string {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, h := range hdrs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = io.WriteString(tw, strings.Repeat("x", int(h.Size)))
			}
		}
		tw.Close()
		gz.Close()
		p := filepath.Join(t.TempDir(), "a.tar.gz")
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, hdrs := range map[string][]*tar.Header{
		"escape":  {{Name: "e/../../etc/passwd", Size: 1, Mode: 0o644, Typeflag: tar.TypeReg}},
		"symlink": {{Name: "e/link", Linkname: "/etc/passwd", Typeflag: tar.TypeSymlink}},
		"two top": {{Name: "a/x", Size: 1, Typeflag: tar.TypeReg, Mode: 0o644}, {Name: "b/y", Size: 1, Typeflag: tar.TypeReg, Mode: 0o644}},
		"empty":   {},
	} {
		if _, err := Open(write(hdrs...)); err == nil {
			t.Errorf("%s: archive accepted", name)
		}
	}
}
