package udiff

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnifiedEqual(t *testing.T) {
	if got := Unified("a", "b", "x\ny\n", "x\ny\n"); got != "" {
		t.Fatalf("equal texts gave a diff:\n%s", got)
	}
}

func TestUnifiedInsertion(t *testing.T) {
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	b := "1\n2\n3\n4\n5\nnew\n6\n7\n8\n9\n10\n"
	want := "--- a\n+++ b\n@@ -3,6 +3,7 @@\n 3\n 4\n 5\n+new\n 6\n 7\n 8\n"
	if got := Unified("a", "b", a, b); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnifiedAddedAndDeletedFiles(t *testing.T) {
	if got, want := Unified("a", "b", "", "x\ny"), "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x\n+y\n\\ No newline at end of file\n"; got != want {
		t.Fatalf("added: got:\n%q\nwant:\n%q", got, want)
	}
	if got, want := Unified("a", "b", "x\n", ""), "--- a\n+++ b\n@@ -1 +0,0 @@\n-x\n"; got != want {
		t.Fatalf("deleted: got:\n%q\nwant:\n%q", got, want)
	}
}

// TestUnifiedMatchesGit checks hunks against git diff --no-index on texts with
// several separated changes; git is the reference for the format.
func TestUnifiedMatchesGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	var a, b strings.Builder
	for i := 0; i < 60; i++ {
		line := strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "\n"
		a.WriteString(line)
		switch {
		case i == 5:
			b.WriteString("changed\n")
		case i == 20:
		case i == 40:
			b.WriteString(line)
			b.WriteString("inserted 1\ninserted 2\n")
		default:
			b.WriteString(line)
		}
	}
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(pa, []byte(a.String()), 0o644)
	os.WriteFile(pb, []byte(b.String()), 0o644)
	out, _ := exec.Command("git", "diff", "--no-index", "--no-color", "--diff-algorithm=myers", pa, pb).Output()
	gitHunks := string(out)[strings.Index(string(out), "@@"):]
	// git appends a "function context" line after each hunk header; drop it.
	var trimmed []string
	for _, l := range strings.SplitAfter(gitHunks, "\n") {
		if strings.HasPrefix(l, "@@ ") {
			l = l[:strings.Index(l[3:], "@@")+5] + "\n"
		}
		trimmed = append(trimmed, l)
	}
	gitHunks = strings.Join(trimmed, "")
	got := Unified("a", "b", a.String(), b.String())
	gotHunks := got[strings.Index(got, "@@"):]
	if gotHunks != gitHunks {
		t.Fatalf("hunks differ from git:\nours:\n%s\ngit:\n%s", gotHunks, gitHunks)
	}
}

func TestUnifiedLargeReplacementIsBounded(t *testing.T) {
	var a, b strings.Builder
	for i := 0; i < 5000; i++ {
		a.WriteString("a line\n")
		b.WriteString("b line\n")
	}
	got := Unified("a", "b", a.String(), b.String())
	if strings.Count(got, "\n-a line") != 5000 || strings.Count(got, "\n+b line") != 5000 {
		t.Fatalf("large replacement not shown in full")
	}
}
