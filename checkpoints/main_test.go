package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/audioproof/audioproof/checkpoints/cli"
	evidencecli "github.com/audioproof/audioproof/evidence/cli"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"checkpoints": func() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) },
		"evidence":    func() { os.Exit(evidencecli.Main(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs testdata/checkpoints/scripts: the harness against real
// processes of the fake server (testdata/checkpoints/fakeserver), which is
// on PATH as "fakeserver", and the evidence command on what it wrote.
func TestScripts(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "fakeserver"), "./testdata/checkpoints/fakeserver")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the fake server: %v\n%s", err, out)
	}
	wav, err := os.ReadFile(filepath.Join(root, "testdata/checkpoints/inputs/speech-16k.wav"))
	if err != nil {
		t.Fatal(err)
	}
	emptyGGML := t.TempDir()
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join(root, "testdata/checkpoints/scripts"),
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", binDir+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("REPO", root)
			env.Setenv("AUDIOPROOF_GGML_DIR", emptyGGML)
			return os.WriteFile(filepath.Join(env.WorkDir, "speech.wav"), wav, 0o644)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"setarchive": setArchive,
			"tamper":     tamper,
		},
	})
}

// setarchive VAR DIR: set $VAR to the archive named in DIR/LATEST, or the
// only evidence-*.tar.gz in DIR.
func setArchive(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: setarchive VAR DIR")
	}
	dir := ts.MkAbs(args[1])
	if data, err := os.ReadFile(filepath.Join(dir, "LATEST")); err == nil {
		ts.Setenv(args[0], filepath.Join(dir, strings.TrimSpace(string(data))))
		return
	}
	found, err := filepath.Glob(filepath.Join(dir, "evidence-*.tar.gz"))
	ts.Check(err)
	if len(found) != 1 {
		ts.Fatalf("want one archive in %s, found %v", dir, found)
	}
	ts.Setenv(args[0], found[0])
}

// tamper [-sums] ARCHIVE PATTERN OUT: copy ARCHIVE to OUT with one byte
// changed in the first file (sorted) whose name contains the parts of
// PATTERN (separated by '*') in order; with
// -sums also rewrite SHA256SUMS to match, as a careful forger would.
func tamper(ts *testscript.TestScript, neg bool, args []string) {
	fixSums := len(args) > 0 && args[0] == "-sums"
	if fixSums {
		args = args[1:]
	}
	if neg || len(args) != 3 {
		ts.Fatalf("usage: tamper [-sums] ARCHIVE SUBSTRING OUT")
	}
	fh, err := os.Open(ts.MkAbs(args[0]))
	ts.Check(err)
	defer fh.Close()
	gz, err := gzip.NewReader(fh)
	ts.Check(err)
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		ts.Check(err)
		data, err := io.ReadAll(tr)
		ts.Check(err)
		files[h.Name] = data
		names = append(names, h.Name)
	}
	sort.Strings(names)
	target := ""
	for _, n := range names {
		if containsInOrder(n, strings.Split(args[1], "*")) {
			target = n
			break
		}
	}
	if target == "" {
		ts.Fatalf("no file in %s contains %q", args[0], args[1])
	}
	d := files[target]
	if len(d) == 0 {
		ts.Fatalf("%s is empty", target)
	}
	d[len(d)/2] ^= 0x01
	ts.Logf("tampered with %s", target)
	if fixSums {
		top, _, _ := strings.Cut(target, "/")
		var sums bytes.Buffer
		for _, n := range names {
			rel := strings.TrimPrefix(n, top+"/")
			if rel == "SHA256SUMS" {
				continue
			}
			s := sha256.Sum256(files[n])
			fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(s[:]), rel)
		}
		files[top+"/SHA256SUMS"] = sums.Bytes()
	}
	out, err := os.Create(ts.MkAbs(args[2]))
	ts.Check(err)
	zw := gzip.NewWriter(out)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		ts.Check(tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}))
		_, err := tw.Write(files[n])
		ts.Check(err)
	}
	ts.Check(tw.Close())
	ts.Check(zw.Close())
	ts.Check(out.Close())
}

func containsInOrder(s string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
