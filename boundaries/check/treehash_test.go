package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
)

// TestIndexTreeHashesMatchGit checks the tree hashes computed from the index
// against the trees git itself wrote for the same content, for every folder.
func TestIndexTreeHashesMatchGit(t *testing.T) {
	dir, _ := genRepo(t, 300, false)
	// Names that sort differently as folders and files ("a.b" < "a/" < "a0").
	for _, p := range []string{"src/models/a.b", "src/models/a/x.c", "src/models/a0", "src/models/exe.sh", "src/models/link"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "src/models/a.b"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(dir, "src/models/a/x.c"), []byte("2"), 0o644)
	os.WriteFile(filepath.Join(dir, "src/models/a0"), []byte("3"), 0o644)
	os.WriteFile(filepath.Join(dir, "src/models/exe.sh"), []byte("4"), 0o755)
	os.Symlink("a0", filepath.Join(dir, "src/models/link"))
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "-m", "more")
	repo, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := repo.Storer.Index()
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{repo: repo, idx: idx}
	got := c.indexTreeHashes([]string{""})
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(runGit(t, dir, "ls-tree", "-r", "-d", "HEAD")), "\n") {
		// "040000 tree <hash>\t<path>"
		f := strings.Fields(line)
		path := line[strings.IndexByte(line, '\t')+1:]
		if got[path].String() != f[2] {
			t.Errorf("%s: index tree hash %s, git wrote %s", path, got[path], f[2])
		}
		n++
	}
	root := strings.TrimSpace(runGit(t, dir, "rev-parse", "HEAD^{tree}"))
	if got[""].String() != root {
		t.Errorf("root: %s, git %s", got[""], root)
	}
	if n < 50 {
		t.Fatalf("only %d folders compared", n)
	}
}
