package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestEntryMatching(t *testing.T) {
	cases := []struct {
		spec string
		kind EntryKind
		yes  []string
		no   []string
	}{
		{"app/cli", KindPath, []string{"app/cli", "app/cli/main.cpp", "app/cli/x/y.h"}, []string{"app/cli2", "app/client.cpp", "app"}},
		{"app/server/http.cpp", KindPath, []string{"app/server/http.cpp"}, []string{"app/server/http.cpp.orig", "app/server/http.h"}},
		{"src/models/", KindFolder, []string{"src/models/a.cpp", "src/models/x/b.cpp"}, []string{"src/models", "src/models2/a.cpp"}},
		{"include/**/*.h", KindGlob, []string{"include/a.h", "include/x/y/z.h"}, []string{"include/a.cpp", "src/include/a.h", "include"}},
		{"**/*.proto", KindGlob, []string{"a.proto", "x/y/a.proto"}, []string{"a.proto.bak"}},
		{"src/*/CMakeLists.txt", KindGlob, []string{"src/a/CMakeLists.txt"}, []string{"src/CMakeLists.txt", "src/a/b/CMakeLists.txt"}},
		{"external/ggml/**", KindGlob, []string{"external/ggml/a", "external/ggml/x/y"}, []string{"external/ggml", "external/ggmlx/a"}},
		{"vendor/*/", KindGlob, []string{"vendor/a/b.c", "vendor/a/x/y.c"}, []string{"vendor/a", "vendor/b.c"}},
	}
	for _, tc := range cases {
		e, err := parseEntry(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if e.Kind != tc.kind {
			t.Errorf("%s: kind %s, want %s", tc.spec, e.Kind, tc.kind)
		}
		for _, p := range tc.yes {
			if !e.Matches(p) {
				t.Errorf("%s should match %s", tc.spec, p)
			}
		}
		for _, p := range tc.no {
			if e.Matches(p) {
				t.Errorf("%s should not match %s", tc.spec, p)
			}
		}
	}
}

func TestGlobPrefix(t *testing.T) {
	for spec, want := range map[string]string{
		"include/**/*.h":       "include",
		"**/*.proto":           "",
		"src/models/*.cpp":     "src/models",
		"src/*/CMakeLists.txt": "src",
		"app/cli":              "app/cli",
	} {
		e, err := parseEntry(spec)
		if err != nil {
			t.Fatal(err)
		}
		if e.Prefix != want {
			t.Errorf("%s: prefix %q, want %q", spec, e.Prefix, want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for name, js := range map[string]string{
		"absolute":       `{"version":1,"protected":["/etc"]}`,
		"dotdot":         `{"version":1,"protected":["a/../../b"]}`,
		"dotgit":         `{"version":1,"protected":[".git/config"]}`,
		"root":           `{"version":1,"protected":["."]}`,
		"backslash":      `{"version":1,"protected":["a\\b"]}`,
		"glob edit":      `{"version":1,"allowed_edits":[{"path":"a/*.c","blocks":[{"text":"x"}]}]}`,
		"no blocks":      `{"version":1,"allowed_edits":[{"path":"a.c","blocks":[]}]}`,
		"empty block":    `{"version":1,"allowed_edits":[{"path":"a.c","blocks":[{"text":"  \n"}]}]}`,
		"dup block":      `{"version":1,"allowed_edits":[{"path":"a.c","blocks":[{"text":"x\n"},{"text":"x\r\n"}]}]}`,
		"trailing":       `{"version":1,"protected":["a"]} {}`,
		"wrong type":     `{"version":"1","protected":["a"]}`,
		"file in preset": `{"version":1,"allowed_edits":[{"path":"a.c","blocks":[{"file":"b.txt"}]}]}`,
	} {
		if _, err := Parse([]byte(js), name, nil); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: accepted or wrong error: %v", name, err)
		}
	}
}

func TestParseMergesEditsAndNormalisesBlocks(t *testing.T) {
	js := `{"version":1,"protected":["a/","a/"],"allowed_edits":[
		{"path":"r.c","blocks":[{"name":"one","text":"x\r\ny\r\n"}]},
		{"path":"./r.c","blocks":[{"file":"two.txt","optional":true}]}]}`
	p, err := Parse([]byte(js), "t", func(rel string) ([]byte, error) {
		if rel != "two.txt" {
			t.Fatalf("read %q", rel)
		}
		return []byte("z\r\n"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Protected) != 1 {
		t.Errorf("duplicate protected entry kept: %v", p.Protected)
	}
	if len(p.Edits) != 1 || len(p.Edits[0].Blocks) != 2 {
		t.Fatalf("edits not merged per file: %+v", p.Edits)
	}
	b := p.Edits[0].Blocks
	if b[0].Text != "x\ny\n" || b[1].Text != "z\n" || !b[1].Optional || b[1].Source != "two.txt" || b[1].Name != "block 2" {
		t.Errorf("blocks: %+v", b)
	}
	if _, ok := p.EditFor("r.c"); !ok {
		t.Error("EditFor(r.c) not found")
	}
}

func TestPresetAudiocpp(t *testing.T) {
	p, err := Preset("audiocpp")
	if err != nil {
		t.Fatal(err)
	}
	var specs []string
	for _, e := range p.Protected {
		specs = append(specs, e.Spec)
	}
	want := "app/server/runtime.h app/server/busy_guard.h app/server/http.h app/server/http.cpp app/server/frontend.h app/server/frontend.cpp include/engine/framework/runtime/session.h app/cli src/models include/engine/models src/community_models include/engine/community_models external/ggml"
	if strings.Join(specs, " ") != want {
		t.Errorf("protected list:\n%s\nwant:\n%s", strings.Join(specs, " "), want)
	}
	if len(p.Edits) != 1 || p.Edits[0].Path != "app/server/runtime.cpp" || len(p.Edits[0].Blocks) != 1 {
		t.Fatalf("edits: %+v", p.Edits)
	}
	blk := p.Edits[0].Blocks[0].Text
	if !strings.HasPrefix(blk, "    if (body.find(\"slots\") != nullptr) {\n") || !strings.HasSuffix(blk, "    }\n") ||
		!strings.Contains(blk, `"slots requires --parallel-jobs at server startup"`) || strings.Count(blk, "\n") != 5 {
		t.Errorf("block:\n%s", blk)
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "known presets: audiocpp") {
		t.Errorf("unknown preset error: %v", err)
	}
}
