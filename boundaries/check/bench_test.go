package check

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/audioproof/audioproof/boundaries/policy"
)

// genRepo builds a git repository of n source files in nested folders, half
// of them under protected folders, plus an ignored build folder, and commits
// it. It returns the folder and the policy protecting it.
func genRepo(tb testing.TB, n int, pack bool) (string, *policy.Policy) {
	tb.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		tb.Skip("git is needed to build the benchmark repository")
	}
	dir := tb.TempDir()
	top := []string{"src/models", "src/runtime", "include/engine", "external/ggml", "app/cli", "docs", "tools", "tests"}
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, top[i%len(top)], fmt.Sprintf("m%02d", (i/len(top))%40), fmt.Sprintf("p%d", i%3))
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
		body := fmt.Sprintf("// file %d\n#include <stdio.h>\nint f%d(int x) {\n    return x * %d + %d;\n}\n%s", i, i, i%97, i%13, strings.Repeat("// padding line of a realistic source file\n", 20))
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.c", i)), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "src/models/build"), 0o755)
	for i := 0; i < 200; i++ {
		os.WriteFile(filepath.Join(dir, "src/models/build", fmt.Sprintf("o%d.o", i)), []byte("obj"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("build/\n*.tmp\n"), 0o644)
	runGit(tb, dir, "init", "-q")
	runGit(tb, dir, "add", "-A")
	runGit(tb, dir, "commit", "-q", "-m", "base")
	runGit(tb, dir, "tag", "base")
	if pack {
		runGit(tb, dir, "gc", "-q") // packed objects, as in a clone
	}
	pol, err := policy.Parse([]byte(`{"version":1,"protected":["src/models","include/engine","external/ggml","app/cli/"]}`), "bench", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return dir, pol
}

func runGit(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.invalid",
		"GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var benchPaths = []string{"src/models", "include/engine", "external/ggml", "app/cli"}

// gitDiff is the git binary's view of the same check: changed tracked files
// under the protected paths against the base.
func gitDiff(tb testing.TB, dir string) string {
	return runGit(tb, dir, append([]string{"diff", "--name-only", "base", "--"}, benchPaths...)...)
}

// gitUntracked adds what git diff leaves out: untracked, not ignored files.
func gitUntracked(tb testing.TB, dir string) string {
	return runGit(tb, dir, append([]string{"ls-files", "--others", "--exclude-standard", "--"}, benchPaths...)...)
}

func median(tb testing.TB, runs int, f func()) time.Duration {
	var ds []time.Duration
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		f()
		ds = append(ds, time.Since(t0))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// TestGeneratedRepository checks a repository of a few thousand files: the
// verdicts agree with git's on the same tree (clean, then with planted
// changes), and the check reads only the protected paths.
func TestGeneratedRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 3000-file repository")
	}
	dir, pol := genRepo(t, 3000, false)
	res, err := Run(Options{Dir: dir, Base: "base", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || gitDiff(t, dir) != "" {
		t.Fatalf("clean tree: %d violations, git diff %q", len(res.Violations), gitDiff(t, dir))
	}
	if res.Files != 1500 {
		t.Fatalf("checked %d files, want the 1500 protected ones", res.Files)
	}
	// Plant: a modification, an untracked file, an ignored file, a deletion,
	// a change outside the protected paths.
	os.WriteFile(filepath.Join(dir, "src/models/m02/p1/f00016.c"), []byte("changed\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "external/ggml/new.c"), []byte("new\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "external/ggml/x.tmp"), []byte("ignored\n"), 0o644)
	os.Remove(filepath.Join(dir, "include/engine/m00/p2/f00002.c"))
	os.WriteFile(filepath.Join(dir, "docs/m00/p0/f00005.c"), []byte("docs change\n"), 0o644)
	res, err = Run(Options{Dir: dir, Base: "base", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range res.Violations {
		got = append(got, string(v.Kind)+" "+v.Path)
	}
	var want []string
	for _, p := range strings.Fields(gitDiff(t, dir)) {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			want = append(want, "deleted "+p)
		} else {
			want = append(want, "modified "+p)
		}
	}
	for _, p := range strings.Fields(gitUntracked(t, dir)) {
		want = append(want, "added "+p)
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations differ from git's view:\ngot:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(got) != 3 {
		t.Fatalf("want 3 violations (modified, added, deleted), got %v", got)
	}
}

// BenchmarkCheck times the check on a generated repository of 6000 files
// (3000 protected; objects packed as in a clone, loose with
// BOUNDARIES_BENCH_LOOSE=1) beside git diff --name-only for the same paths, on a
// clean tree with git's stat cache fresh, and after every protected file was
// touched (stat cache stale, contents must be hashed again). It prints one
// comparison line per case.
func BenchmarkCheck(b *testing.B) {
	dir, pol := genRepo(b, 6000, os.Getenv("BOUNDARIES_BENCH_LOOSE") == "")
	opts := Options{Dir: dir, Base: "base", Policy: pol}
	run := func() {
		res, err := Run(opts)
		if err != nil || !res.OK() {
			b.Fatalf("check failed: %v %v", err, res)
		}
	}
	compare := func(name string) {
		// Alternate the three so that a change in machine load hits all alike.
		var ours, diff, both []time.Duration
		for i := 0; i < 9; i++ {
			ours = append(ours, median(b, 1, run))
			diff = append(diff, median(b, 1, func() { gitDiff(b, dir) }))
			both = append(both, median(b, 1, func() { gitDiff(b, dir); gitUntracked(b, dir) }))
		}
		fmt.Printf("boundaries %-6s 6000 files (3000 protected): boundaries %6.1f ms | git diff --name-only %6.1f ms | git diff + ls-files --others %6.1f ms\n",
			name, ms(mid(ours)), ms(mid(diff)), ms(mid(both)))
	}
	compare("clean")
	b.Run("boundaries/clean", func(b *testing.B) {
		for b.Loop() {
			run()
		}
	})
	b.Run("git-diff-name-only/clean", func(b *testing.B) {
		for b.Loop() {
			gitDiff(b, dir)
		}
	})
	// Touch every protected file: same content, new mtime. Neither tool may
	// trust its stat cache now (git diff does not rewrite the index).
	future := time.Now().Add(time.Hour)
	for _, p := range benchPaths {
		filepath.Walk(filepath.Join(dir, p), func(path string, info os.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() {
				os.Chtimes(path, future, future)
			}
			return nil
		})
	}
	compare("touched")
	b.Run("boundaries/touched", func(b *testing.B) {
		for b.Loop() {
			run()
		}
	})
	b.Run("git-diff-name-only/touched", func(b *testing.B) {
		for b.Loop() {
			gitDiff(b, dir)
		}
	})
}

func mid(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
