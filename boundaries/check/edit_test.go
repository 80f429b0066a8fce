package check

import (
	"strings"
	"testing"

	"github.com/audioproof/audioproof/boundaries/policy"
)

func TestApplyEdit(t *testing.T) {
	blk := policy.Block{Name: "b", Text: "    reject();\n"}
	opt := policy.Block{Name: "o", Text: "    log();\n", Optional: true}
	base := "f() {\n    parse();\n    run();\n}\n"
	once := "f() {\n    parse();\n    reject();\n    run();\n}\n"
	cases := []struct {
		name, base, cand string
		blocks           []policy.Block
		verdict          string
		problem          string
	}{
		{"inserted once", base, once, []policy.Block{blk}, "inserted", ""},
		{"inserted once, CRLF file", base, strings.ReplaceAll(once, "\n", "\r\n"), []policy.Block{blk}, "inserted", ""},
		{"inserted once, CRLF base", strings.ReplaceAll(base, "\n", "\r\n"), once, []policy.Block{blk}, "inserted", ""},
		{"missing", base, base, []policy.Block{blk}, "failed", "b: missing"},
		{"optional missing", base, base, []policy.Block{opt}, "unchanged", ""},
		{"twice", base, strings.Replace(once, "    run", "    reject();\n    run", 1), []policy.Block{blk}, "failed", "inserted 2 times"},
		{"extra change", base, strings.Replace(once, "run", "walk", 1), []policy.Block{blk}, "failed", "other changes"},
		{"in base, unchanged", once, once, []policy.Block{blk}, "unchanged", ""},
		{"in base, copied", once, strings.Replace(once, "    run", "    reject();\n    run", 1), []policy.Block{blk}, "failed", "a second copy is not allowed"},
		{"in base, removed", once, base, []policy.Block{blk}, "failed", "removed"},
		{"two blocks", base, "f() {\n    log();\n    parse();\n    reject();\n    run();\n}\n", []policy.Block{blk, opt}, "inserted", ""},
	}
	for _, tc := range cases {
		out := applyEdit("f.c", tc.base, tc.cand, tc.blocks)
		if out.verdict != tc.verdict {
			t.Errorf("%s: verdict %s, want %s (problems %v)", tc.name, out.verdict, tc.verdict, out.problems)
		}
		joined := strings.Join(out.problems, "; ")
		if tc.problem == "" && joined != "" || tc.problem != "" && !strings.Contains(joined, tc.problem) {
			t.Errorf("%s: problems %q, want %q", tc.name, joined, tc.problem)
		}
	}
	// The diff of an extra change shows that change and not the allowed block.
	out := applyEdit("f.c", base, strings.Replace(once, "run", "walk", 1), []policy.Block{blk})
	if !strings.Contains(out.diff, "-    run();\n+    walk();\n") || strings.Contains(out.diff, "reject") {
		t.Errorf("diff:\n%s", out.diff)
	}
}
